package model

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// BackendFeatures are the backend settings of health checking, session
// persistence, client identity, access control, authentication and rate
// limiting. Every field is validated and the struct is comparable, so the
// renderer can tell a structural change with ==.
type BackendFeatures struct {
	// Deny, when not 0, is the status every request gets: a
	// security-relevant setting (access lists, auth, rate limiting) had an
	// invalid value, and such a backend fails closed rather than open.
	Deny int

	CheckHTTP    HTTPCheck
	TimeoutCheck time.Duration
	// TimeoutServer overrides the defaults section's timeout server for
	// this backend (an Ingress or Service timeout-server); 0 = none.
	TimeoutServer time.Duration
	// PodMaxconn is the maxconn of each server (pod-maxconn); 0 = none.
	PodMaxconn   int
	AbortOnClose bool

	// Cookie is the cookie-persistence cookie name; "" = no persistence.
	Cookie string
	// CookieStatic: the cookie's value is the server slot's name
	// (cookie-persistence-no-dynamic) instead of a hash of its address.
	CookieStatic bool

	// SrcIPHeader is the header whose value replaces the client address
	// before access lists and rate limiting; "" = the connection's source.
	SrcIPHeader string
	// SendProxy is the server keyword for send-proxy-protocol:
	// "send-proxy", "send-proxy-v2", "send-proxy-v2-ssl",
	// "send-proxy-v2-ssl-cn"; "" = none.
	SendProxy string

	AllowList CIDRList
	DenyList  CIDRList

	// AuthRealm is set when basic authentication is on; AuthUsers then
	// holds at least one user.
	AuthRealm string
	AuthUsers Credentials

	RateLimit RateLimit
}

// HTTPCheck is check-http: the request of the HTTP health check.
type HTTPCheck struct {
	Method string // GET, HEAD, OPTIONS
	Path   string // "" = TCP checks only
	// Version is HTTP/1.0 or HTTP/1.1 when the value names one; Host, the
	// Host header the peer's "HTTP/1.1\r\nHost:\ NAME" form sends.
	Version, Host string
}

// RateLimit is the rate-limit-* settings; Requests 0 means off.
type RateLimit struct {
	Requests int
	Period   time.Duration
	Size     int
	Status   int
	// Whitelist are the client networks never limited.
	Whitelist CIDRList
}

// CIDRList is a validated list of canonical prefixes separated by single
// spaces. A string keeps the structs holding it comparable.
type CIDRList string

// Prefixes returns the list's prefixes.
func (l CIDRList) Prefixes() []string {
	if l == "" {
		return nil
	}
	return strings.Split(string(l), " ")
}

// Credentials is a validated userlist: "name hash" lines joined by "\n",
// sorted by name. A string keeps BackendFeatures comparable.
type Credentials string

// User is one basic-auth user with its crypt(3) password hash.
type User struct {
	Name, Hash string
}

// Users returns the credentials' users, sorted by name.
func (c Credentials) Users() []User {
	if c == "" {
		return nil
	}
	var out []User
	for _, l := range strings.Split(string(c), "\n") {
		name, hash, _ := strings.Cut(l, " ")
		out = append(out, User{Name: name, Hash: hash})
	}
	return out
}

// Fail-closed statuses: an access list that cannot be read forbids, an
// authentication or rate limit that cannot be set up is unavailable.
const (
	denyForbidden   = 403
	denyUnavailable = 503
)

// Reasons for the problems of this file.
const (
	ReasonAuthSecretNotFound = "AuthSecretNotFound"
	ReasonInvalidAuthSecret  = "InvalidAuthSecret"
	ReasonInvalidAuth        = "InvalidAuth"
)

// defaultAuthRealm is the realm of the HAProxy Kubernetes Ingress Controller.
const defaultAuthRealm = "Protected Content"

// backendFeatureDraft holds the settings that only shape how
// BackendFeatures are computed once the builder can look at Secrets.
type backendFeatureDraft struct {
	authType   string
	authSecret string // NAME or NAMESPACE/NAME
	authRealm  string
	// staticCookie is cookie-persistence-no-dynamic, which gives way to
	// cookie-persistence (finishFeatures).
	staticCookie string
}

// guardedSetting is backendSetting for a security-relevant key: an invalid
// value is kept at its scope (so it still beats lower scopes) and makes the
// backend answer status to every request.
func guardedSetting[T any](s Setting, status int, p parser[T], set func(*backendDraft, T)) Setting {
	s = backendSetting(s, p, set)
	s.failClosed = status
	s.setBackend = func(b *backendDraft, raw string) {
		v, err := p.parse(raw)
		if err != nil || raw == refusedValue {
			b.failClosed(status)
			return
		}
		set(b, v)
	}
	return s
}

func (b *backendDraft) failClosed(status int) {
	if b.Features.Deny == 0 {
		b.Features.Deny = status
	}
}

func backendFeatureSettings() []Setting {
	return []Setting{
		// Health and load.
		backendSetting(Setting{
			Name: "check-http", Example: "/healthz", Scopes: backendScopes,
			Doc: "HTTP health check request: a path, or a method (GET, HEAD, OPTIONS) and a path, e.g. \"/healthz\" or \"HEAD /healthz\", optionally followed by HTTP/1.0 or HTTP/1.1 and, as the HAProxy Kubernetes Ingress Controller writes it, a Host header: \"HEAD /healthz HTTP/1.1\\r\\nHost:\\ www.example\" (sent with http-check send). A server answering other than 2xx/3xx is taken out until it passes again.",
		}, httpCheckParser(), func(b *backendDraft, v HTTPCheck) { b.Features.CheckHTTP = v }),
		backendSetting(Setting{
			Name: "timeout-check", Example: "5s", Scopes: backendScopes,
			Doc: "Extra read timeout of a health check once connected (HAProxy's default: the check interval).",
		}, durationParser(), func(b *backendDraft, v time.Duration) { b.Features.TimeoutCheck = v }),
		backendSetting(Setting{
			Name: "pod-maxconn", Example: "100", Scopes: backendScopes,
			Doc: "Maximum concurrent connections to each pod; more wait in the backend queue. Perimeter runs one HAProxy per edge host, so the value applies as is (it is not divided by a replica count).",
		}, intRange(1, 1_000_000), func(b *backendDraft, v int) { b.Features.PodMaxconn = v }),
		backendSetting(Setting{
			Name: "abortonclose", Example: "true", Scopes: backendScopes, Default: "false",
			Doc: "Drop a queued or unsent request whose client has closed the connection.",
		}, boolParser(), func(b *backendDraft, v bool) { b.Features.AbortOnClose = v }),

		// Persistence.
		backendSetting(Setting{
			Name: "cookie-persistence", Example: "SERVERID", Scopes: backendScopes,
			Doc: "Sticky sessions: name of the cookie inserted to pin a client to a pod. The value is derived from the pod address (dynamic cookies), so it survives endpoint changes and reloads.",
		}, cookieNameParser(), func(b *backendDraft, v string) { b.Features.Cookie = v }),
		backendSetting(Setting{
			Name: "cookie-persistence-no-dynamic", Example: "SERVERID", Scopes: backendScopes,
			Doc: "Sticky sessions with a static cookie: its value names the server slot (SRV_1, SRV_2, ...) rather than a hash of the pod address. A pod keeps its slot while it lives, but the same pod may hold another slot on another edge host or after a restart. cookie-persistence wins when both are set.",
		}, cookieNameParser(), func(b *backendDraft, v string) { b.feat.staticCookie = v }),

		// Client identity.
		guardedSetting(Setting{
			Name: "src-ip-header", Example: "X-Real-IP", Scopes: backendScopes,
			Doc: "Take the client address from this request header (set by a trusted proxy in front) for access lists and rate limiting. Invalid: the backend answers 403.",
		}, denyForbidden, headerNameParser(), func(b *backendDraft, v string) { b.Features.SrcIPHeader = v }),
		backendSetting(Setting{
			Name: "send-proxy-protocol", Example: "proxy-v2", Scopes: backendScopes,
			Doc: "Send the PROXY protocol header to the pods: proxy-v1 (or v1), proxy-v2 (v2), proxy-v2-ssl (v2-ssl), proxy-v2-ssl-cn (v2-ssl-cn).",
		}, sendProxyParser(), func(b *backendDraft, v string) { b.Features.SendProxy = v }),

		// Access control.
		guardedSetting(Setting{
			Name: "allow-list", Example: "10.0.0.0/8, 2001:db8::/32", Aliases: []string{"whitelist"}, Scopes: backendScopes,
			Doc: "Only clients from these networks are served; others get 403. patterns/<file> names a key of --configmap-patternfiles instead, one address or CIDR per line. Invalid (a missing file too): every request gets 403.",
		}, denyForbidden, cidrListParser(), func(b *backendDraft, v CIDRList) { b.Features.AllowList = v }),
		guardedSetting(Setting{
			Name: "deny-list", Example: "203.0.113.0/24", Aliases: []string{"blacklist"}, Scopes: backendScopes,
			Doc: "Clients from these networks get 403. patterns/<file> names a key of --configmap-patternfiles instead, one address or CIDR per line. Invalid (a missing file too): every request gets 403.",
		}, denyForbidden, cidrListParser(), func(b *backendDraft, v CIDRList) { b.Features.DenyList = v }),

		// Authentication.
		guardedSetting(Setting{
			Name: "auth-type", Example: "basic-auth", Scopes: backendScopes,
			Doc: "basic-auth turns on HTTP basic authentication with the users of auth-secret. Invalid: every request gets 503.",
		}, denyUnavailable, enumParser("basic-auth"), func(b *backendDraft, v string) { b.feat.authType = v }),
		guardedSetting(Setting{
			Name: "auth-secret", Example: "web-users", Scopes: backendScopes,
			Doc: "Secret (NAME in the Ingress namespace, or NAMESPACE/NAME) whose keys are user names and values crypt(3) password hashes (e.g. from `openssl passwd -6`): DES, $1$, $5$/$6$ with at most 5000 rounds, bcrypt with a cost of at most 12, yescrypt with default parameters; a user with another hash is ignored. Missing or without a valid user: every request gets 503.",
		}, denyUnavailable, secretRefParser(), func(b *backendDraft, v string) { b.feat.authSecret = v }),
		guardedSetting(Setting{
			Name: "auth-realm", Example: "Admin Area", Scopes: backendScopes, Default: defaultAuthRealm,
			Doc: "Realm announced in WWW-Authenticate. Invalid: every request gets 503.",
		}, denyUnavailable, realmParser(), func(b *backendDraft, v string) { b.feat.authRealm = v }),

		// Rate limiting.
		guardedSetting(Setting{
			Name: "rate-limit-requests", Example: "100", Scopes: backendScopes,
			Doc: "Maximum requests per client address within rate-limit-period; more get rate-limit-status-code. Invalid: every request gets 503.",
		}, denyUnavailable, intRange(1, 1_000_000_000), func(b *backendDraft, v int) { b.Features.RateLimit.Requests = v }),
		guardedSetting(Setting{
			Name: "rate-limit-period", Example: "10s", Scopes: backendScopes, Default: "1s",
			Doc: "Period over which rate-limit-requests is counted. Invalid: every request gets 503.",
		}, denyUnavailable, durationParser(), func(b *backendDraft, v time.Duration) { b.Features.RateLimit.Period = v }),
		guardedSetting(Setting{
			Name: "rate-limit-size", Example: "1m", Scopes: backendScopes, Default: "100k",
			Doc: "Number of client addresses tracked (suffix k or m allowed), at most 1m: each entry costs memory and clients choose their keys. Invalid: every request gets 503.",
		}, denyUnavailable, sizeParser(1, maxRateLimitSize), func(b *backendDraft, v int) { b.Features.RateLimit.Size = v }),
		guardedSetting(Setting{
			Name: "rate-limit-status-code", Example: "429", Scopes: backendScopes, Default: "403",
			Doc: "Status of requests over the limit. Invalid: every request gets 503.",
		}, denyUnavailable, statusParser(), func(b *backendDraft, v int) { b.Features.RateLimit.Status = v }),
		guardedSetting(Setting{
			Name: "rate-limit-whitelist", Example: "10.0.0.0/8", Scopes: backendScopes,
			Doc: "Client networks never rate limited. patterns/<file> names a key of --configmap-patternfiles instead, one address or CIDR per line. Invalid (a missing file too): every request gets 503.",
		}, denyUnavailable, cidrListParser(), func(b *backendDraft, v CIDRList) { b.Features.RateLimit.Whitelist = v }),

		// Frontend: PROXY protocol accepted from these sources.
		globalSetting(Setting{
			Name: "proxy-protocol", Example: "10.0.0.0/8, 203.0.113.7", Scopes: ScopeConfigMap,
			Doc: "Accept the PROXY protocol (v1 or v2) on the HTTP and HTTPS frontends from these source networks; the address it carries becomes the client address. Other sources connect without it.",
		}, cidrListParser(), func(g *Global, v CIDRList) { g.ProxyProtocol = v }),
	}
}

// finishFeatures completes what needs more than one key or another
// object: the auth Secret.
func (b *builder) finishFeatures(d *backendDraft, st *backendState) {
	f := d.feat
	switch {
	case f.staticCookie == "":
	case d.Features.Cookie == "":
		d.Features.Cookie, d.Features.CookieStatic = f.staticCookie, true
	case d.Features.Cookie != f.staticCookie:
		b.userProblem(st, ReasonAnnotationConflict, "cookie-persistence %s and cookie-persistence-no-dynamic %s both apply to backend %s: the dynamic cookie %s is used",
			d.Features.Cookie, f.staticCookie, st.name, d.Features.Cookie)
	}
	if f.authType == "" {
		return
	}
	if f.authSecret == "" {
		if d.Features.Deny != 0 {
			// auth-secret was refused and reported already.
			return
		}
		d.failClosed(denyUnavailable)
		b.userProblem(st, ReasonInvalidAuth, "auth-type %s without auth-secret; backend %s answers %d", f.authType, st.name, denyUnavailable)
		return
	}
	ns, name, ok := strings.Cut(f.authSecret, "/")
	if !ok {
		ns, name = st.namespace, f.authSecret
	}
	ref := ns + "/" + name
	if i, found := slices.BinarySearch(b.d.SecretRefs, ref); !found {
		b.d.SecretRefs = slices.Insert(b.d.SecretRefs, i, ref)
	}
	if why := b.s.RefusedSecrets[ref]; why != "" {
		d.failClosed(denyUnavailable)
		b.userProblem(st, ReasonSecretNotWatched, "auth-secret %s is not read: %s; backend %s answers %d", name, why, st.name, denyUnavailable)
		return
	}
	sec := b.secret(nsName{ns, name})
	if sec == nil {
		// Closed either way; a Secret whose watch has just started is not
		// reported as missing.
		d.failClosed(denyUnavailable)
		if slices.Contains(b.s.PendingSecrets, ref) {
			return
		}
		b.userProblem(st, ReasonAuthSecretNotFound, "auth-secret %s not found; backend %s answers %d", ref, st.name, denyUnavailable)
		return
	}
	var lines []string
	for _, user := range slices.Sorted(maps.Keys(sec.Data)) {
		hash := strings.TrimRight(string(sec.Data[user]), "\r\n")
		if err := checkUser(user, hash); err != nil {
			b.userProblem(st, ReasonInvalidAuthSecret, "auth-secret %s: user %q: %v; the user is ignored", ref, user, err)
			continue
		}
		lines = append(lines, user+" "+hash)
	}
	if len(lines) == 0 {
		d.failClosed(denyUnavailable)
		b.userProblem(st, ReasonInvalidAuthSecret, "auth-secret %s has no valid user; backend %s answers %d", ref, st.name, denyUnavailable)
		return
	}
	d.Features.AuthRealm = f.authRealm
	if d.Features.AuthRealm == "" {
		d.Features.AuthRealm = defaultAuthRealm
	}
	d.Features.AuthUsers = Credentials(strings.Join(lines, "\n"))
}

// maxRateLimitSize bounds a stick table: with src-ip-header, clients choose
// the keys, so a table fills up to its size (about 100 bytes an entry).
const maxRateLimitSize = 1_000_000

// maxCIDRs bounds a list so one annotation cannot make haproxy.cfg huge.
const maxCIDRs = 4096

// cidrListParser accepts addresses and CIDR prefixes, IPv4 or IPv6,
// separated by commas and/or blanks. Addresses become single-address
// prefixes; host bits are cleared.
func cidrListParser() parser[CIDRList] {
	return parser[CIDRList]{
		desc: "list of IP addresses or CIDRs (IPv4, IPv6) separated by commas or spaces",
		parse: func(s string) (CIDRList, error) {
			if strings.HasPrefix(strings.TrimSpace(s), "patterns/") {
				// checkValue expands pattern files for the settings that
				// take them; anywhere else, say so rather than "not a CIDR".
				return "", errors.New("pattern files (patterns/<file>) are read only by allow-list, deny-list and rate-limit-whitelist")
			}
			fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })
			if len(fields) == 0 {
				return "", errors.New("empty list")
			}
			if len(fields) > maxCIDRs {
				return "", fmt.Errorf("more than %d entries", maxCIDRs)
			}
			out := make([]string, 0, len(fields))
			for _, f := range fields {
				p, err := parseCIDR(f)
				if err != nil {
					return "", err
				}
				out = append(out, p.String())
			}
			slices.Sort(out)
			return CIDRList(strings.Join(slices.Compact(out), " ")), nil
		},
	}
}

func parseCIDR(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// httpCheckMethods are the methods a health check may use: safe ones, with
// no body.
var httpCheckMethods = []string{"GET", "HEAD", "OPTIONS"}

func httpCheckParser() parser[HTTPCheck] {
	return parser[HTTPCheck]{
		desc: "[GET|HEAD|OPTIONS ]<path>[ HTTP/1.0|HTTP/1.1[\\r\\nHost:\\ <host>]]",
		parse: func(s string) (HTTPCheck, error) {
			c := HTTPCheck{Method: "GET", Path: s}
			if m, rest, ok := strings.Cut(s, " "); ok {
				if !slices.Contains(httpCheckMethods, m) {
					return HTTPCheck{}, fmt.Errorf("method %q not one of %s", m, strings.Join(httpCheckMethods, ", "))
				}
				c.Method, c.Path = m, rest
				if p, ver, ok := strings.Cut(rest, " "); ok {
					c.Path = p
					var err error
					if c.Version, c.Host, err = httpCheckVersion(ver); err != nil {
						return HTTPCheck{}, err
					}
				}
			}
			if err := checkRequestTarget(c.Path); err != nil {
				return HTTPCheck{}, err
			}
			return c, nil
		},
	}
}

// httpCheckVersion reads the HTTP-version form of check-http: a version,
// then optionally the one header the peer documents, Host, written as
// HAProxy's legacy "\r\nHost:\ NAME" (escaped, or as YAML turns it into
// CR LF and a space). It is rendered with http-check send, not by hiding
// the header in the version as that legacy form did.
func httpCheckVersion(v string) (version, host string, err error) {
	v = strings.NewReplacer(`\r\n`, "\r\n", `\ `, " ").Replace(v)
	version, hdr, hasHdr := strings.Cut(v, "\r\n")
	if version != "HTTP/1.0" && version != "HTTP/1.1" {
		return "", "", fmt.Errorf("version %q is not HTTP/1.0 or HTTP/1.1", version)
	}
	if !hasHdr {
		return version, "", nil
	}
	name, value, ok := strings.Cut(hdr, ":")
	host = strings.TrimSpace(value)
	if !ok || !strings.EqualFold(name, "Host") || host == "" {
		return "", "", errors.New(`only a Host header may follow the version ("HTTP/1.1\r\nHost:\ example.com")`)
	}
	h, port, hasPort := strings.Cut(host, ":")
	if checkDNSName(strings.ToLower(h)) != nil || (hasPort && !allDigits(port)) {
		return "", "", fmt.Errorf("host %q is not a host name", host)
	}
	return version, strings.ToLower(host), nil
}

// checkRequestTarget keeps a health-check path to characters that need no
// quoting in haproxy.cfg: no blanks, quotes, backslashes, '#', '$', '%' or
// braces.
func checkRequestTarget(p string) error {
	if !strings.HasPrefix(p, "/") {
		return errors.New("path must start with /")
	}
	if len(p) > 1024 {
		return errors.New("path longer than 1024 characters")
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(isAlnum(c) || strings.IndexByte("-._~/?=&+:@!*,", c) >= 0) {
			return fmt.Errorf("path has a character %q outside [A-Za-z0-9-._~/?=&+:@!*,]", c)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// cookieNameParser accepts a cookie name of [A-Za-z0-9._-], at most 64.
func cookieNameParser() parser[string] {
	return parser[string]{
		desc: "cookie name: [A-Za-z0-9._-], at most 64 characters",
		parse: func(s string) (string, error) {
			if s == "" || len(s) > 64 {
				return "", errors.New("want 1 to 64 characters")
			}
			for i := 0; i < len(s); i++ {
				if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
					return "", fmt.Errorf("character %q outside [A-Za-z0-9._-]", c)
				}
			}
			return s, nil
		},
	}
}

func headerNameParser() parser[string] {
	return parser[string]{
		desc:  "header name: [A-Za-z0-9-]",
		parse: func(s string) (string, error) { return s, validHeaderName(s) },
	}
}

// sendProxyKeywords are the send-proxy-protocol values and the server
// keyword each gives.
var sendProxyKeywords = map[string]string{
	"proxy": "send-proxy", "proxy-v1": "send-proxy", "v1": "send-proxy",
	"proxy-v2": "send-proxy-v2", "v2": "send-proxy-v2",
	"proxy-v2-ssl": "send-proxy-v2-ssl", "v2-ssl": "send-proxy-v2-ssl",
	"proxy-v2-ssl-cn": "send-proxy-v2-ssl-cn", "v2-ssl-cn": "send-proxy-v2-ssl-cn",
}

// sendProxyParser maps the values of the HAProxy Kubernetes Ingress
// Controller (proxy-v1 ...) and short forms (v1 ...) to server keywords.
func sendProxyParser() parser[string] {
	kw := sendProxyKeywords
	return parser[string]{
		desc: "proxy-v1|proxy-v2|proxy-v2-ssl|proxy-v2-ssl-cn (or v1|v2|v2-ssl|v2-ssl-cn)",
		parse: func(s string) (string, error) {
			if k, ok := kw[s]; ok {
				return k, nil
			}
			return "", errors.New("unknown value (want proxy-v1, proxy-v2, proxy-v2-ssl or proxy-v2-ssl-cn)")
		},
	}
}

// secretRefParser accepts NAME or NAMESPACE/NAME.
func secretRefParser() parser[string] {
	return parser[string]{
		desc: "Secret NAME or NAMESPACE/NAME",
		parse: func(s string) (string, error) {
			ns, name, ok := strings.Cut(s, "/")
			if !ok {
				name = s
			} else if err := checkDNSLabel(ns); err != nil {
				return "", fmt.Errorf("namespace %q: %v", ns, err)
			}
			if err := checkDNSName(name); err != nil {
				return "", fmt.Errorf("name %q: %v", name, err)
			}
			return s, nil
		},
	}
}

// realmParser keeps a realm to characters that are literal inside double
// quotes in haproxy.cfg and in the WWW-Authenticate header.
func realmParser() parser[string] {
	return parser[string]{
		desc: "text of [A-Za-z0-9 ._-], at most 64 characters",
		parse: func(s string) (string, error) {
			if s == "" || len(s) > 64 {
				return "", errors.New("want 1 to 64 characters")
			}
			for i := 0; i < len(s); i++ {
				if c := s[i]; !isAlnum(c) && strings.IndexByte(" ._-", c) < 0 {
					return "", fmt.Errorf("character %q outside [A-Za-z0-9 ._-]", c)
				}
			}
			return s, nil
		},
	}
}

// sizeParser accepts an integer with an optional k (1000) or m (1000000)
// suffix, as HAProxy's stick-table size does.
func sizeParser(lo, hi int) parser[int] {
	return parser[int]{
		desc: fmt.Sprintf("integer with optional suffix k or m, %d..%d", lo, hi),
		parse: func(s string) (int, error) {
			mult, num := 1, s
			switch {
			case strings.HasSuffix(s, "k"):
				mult, num = 1000, s[:len(s)-1]
			case strings.HasSuffix(s, "m"):
				mult, num = 1_000_000, s[:len(s)-1]
			}
			if num == "" || !allDigits(num) || len(num) > 12 {
				return 0, errors.New("not a size (want e.g. 100k)")
			}
			n, _ := strconv.Atoi(num)
			n *= mult
			if n < lo || n > hi {
				return 0, fmt.Errorf("out of range (want %d..%d)", lo, hi)
			}
			return n, nil
		},
	}
}

// denyStatuses are the statuses HAProxy can answer with deny_status.
var denyStatuses = []int{200, 400, 403, 404, 405, 407, 408, 410, 413, 425, 429, 500, 503, 504}

func statusParser() parser[int] {
	var names []string
	for _, c := range denyStatuses {
		names = append(names, strconv.Itoa(c))
	}
	return parser[int]{
		desc: strings.Join(names, "|"),
		parse: func(s string) (int, error) {
			n, err := strconv.Atoi(s)
			if err != nil || !slices.Contains(denyStatuses, n) {
				return 0, fmt.Errorf("not a status HAProxy can deny with (want one of %s)", strings.Join(names, ", "))
			}
			return n, nil
		},
	}
}

// checkUser accepts a user name that is a Secret key and a crypt(3) hash
// made of the crypt alphabet (plus '$' separators and '=' in rounds=).
func checkUser(name, hash string) error {
	if name == "" || len(name) > 64 {
		return errors.New("user name must have 1 to 64 characters")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isAlnum(c) && strings.IndexByte("._-", c) < 0 {
			return fmt.Errorf("user name has a character %q outside [A-Za-z0-9._-]", c)
		}
	}
	if len(hash) < 13 || len(hash) > 512 {
		return errors.New("password hash must be a crypt(3) hash (13 to 512 characters)")
	}
	for i := 0; i < len(hash); i++ {
		if c := hash[i]; !isAlnum(c) && strings.IndexByte("./$=", c) < 0 {
			return errors.New("password is not a crypt(3) hash (characters outside [A-Za-z0-9./$=])")
		}
	}
	return checkHashCost(hash)
}

// Hash cost bounds. HAProxy checks a Basic-auth password with crypt(3)
// inline in its worker thread, on every request: a hash that takes seconds
// stalls that thread for every tenant until the watchdog kills HAProxy.
const (
	maxSHACryptRounds = 5000 // glibc's default when rounds= is absent
	maxBcryptCost     = 12
)

// checkHashCost accepts the crypt(3) schemes whose cost is bounded:
// DES (13 characters), MD5 ($1$), SHA-256/512 ($5$, $6$) with at most
// maxSHACryptRounds rounds, bcrypt ($2a$, $2b$, $2y$) with a cost of at
// most maxBcryptCost, yescrypt ($y$) with the default parameters (j9T, as
// mkpasswd writes them). Anything else could cost any amount of CPU.
func checkHashCost(hash string) error {
	if !strings.HasPrefix(hash, "$") {
		if len(hash) == 13 {
			return nil // traditional DES
		}
		return errors.New("unknown password hash scheme (want $1$, $5$, $6$, $2b$, $y$ or DES)")
	}
	parts := strings.Split(hash, "$")
	// parts[0] is empty: the hash starts with '$'.
	if len(parts) < 4 {
		return errors.New("password hash has too few $-separated fields")
	}
	switch id := parts[1]; id {
	case "1":
		return nil
	case "5", "6":
		rounds, ok := strings.CutPrefix(parts[2], "rounds=")
		if !ok {
			return nil
		}
		if rounds == "" || len(rounds) > 10 || !allDigits(rounds) {
			return fmt.Errorf("sha-crypt rounds=%q is not a number", rounds)
		}
		if n, _ := strconv.Atoi(rounds); n > maxSHACryptRounds {
			return fmt.Errorf("sha-crypt rounds=%d above %d: each request would cost too much CPU in HAProxy", n, maxSHACryptRounds)
		}
		return nil
	case "2a", "2b", "2y":
		cost := parts[2]
		if len(cost) != 2 || !allDigits(cost) {
			return fmt.Errorf("bcrypt cost %q is not a number", cost)
		}
		if n, _ := strconv.Atoi(cost); n > maxBcryptCost {
			return fmt.Errorf("bcrypt cost %d above %d: each request would cost too much CPU in HAProxy", n, maxBcryptCost)
		}
		return nil
	case "y":
		if parts[2] != "j9T" {
			return fmt.Errorf("yescrypt parameters %q: only the default j9T is accepted", parts[2])
		}
		return nil
	default:
		return fmt.Errorf("unknown password hash scheme $%s$ (want $1$, $5$, $6$, $2b$, $y$ or DES)", id)
	}
}

// dumpBackendFeatures writes the features that are set, one per line.
func dumpBackendFeatures(w *strings.Builder, b *Backend) {
	f := b.Features
	line := func(format string, args ...any) { fmt.Fprintf(w, "  "+format+"\n", args...) }
	if f.Deny != 0 {
		line("deny-all status=%d (fail closed)", f.Deny)
	}
	if f.CheckHTTP.Path != "" {
		line("check-http %s", strings.TrimSpace(strings.Join([]string{f.CheckHTTP.Method, f.CheckHTTP.Path, f.CheckHTTP.Version, f.CheckHTTP.Host}, " ")))
	}
	if f.TimeoutServer > 0 {
		line("timeout-server %s", dur(f.TimeoutServer))
	}
	if f.TimeoutCheck > 0 {
		line("timeout-check %s", dur(f.TimeoutCheck))
	}
	if f.PodMaxconn > 0 {
		line("pod-maxconn %d", f.PodMaxconn)
	}
	if f.AbortOnClose {
		line("abortonclose")
	}
	if f.Cookie != "" {
		if f.CookieStatic {
			line("cookie-persistence-no-dynamic %s", f.Cookie)
		} else {
			line("cookie-persistence %s", f.Cookie)
		}
	}
	if f.SrcIPHeader != "" {
		line("src-ip-header %s", f.SrcIPHeader)
	}
	if f.SendProxy != "" {
		line("send-proxy-protocol %s", f.SendProxy)
	}
	if f.AllowList != "" {
		line("allow-list %s", f.AllowList)
	}
	if f.DenyList != "" {
		line("deny-list %s", f.DenyList)
	}
	if f.AuthRealm != "" {
		var names []string
		for _, u := range f.AuthUsers.Users() {
			names = append(names, u.Name)
		}
		line("basic-auth realm=%q users=%s", f.AuthRealm, strings.Join(names, ","))
	}
	if rl := f.RateLimit; rl.Requests > 0 {
		line("rate-limit requests=%d period=%s size=%d status=%d whitelist=%s", rl.Requests, dur(rl.Period), rl.Size, rl.Status, rl.Whitelist)
	}
}
