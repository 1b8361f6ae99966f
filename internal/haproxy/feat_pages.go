package haproxy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// Error pages and TCP services (model/feat_pages.go): files named by their
// content and frontends of their own, parts of the head.

// errorPage is an error page as HAProxy loads it: a file named by its
// content, so a changed page is a new file and never changes under a
// running HAProxy.
type errorPage struct {
	code    int
	file    string // base name in the errorfiles directory
	content string
}

func errorPageOf(p model.ErrorPage) errorPage {
	sum := sha256.Sum256([]byte(p.Content))
	return errorPage{code: p.Code, file: fmt.Sprintf("%d-%s.http", p.Code, hex.EncodeToString(sum[:6])), content: p.Content}
}

func (r renderer) errorFilesDir() string {
	return filepath.Join(filepath.Dir(r.mapsDir), errorsDirName)
}

// featureExtras collects the head parts of want: error pages with a code
// HAProxy knows, TCP services whose backend exists, and the capture slots
// cs (captureSlots).
func featureExtras(want *model.Desired, st *state, cs captureSize, reject func(string, ...any)) extras {
	var e extras
	for _, p := range want.ErrorPages {
		if !slices.Contains(model.ErrorFileCodes, p.Code) {
			reject("error page for status %d: HAProxy has no such error; ignored", p.Code)
			continue
		}
		e.errorPages = append(e.errorPages, errorPageOf(p))
	}
	ports := map[int]bool{}
	for _, t := range want.TCPServices {
		b := st.backends[t.Backend]
		switch {
		case t.Port < 1 || t.Port > 65535 || ports[t.Port]:
			reject("TCP service port %d is not valid or appears twice; ignored", t.Port)
		case b == nil || !b.spec.TCP:
			reject("TCP service port %d: backend %q is not a TCP backend; ignored", t.Port, t.Backend)
		case !tcpSharesValid(t, st):
			reject("TCP service port %d: a weighted backend is not a TCP backend or a weight is not positive; ignored", t.Port)
		case t.SSL && (want.TLS.Default == nil || !safePEM(want.TLS.Default.PEM)):
			reject("TCP service port %d: TLS termination needs the default certificate, which is missing; the port is not served", t.Port)
		default:
			ports[t.Port] = true
			e.tcp = append(e.tcp, t)
		}
	}
	e.captures, e.captureLen = cs.n, cs.length
	e.gwBinds = gatewayBinds(want.GatewayBinds, reject)
	return e
}

// tcpSharesValid tells whether each weighted share of t has a positive
// weight and a TCP backend or none (refused).
func tcpSharesValid(t model.TCPService, st *state) bool {
	for _, sh := range t.Shares {
		if b := st.backends[sh.Backend]; sh.Weight <= 0 || sh.Backend != "" && (b == nil || !b.spec.TCP) {
			return false
		}
	}
	return true
}

// captureSize is how many request-capture slots the http frontend
// declares, and their length.
type captureSize struct{ n, length int }

// captureSlots finds the capture slots the backends of want that st keeps
// need.
func captureSlots(want *model.Desired, st *state) captureSize {
	var cs captureSize
	for _, b := range want.Backends {
		// Captures first: at thousands of backends the lookup costs more.
		if !hasCaptures(b) || st.backends[b.Name] == nil {
			continue
		}
		cs.n = max(cs.n, len(b.HTTP.Captures))
		cs.length = max(cs.length, b.HTTP.CaptureLen, 1)
	}
	return cs
}

func hasCaptures(b *model.Backend) bool {
	return b != nil && !b.TCP && len(b.HTTP.Captures) > 0
}

// tcpHosts are the addresses TCP services listen on: the daemon's IPv4
// and IPv6 bind addresses, whatever --disable-http says.
func tcpHosts(o Options) []string {
	var out []string
	if !o.DisableIPv4 {
		out = append(out, o.IPv4BindAddress)
	}
	if !o.DisableIPv6 {
		out = append(out, o.IPv6BindAddress)
	}
	return out
}
