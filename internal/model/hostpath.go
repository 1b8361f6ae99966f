package model

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
)

// checkHost accepts a lower-case DNS name (RFC 1123 subdomain) or a wildcard
// "*.<name>". Hosts go into map files only, but they are still checked here so
// a map key can never carry a space, a port or anything HAProxy would parse.
func checkHost(h string) error {
	name := h
	if rest, ok := strings.CutPrefix(h, "*."); ok {
		name = rest
	}
	if err := checkDNSName(name); err != nil {
		return err
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return errors.New("must be a DNS name, not an IP address")
	}
	return nil
}

func checkDNSName(name string) error {
	if name == "" {
		return errors.New("empty name")
	}
	if len(name) > 253 {
		return errors.New("longer than 253 characters")
	}
	for label := range strings.SplitSeq(name, ".") {
		if err := checkDNSLabel(label); err != nil {
			return err
		}
	}
	return nil
}

func checkDNSLabel(l string) error {
	switch {
	case l == "":
		return errors.New("empty label")
	case len(l) > 63:
		return fmt.Errorf("label %q longer than 63 characters", l)
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("label %q starts or ends with '-'", l)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("label %q has a character outside [a-z0-9-] (names must be lower case)", l)
		}
	}
	return nil
}

// pathByte marks the bytes allowed in a path: RFC 3986 pchar and "/", minus
// the quote sub-delimiter, plus '%' (checked separately for two hex digits).
var pathByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~!$&()*+,;=:@/%" {
		t[c] = true
	}
	return t
}()

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// MaxPathLength caps a rule's path. HAProxy reads map files in pieces of
// tune.bufsize (16 KiB) and takes every piece of a longer line as an entry
// of its own, so an unbounded path could smuggle an entry for another host
// into the maps. A host (at most 253 bytes) plus this cap, a backend name
// and a separator stay far below that limit, and no real application
// routes on longer paths.
const MaxPathLength = 4096

// checkPath accepts an absolute RFC 3986 path of at most MaxPathLength
// bytes. Like the API server's check
// for Exact and Prefix paths it refuses dot segments, "//" and an encoded
// "/", which would let a request slip past a prefix; here it applies to
// every path type, since ImplementationSpecific is served as Prefix.
func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return errors.New("must start with '/'")
	}
	if len(p) > MaxPathLength {
		return fmt.Errorf("%d bytes long, more than %d", len(p), MaxPathLength)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !pathByte[c] {
			return fmt.Errorf("character %q not allowed in a path", c)
		}
		if c == '%' && (i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2])) {
			return errors.New("'%' not followed by two hex digits")
		}
	}
	lower := strings.ToLower(p)
	for _, seq := range []string{"//", "/./", "/../", "%2f"} {
		if strings.Contains(lower, seq) {
			return fmt.Errorf("must not contain %q", seq)
		}
	}
	for _, suf := range []string{"/..", "/."} {
		if strings.HasSuffix(p, suf) {
			return fmt.Errorf("must not end with %q", suf)
		}
	}
	return nil
}

// servedPath checks a rule's path and maps it to what the model serves:
// ImplementationSpecific and a missing pathType become Prefix; an empty
// ImplementationSpecific path is "/"; a Prefix path loses its trailing "/"
// because Prefix matching is element-wise ("/foo/" is "/foo").
func servedPath(p string, pt *networkingv1.PathType) (string, PathType, error) {
	typ := PathPrefix
	if pt != nil {
		switch *pt {
		case networkingv1.PathTypeExact:
			typ = PathExact
		case networkingv1.PathTypePrefix:
		case networkingv1.PathTypeImplementationSpecific:
			if p == "" {
				p = "/"
			}
		default:
			return "", "", fmt.Errorf("unknown pathType %q", string(*pt))
		}
	} else if p == "" {
		p = "/"
	}
	if err := checkPath(p); err != nil {
		return "", "", err
	}
	if typ == PathPrefix {
		p = strings.TrimRight(p, "/")
		if p == "" {
			p = "/"
		}
	}
	return p, typ, nil
}

// shortPath keeps a path short enough for an Event message.
func shortPath(p string) string {
	const keep = 64
	if len(p) <= keep {
		return p
	}
	return p[:keep] + "..."
}
