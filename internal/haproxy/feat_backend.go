package haproxy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	parser "github.com/haproxytech/client-native/v6/config-parser"
	"github.com/haproxytech/client-native/v6/config-parser/common"
	"github.com/haproxytech/client-native/v6/config-parser/params"
	"github.com/haproxytech/client-native/v6/config-parser/parsers/actions"
	httpactions "github.com/haproxytech/client-native/v6/config-parser/parsers/http/actions"
	tcpactions "github.com/haproxytech/client-native/v6/config-parser/parsers/tcp/actions"
	tcptypes "github.com/haproxytech/client-native/v6/config-parser/parsers/tcp/types"
	"github.com/haproxytech/client-native/v6/config-parser/types"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// ACL names of this file's rules; upper-case, so they cannot collide with
// names derived from user input.
const (
	aclAllow       = "PM_ALLOW"
	aclDeny        = "PM_DENY"
	aclRateExempt  = "PM_RATE_EXEMPT"
	aclProxySource = "PM_PROXY_SOURCE"
	// aclChunk keeps acl lines well below HAProxy's 64 words per line;
	// lines with the same name are ORed.
	aclChunk = 40
)

// checkedFeatures re-checks what the model validated (defence in depth):
// what would be unsafe is dropped, and a dropped security setting makes
// the backend fail closed with 503.
func checkedFeatures(f model.BackendFeatures, reject func(format string, args ...any)) model.BackendFeatures {
	closed := func(what string, v any) {
		reject("%s %q is not valid; the backend answers 503", what, v)
		if f.Deny == 0 {
			f.Deny = 503
		}
	}
	if f.Deny != 0 && !slices.Contains([]int{403, 503}, f.Deny) {
		f.Deny = 503
	}
	if f.CheckHTTP.Path != "" && (!model.IsHTTPCheckMethod(f.CheckHTTP.Method) || !safePath(f.CheckHTTP.Path) ||
		!model.ValidHTTPCheckVersion(f.CheckHTTP.Version, f.CheckHTTP.Host)) {
		reject("check-http %q is not valid; TCP checks are used", f.CheckHTTP.Path)
		f.CheckHTTP = model.HTTPCheck{}
	}
	if f.TimeoutCheck < 0 {
		f.TimeoutCheck = 0
	}
	if f.TimeoutServer < 0 {
		f.TimeoutServer = 0
	}
	if f.PodMaxconn < 0 {
		f.PodMaxconn = 0
	}
	if f.Cookie != "" && !model.ValidCookieName(f.Cookie) {
		reject("cookie-persistence %q is not valid; no persistence", f.Cookie)
		f.Cookie = ""
	}
	if f.SendProxy != "" && !model.IsSendProxyKeyword(f.SendProxy) {
		reject("send-proxy-protocol %q is not valid; not sent", f.SendProxy)
		f.SendProxy = ""
	}
	if f.SrcIPHeader != "" && !model.ValidHeaderName(f.SrcIPHeader) {
		closed("src-ip-header", f.SrcIPHeader)
		f.SrcIPHeader = ""
	}
	for _, l := range []struct {
		name string
		list *model.CIDRList
	}{{"allow-list", &f.AllowList}, {"deny-list", &f.DenyList}, {"rate-limit-whitelist", &f.RateLimit.Whitelist}} {
		if !validCIDRList(*l.list) {
			closed(l.name, *l.list)
			*l.list = ""
		}
	}
	if f.AuthRealm != "" {
		ok := f.AuthUsers != "" && model.ValidRealm(f.AuthRealm)
		for _, u := range f.AuthUsers.Users() {
			ok = ok && model.ValidUser(u.Name, u.Hash)
		}
		if !ok {
			closed("auth-realm/users of", f.AuthRealm)
			f.AuthRealm, f.AuthUsers = "", ""
		}
	}
	if rl := f.RateLimit; rl.Requests > 0 && (rl.Period <= 0 || rl.Size <= 0 || !httpactions.AllowedErrorCode(int64(rl.Status))) {
		closed("rate-limit status", rl.Status)
		f.RateLimit.Requests = 0
	}
	return f
}

func validCIDRList(l model.CIDRList) bool {
	for _, p := range l.Prefixes() {
		if _, err := netip.ParsePrefix(p); err != nil {
			return false
		}
	}
	return true
}

// defaultServerOptions are the options every server of the backend gets.
func defaultServerOptions(spec backendSpec) []params.ServerOption {
	var opts []params.ServerOption
	if spec.Check {
		opts = append(opts, &params.ServerOptionWord{Name: "check"})
		if spec.CheckInterval > 0 {
			opts = append(opts, &params.ServerOptionValue{Name: "inter", Value: haproxyDuration(spec.CheckInterval)})
		}
	}
	f := spec.Features
	if f.PodMaxconn > 0 {
		opts = append(opts, &params.ServerOptionValue{Name: "maxconn", Value: strconv.Itoa(f.PodMaxconn)})
	}
	if f.SendProxy != "" {
		opts = append(opts, &params.ServerOptionWord{Name: f.SendProxy})
	}
	return opts
}

// backendFeatures renders the feature lines of a backend. Request rules go
// in this order: fail-closed deny, client address, access lists, rate
// limit, authentication (so a client over its limit cannot keep guessing
// passwords).
func (r renderer) backendFeatures(w *cfgWriter, b *backend) {
	const sec = parser.Backends
	name, f := b.spec.Name, b.spec.Features
	if f.AbortOnClose {
		w.set(sec, name, "option abortonclose", &types.SimpleOption{})
	}
	if f.CheckHTTP.Path != "" {
		w.set(sec, name, "option httpchk", &types.OptionHttpchk{Method: f.CheckHTTP.Method, URI: f.CheckHTTP.Path, Version: f.CheckHTTP.Version})
		if f.CheckHTTP.Host != "" {
			w.insert(sec, name, "http-check", &httpactions.CheckSend{Header: []httpactions.CheckSendHeader{{Name: "Host", Format: f.CheckHTTP.Host}}})
		}
	}
	if f.TimeoutServer > 0 {
		w.set(sec, name, "timeout server", &types.SimpleTimeout{Value: haproxyDuration(f.TimeoutServer)})
	}
	if f.TimeoutCheck > 0 {
		w.set(sec, name, "timeout check", &types.SimpleTimeout{Value: haproxyDuration(f.TimeoutCheck)})
	}
	switch {
	case f.Cookie != "" && f.CookieStatic:
		// Each server line carries its own name as cookie (render.go).
		w.set(sec, name, "cookie", &types.Cookie{Name: f.Cookie, Type: "insert", Indirect: true, Nocache: true})
	case f.Cookie != "":
		w.set(sec, name, "cookie", &types.Cookie{Name: f.Cookie, Type: "insert", Indirect: true, Nocache: true, Dynamic: true})
		w.set(sec, name, "dynamic-cookie-key", &types.StringC{Value: cookieKey(name)})
	}

	if f.Deny != 0 {
		status := int64(f.Deny)
		w.insert(sec, name, "http-request", &httpactions.Deny{Status: &status})
	}
	if f.SrcIPHeader != "" {
		w.insert(sec, name, "http-request", &httpactions.SetSrc{Expr: common.Expression{Expr: []string{"hdr(" + f.SrcIPHeader + ")"}}})
	}
	forbidden := int64(403)
	if f.AllowList != "" {
		w.acl(sec, name, aclAllow, f.AllowList)
		w.insert(sec, name, "http-request", &httpactions.Deny{Status: &forbidden, Cond: "unless", CondTest: aclAllow})
	}
	if f.DenyList != "" {
		w.acl(sec, name, aclDeny, f.DenyList)
		w.insert(sec, name, "http-request", &httpactions.Deny{Status: &forbidden, Cond: "if", CondTest: aclDeny})
	}
	if rl := f.RateLimit; rl.Requests > 0 {
		period := haproxyDuration(rl.Period)
		w.set(sec, name, "stick-table", &types.StickTable{
			Type: "ipv6", Size: strconv.Itoa(rl.Size), Expire: period, Store: "http_req_rate(" + period + ")",
		})
		track := &actions.TrackSc{Type: actions.TrackScType, StickCounter: 0, Key: "src"}
		if rl.Whitelist != "" {
			w.acl(sec, name, aclRateExempt, rl.Whitelist)
			track.Cond, track.CondTest = "unless", aclRateExempt
		}
		w.insert(sec, name, "http-request", track)
		status := int64(rl.Status)
		w.insert(sec, name, "http-request", &httpactions.Deny{
			Status: &status, Cond: "if", CondTest: "{ sc_http_req_rate(0) gt " + strconv.Itoa(rl.Requests) + " }",
		})
	}
	if f.AuthRealm != "" {
		w.insert(sec, name, "http-request", &httpactions.Auth{
			Realm: `"` + f.AuthRealm + `"`, Cond: "unless", CondTest: "{ http_auth(" + name + ") }",
		})
	}
}

// backendExtraSections is the text of the sections a backend needs besides
// its own: the userlist of basic authentication, named like the backend
// (userlists have their own namespace). Written by hand: config-parser
// writes userlists before every backend, where the per-backend render
// cache cannot put them.
func backendExtraSections(spec backendSpec) string {
	f := spec.Features
	if f.AuthRealm == "" || spec.TCP {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nuserlist " + spec.Name + "\n")
	for _, u := range f.AuthUsers.Users() {
		b.WriteString("  user " + u.Name + " password " + u.Hash + "\n")
	}
	return b.String()
}

// cookieKey is the dynamic-cookie-key of a backend: derived from its name,
// so every edge host and every restart computes the same cookies. Cookie
// values only pick a server; they are no secret.
func cookieKey(backend string) string {
	sum := sha256.Sum256([]byte("perimeter dynamic cookie " + backend))
	return hex.EncodeToString(sum[:16])
}

// acceptProxy makes a frontend accept the PROXY protocol from sources.
func (r renderer) acceptProxy(w *cfgWriter, fe string, sources model.CIDRList) {
	if sources == "" || !validCIDRList(sources) {
		return
	}
	w.acl(parser.Frontends, fe, aclProxySource, sources)
	w.insert(parser.Frontends, fe, "tcp-request", &tcptypes.Connection{
		Action: &tcpactions.ExpectProxy{Cond: "if", CondTest: aclProxySource},
	})
}

// acl writes the list as acl lines of at most aclChunk patterns.
func (w *cfgWriter) acl(sec parser.Section, name, acl string, list model.CIDRList) {
	pats := list.Prefixes()
	for len(pats) > 0 {
		n := min(len(pats), aclChunk)
		w.insert(sec, name, "acl", &types.ACL{Name: acl, Criterion: "src", Value: strings.Join(pats[:n], " ")})
		pats = pats[n:]
	}
}

// insert appends one line to a multi-line attribute, so features add their
// rules without replacing those of others.
func (w *cfgWriter) insert(sec parser.Section, name, attr string, data common.ParserData) {
	if w.err != nil {
		return
	}
	if err := w.p.Insert(sec, w.target(name, attr), attr, data); err != nil {
		w.err = fmt.Errorf("render %s %s %s: %w", sec, name, attr, err)
	}
}
