package haproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	parser "github.com/haproxytech/client-native/v6/config-parser"
	"github.com/haproxytech/client-native/v6/config-parser/common"
	"github.com/haproxytech/client-native/v6/config-parser/params"
	"github.com/haproxytech/client-native/v6/config-parser/parsers/actions"
	httpactions "github.com/haproxytech/client-native/v6/config-parser/parsers/http/actions"
	"github.com/haproxytech/client-native/v6/config-parser/types"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// The https frontend serves the default certificate (certs/default.pem)
// to clients whose SNI matches nothing, and the Ingress certificates through
// a crt-list (certs/crt-list) whose entries carry their SNI names. Adding,
// removing and rotating certificates goes through the Runtime API (new /
// set / commit ssl cert, add / del ssl crt-list) and never reloads; the
// files are kept equal to what HAProxy runs, so a reload or restart loads
// the same. CA bundles and backend client certificates have content-derived
// names: a new content is a new file and a (rare) reload.

const (
	certsDirName    = "certs"
	crtListName     = "crt-list"
	defaultCertFile = model.DefaultCertificateName + ".pem"
)

// tlsState is the TLS part of a state.
type tlsState struct {
	head tlsHead
	// defaultCert is nil when there is no certificate at all: no https.
	defaultCert *tlsCert
	// certs are the SNI certificates by name (file certs/<name>.pem).
	certs map[string]*tlsCert
	// files are the CA bundles and backend client certificates, by path
	// under certs/ ("ca/<name>.pem", "client/<name>.pem").
	files map[string][]byte
}

// tlsHead is the structural part: a change needs a reload.
type tlsHead struct {
	enabled bool // a default certificate exists
	// clientCA is the path under certs/ of the client CA bundle; "" none.
	clientCA        string
	clientCAInvalid bool
	clientOptional  bool
	// passthrough: some host is passed through, the ssl frontend owns the
	// HTTPS addresses (feat_passthrough.go).
	passthrough bool
}

type tlsCert struct {
	pem   []byte
	hosts []string
	// src is where it came from, for Events when HAProxy refuses it.
	src *model.Certificate
}

func (c *tlsCert) equal(o *tlsCert) bool {
	if c == nil || o == nil {
		return c == o
	}
	return bytes.Equal(c.pem, o.pem) && slices.Equal(c.hosts, o.hosts)
}

func (t tlsState) clone() tlsState {
	t.certs = maps.Clone(t.certs)
	t.files = maps.Clone(t.files)
	return t
}

var (
	certNameRE      = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,250}$`)
	redirectValueRE = regexp.MustCompile(`^(301|302|303|307|308)(:[0-9]{1,5})?$`)
	pemLineRE       = regexp.MustCompile(`^(-----(BEGIN|END) [A-Z0-9 ]{1,40}-----|[A-Za-z0-9+/=]{1,100})$`)
)

// safePEM accepts only PEM armour and base64 lines: what reaches a file and
// a Runtime API payload can never end the payload early or carry anything
// else.
func safePEM(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if !pemLineRE.MatchString(l) {
			return false
		}
	}
	return true
}

// backendTLSSpec copies a backend's TLS settings into its spec and its
// files into t.
func backendTLSSpec(spec *backendSpec, b *model.Backend, t *tlsState, reject func(string, ...any)) {
	bt := b.TLS
	spec.SSL = bt.SSL
	if bt.Proto == "h2" {
		spec.Proto = "h2"
	}
	if bt.CA != nil {
		if !certNameRE.MatchString(bt.CA.Name) || !safePEM(bt.CA.PEM) {
			reject("backend %s: server CA %q is not usable; the backend gets no servers", b.Name, bt.CA.Name)
			spec.CAFile = "ca/invalid.pem"
		} else {
			spec.CAFile = "ca/" + bt.CA.Name + ".pem"
			t.addFile(spec.CAFile, bt.CA.PEM)
		}
	}
	if bt.Cert != nil {
		if !certNameRE.MatchString(bt.Cert.Name) || !safePEM(bt.Cert.PEM) {
			reject("backend %s: client certificate %q is not usable", b.Name, bt.Cert.Name)
		} else {
			spec.CrtFile = "client/" + bt.Cert.Name + ".pem"
			t.addFile(spec.CrtFile, bt.Cert.PEM)
		}
	}
}

// backendTLSFiles are the files backendTLSSpec added for b, whose spec it
// made.
func backendTLSFiles(spec backendSpec, b *model.Backend) []tlsFile {
	var out []tlsFile
	if ca := b.TLS.CA; ca != nil && spec.CAFile == "ca/"+ca.Name+".pem" && certNameRE.MatchString(ca.Name) && safePEM(ca.PEM) {
		out = append(out, tlsFile{spec.CAFile, b.TLS.CA.PEM})
	}
	if spec.CrtFile != "" && b.TLS.Cert != nil {
		out = append(out, tlsFile{spec.CrtFile, b.TLS.Cert.PEM})
	}
	return out
}

func (t *tlsState) addFile(path string, data []byte) {
	if t.files == nil {
		t.files = map[string][]byte{}
	}
	t.files[path] = data
}

// fill sets the frontend part of t from want. known are the certificate
// PEMs by name that passed safePEM last time (nil: none); fill returns
// this time's.
func (t *tlsState) fill(want *model.Desired, known map[string][]byte, reject func(model.ObjectRef, string, ...any)) map[string][]byte {
	checked := make(map[string][]byte, len(want.TLS.Certificates))
	if c := want.TLS.Default; c != nil {
		if safePEM(c.PEM) {
			t.defaultCert = &tlsCert{pem: c.PEM, src: c}
			t.head.enabled = true
		} else {
			reject(c.Secret, "default certificate %s is not plain PEM; HTTPS is not served", c.Name)
		}
	}
	t.certs = map[string]*tlsCert{}
	for _, c := range want.TLS.Certificates {
		if c == nil {
			continue
		}
		if !checkedPEM(c.Name, c.PEM, known, checked) {
			reject(c.Secret, "certificate %q cannot be written; its hosts get the default certificate", c.Name)
			continue
		}
		var hosts []string
		for _, h := range c.Hosts {
			if safeToken(h) && !strings.ContainsAny(h, "[]!") {
				hosts = append(hosts, h)
			}
		}
		if len(hosts) == 0 {
			// A crt-list line without SNI filter would serve the
			// certificate for whatever names it carries.
			reject(c.Secret, "certificate %q has no host to serve; it is not used", c.Name)
			continue
		}
		t.certs[c.Name] = &tlsCert{pem: c.PEM, hosts: hosts, src: c}
	}
	if ca := want.TLS.ClientCA; ca != nil {
		if len(ca.PEM) == 0 || !certNameRE.MatchString(ca.Name) || !safePEM(ca.PEM) {
			t.head.clientCAInvalid = true
		} else {
			t.head.clientCA = "ca/" + ca.Name + ".pem"
			t.addFile(t.head.clientCA, ca.PEM)
		}
	}
	t.head.clientOptional = want.Global.TLS.ClientCertOptional
	return checked
}

// checkedPEM checks a certificate's name and PEM, unless the same PEM
// passed under that name last time (known), and records what passed in
// now. At thousands of certificates, splitting and matching every PEM at
// every Apply cost more than an endpoint change; comparing with what
// passed costs a fraction.
func checkedPEM(name string, pem []byte, known, now map[string][]byte) bool {
	if k, ok := known[name]; ok && len(pem) > 0 && bytes.Equal(k, pem) {
		now[name] = pem
		return true
	}
	if !certNameRE.MatchString(name) || name == model.DefaultCertificateName || !safePEM(pem) {
		return false
	}
	now[name] = pem
	return true
}

// tlsBinds are the https frontend's addresses (nil when disabled).
func tlsBinds(o Options) []types.Bind {
	if o.HTTPSBindPort == 0 {
		return nil
	}
	return bindsFor(o, o.HTTPSBindPort)
}

func (r renderer) certPath(rel string) string { return filepath.Join(r.certsDir, rel) }

// httpsOn reports whether the https frontend is rendered for st.
func (r renderer) httpsOn(st *state) bool {
	return len(r.httpsBinds) > 0 && st.tls.head.enabled
}

// tlsGlobal writes the bind defaults of the TLS policy.
func (r renderer) tlsGlobal(w *cfgWriter, st *state) {
	if !r.httpsOn(st) {
		return
	}
	const sec = parser.GlobalSectionName
	p := st.global.TLS
	minVer := cmpOr(p.MinVersion, model.DefaultMinVersion)
	w.set(parser.Global, sec, "ssl-default-bind-options", &types.StringC{Value: "ssl-min-ver " + minVer + " no-tls-tickets"})
	if c := cmpOr(p.Ciphers, model.DefaultCiphers); safeToken(c) {
		w.set(parser.Global, sec, "ssl-default-bind-ciphers", &types.StringC{Value: c})
	}
	if c := cmpOr(p.Ciphersuites, model.DefaultCiphersuites); safeToken(c) {
		w.set(parser.Global, sec, "ssl-default-bind-ciphersuites", &types.StringC{Value: c})
	}
}

func cmpOr(v, dflt string) string {
	if v == "" {
		return dflt
	}
	return v
}

// routingActions are the http-request rules that pick the backend from the
// maps, shared by the http and https frontends so both route alike (the
// order is model.Match's). A host in the host-owner map keeps its requests
// within its owner's namespace: the wildcard tier only when the wildcard
// has the same owner, and the owner's own host-less rules ("@ns/path"
// keys) instead of everyone's.
//
// With scoped set, the frontend has Gateway binds (gateway_binds.go): the
// name of the bind a request came in on goes between host and path in
// every lookup key, the Gateway wildcard tiers' keys included (they are
// built from txn.path too).
func (r renderer) routingActions(wildcardDepths []int, scoped bool) []types.Action {
	exact, prefix, owners := r.mapPath(model.MapExact), r.mapPath(model.MapPrefix), r.mapPath(model.MapHostOwner)
	notFound := "!{ var(txn.backend) -m found }"
	unowned := notFound + " !{ var(txn.owner) -m found }"
	owned := notFound + " { var(txn.owner) -m found }"
	// The conditional maps are looked up at each tier the main maps are
	// (routeACLActions), so a conditional route is tried only where a
	// plain route of the same tier could match.
	out := []types.Action{
		// A trailing dot names the same host (FQDN form).
		setVar("host", "req.hdr(host),field(1,:),lower,regsub([.]$,)", ""),
		setVar("path", "path", ""),
	}
	if scoped {
		out = append(out, setVar("path", "so_name,concat(,txn.path)", "{ so_name -m found }"))
	}
	out = append(out, setVar("hostpath", "var(txn.host),concat(,txn.path)", ""))
	out = append(out, r.routeACLActions("hostpath", "")...)
	out = append(out,
		setVar("backend", "var(txn.hostpath),map_str("+exact+")", ""),
		setVar("backend", "var(txn.hostpath),map_beg("+prefix+")", notFound),
		setVar("whost", "var(txn.host),regsub(^[^.]*,*)", notFound),
		setVar("owner", "var(txn.host),map_str("+owners+")", notFound),
		setVar("wowner", "var(txn.whost),map_str("+owners+")", notFound),
		setVar("wildcard", "var(txn.whost),concat(,txn.path)", unowned),
		setVar("wildcard", "var(txn.whost),concat(,txn.path)", notFound+" { var(txn.wowner),strcmp(txn.owner) eq 0 }"),
	)
	out = append(out, r.routeACLActions("wildcard", notFound)...)
	out = append(out,
		setVar("backend", "var(txn.wildcard),map_str("+exact+")", notFound),
		setVar("backend", "var(txn.wildcard),map_beg("+prefix+")", notFound),
		setVar("owner", "var(txn.wowner)", unowned),
	)
	out = append(out, r.gatewayWildcardActions(wildcardDepths)...)
	out = append(out,
		setVar("nohost", "var(txn.path)", unowned),
		setVar("nohost", "var(txn.owner),concat(,txn.path)", owned),
	)
	out = append(out, r.routeACLActions("nohost", notFound)...)
	out = append(out,
		setVar("backend", "var(txn.nohost),map_str("+exact+")", notFound),
		setVar("backend", "var(txn.nohost),map_beg("+prefix+")", notFound),
	)
	return append(out, r.canaryActions()...)
}

func setVar(name, expr, cond string) types.Action {
	a := &actions.SetVar{VarScope: "txn", VarName: name, Expr: common.Expression{Expr: []string{expr}}}
	if cond != "" {
		a.Cond, a.CondTest = "if", cond
	}
	return a
}

// redirectCodes are the codes ssl-redirect-code accepts: one rule each,
// since HAProxy takes the code as a constant.
var redirectCodes = []string{"301", "302", "303", "307", "308"}

// sslRedirectActions redirect plain-HTTP requests for the hosts of the
// ssl-redirect map (exact host, then wildcard) to HTTPS, keeping the path
// and query; the map value gives the code and, after ":", the port. Map
// entries change at run time, so a host gains or loses its redirect with
// no reload.
func (r renderer) sslRedirectActions() []types.Action {
	m := r.mapPath(model.MapSSLRedirect)
	out := []types.Action{
		setVar("ssl_redirect", "var(txn.host),map_str("+m+")", ""),
		setVar("ssl_redirect", "var(txn.host),regsub(^[^.]*,*),map_str("+m+")", "!{ var(txn.ssl_redirect) -m found }"),
		setVar("ssl_code", "var(txn.ssl_redirect),field(1,:)", "{ var(txn.ssl_redirect) -m found }"),
	}
	for _, code := range redirectCodes {
		out = append(out, &httpactions.Redirect{
			Type:  "prefix",
			Value: "https://%[var(txn.host)]%[var(txn.ssl_redirect),regsub(^[0-9]*,)]",
			Code:  code,
			Cond:  "if", CondTest: "{ var(txn.ssl_code) -m str " + code + " }",
		})
	}
	return out
}

// httpsFrontend terminates TLS and routes like the http frontend.
func (r renderer) httpsFrontend(w *cfgWriter, st *state) {
	const fe = "https"
	h := st.tls.head
	opts := []params.BindOption{
		&params.BindOptionWord{Name: "ssl"},
		&params.BindOptionValue{Name: "crt", Value: r.certPath(defaultCertFile)},
		&params.BindOptionValue{Name: "crt-list", Value: r.certPath(crtListName)},
	}
	if st.global.TLS.StrictSNI {
		opts = append(opts, &params.BindOptionWord{Name: "strict-sni"})
	}
	if alpn := cmpOr(st.global.TLS.ALPN, model.DefaultALPN); safeToken(alpn) {
		opts = append(opts, &params.BindOptionValue{Name: "alpn", Value: alpn})
	}
	if h.clientCA != "" {
		verify := "required"
		if h.clientOptional {
			verify = "optional"
		}
		opts = append(opts,
			&params.BindOptionValue{Name: "ca-file", Value: r.certPath(h.clientCA)},
			&params.BindOptionValue{Name: "verify", Value: verify})
	}
	addrs := r.httpsBinds
	if r.passthroughOn(st) {
		addrs = r.offloadBinds()
	}
	binds := make([]types.Bind, len(addrs))
	for i, b := range addrs {
		binds[i] = types.Bind{Path: b.Path, Params: append(slices.Clone(b.Params), opts...)}
	}
	passthrough := r.passthroughOn(st)
	gwBinds := r.gatewayBinds(st.extras.gwBinds, func(b model.GatewayBind) bool {
		return b.TLS && !(passthrough && b.Passthrough)
	}, opts)
	if passthrough {
		gwBinds = append(gwBinds, r.offloadGatewayBinds(st.extras.gwBinds, opts)...)
	}
	binds = append(binds, gwBinds...)
	w.section(parser.Frontends, fe)
	w.set(parser.Frontends, fe, "bind", binds)
	var rules []types.Action
	if h.clientCAInvalid {
		// The client CA Secret is broken: fail closed.
		rules = append(rules, &httpactions.Deny{})
	}
	if h.clientCA != "" && h.clientOptional {
		// verify optional still refuses a certificate that fails
		// verification unless told otherwise; only a missing one passes.
		rules = append(rules, &httpactions.Deny{Cond: "if", CondTest: "{ ssl_c_used } !{ ssl_c_verify 0 }"})
	}
	rules = append(rules, r.requestHygiene("https")...)
	rules = append(rules, r.routingActions(st.extras.wildcardDepths, len(gwBinds) > 0)...)
	w.set(parser.Frontends, fe, "http-request", rules)
	use := append(routeACLUseBackends(st.extras.routeACLs), types.UseBackend{
		Name: "%[var(txn.backend)]", Cond: "if", CondTest: "{ var(txn.backend) -m found }",
	})
	if len(gwBinds) > 0 {
		use = append(use, types.UseBackend{Name: builtin404, Cond: "if", CondTest: "{ so_name -m found }"})
	}
	w.set(parser.Frontends, fe, "use_backend", use)
	def := st.defaultBackend
	if def == "" {
		def = builtin404
	}
	w.set(parser.Frontends, fe, "default_backend", &types.StringC{Value: def})
}

// addSSLRedirect appends the redirect rules to the http frontend.
func (r renderer) addSSLRedirect(w *cfgWriter, st *state) {
	if w.err != nil || len(r.httpBinds) == 0 || !r.httpsOn(st) {
		return
	}
	data, err := w.p.Get(parser.Frontends, "http", "http-request")
	if err != nil {
		w.err = fmt.Errorf("render frontend http: %w", err)
		return
	}
	rules, _ := data.([]types.Action)
	redirects := r.sslRedirectActions()
	if slices.ContainsFunc(st.extras.gwBinds, httpGatewayBind) {
		redirects = outsideGatewayBinds(redirects)
	}
	w.set(parser.Frontends, "http", "http-request", append(slices.Clone(rules), redirects...))
}

// serverTLSOptions are the default-server options of a TLS backend.
func (r renderer) serverTLSOptions(spec backendSpec) []params.ServerOption {
	var opts []params.ServerOption
	if spec.SSL {
		opts = append(opts, &params.ServerOptionWord{Name: "ssl"})
		if spec.CAFile != "" {
			opts = append(opts,
				&params.ServerOptionValue{Name: "verify", Value: "required"},
				&params.ServerOptionValue{Name: "ca-file", Value: r.certPath(spec.CAFile)})
		} else {
			opts = append(opts, &params.ServerOptionValue{Name: "verify", Value: "none"})
		}
		if spec.CrtFile != "" {
			opts = append(opts, &params.ServerOptionValue{Name: "crt", Value: r.certPath(spec.CrtFile)})
		}
		if spec.Proto == "h2" {
			opts = append(opts, &params.ServerOptionValue{Name: "alpn", Value: "h2"})
		}
	} else if spec.Proto == "h2" {
		opts = append(opts, &params.ServerOptionValue{Name: "proto", Value: "h2"})
	}
	return opts
}

// crtList renders the crt-list file: one line per SNI certificate with its
// host names, sorted by name.
func (r renderer) crtList(t tlsState) []byte {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(t.certs)) {
		b.WriteString(r.crtListLine(name, t.certs[name]))
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

func (r renderer) crtListLine(name string, c *tlsCert) string {
	line := r.certPath(name + ".pem")
	if len(c.hosts) > 0 {
		line += " " + strings.Join(c.hosts, " ")
	}
	return line
}

// tlsFiles are the files the TLS state needs, by path relative to
// ConfigDir, with their modes. PEM files hold private keys: 0600.
func (r renderer) tlsFiles(t tlsState) map[string][]byte {
	files := map[string][]byte{}
	if t.defaultCert == nil {
		return files
	}
	files[filepath.Join(certsDirName, crtListName)] = r.crtList(t)
	files[filepath.Join(certsDirName, defaultCertFile)] = t.defaultCert.pem
	for name, c := range t.certs {
		files[filepath.Join(certsDirName, name+".pem")] = c.pem
	}
	for p, data := range t.files {
		files[filepath.Join(certsDirName, p)] = data
	}
	return files
}

// runtimeStep is one certificate command, with its payload when it takes
// one (certificates, crt-list entries).
type runtimeStep struct {
	cmd, payload string
}

// tlsCommands moves the TLS state of cur to that of next (same
// structure): pre runs before the server and map commands (so that a new
// host has its certificate before it is routed), post after.
func (r renderer) tlsCommands(cur, next *state) (pre, post []runtimeStep) {
	if !r.httpsOn(next) || !r.httpsOn(cur) {
		return r.tcpCertSteps(cur, next), nil
	}
	list := r.certPath(crtListName)
	set := func(path string, pem []byte) []runtimeStep {
		return []runtimeStep{
			{cmd: "set ssl cert " + path, payload: string(pem)},
			{cmd: "commit ssl cert " + path},
		}
	}
	if !cur.tls.defaultCert.equal(next.tls.defaultCert) {
		pre = append(pre, set(r.certPath(defaultCertFile), next.tls.defaultCert.pem)...)
	}
	var certs []runtimeStep
	for _, name := range slices.Sorted(maps.Keys(next.tls.certs)) {
		nc, oc := next.tls.certs[name], cur.tls.certs[name]
		path := r.certPath(name + ".pem")
		switch {
		case oc == nil:
			certs = append(certs, runtimeStep{cmd: "new ssl cert " + path})
			certs = append(certs, set(path, nc.pem)...)
			certs = append(certs, runtimeStep{cmd: "add ssl crt-list " + list, payload: r.crtListLine(name, nc)})
		case !nc.equal(oc):
			if !bytes.Equal(nc.pem, oc.pem) {
				certs = append(certs, set(path, nc.pem)...)
			}
			if !slices.Equal(nc.hosts, oc.hosts) {
				certs = append(certs,
					runtimeStep{cmd: "del ssl crt-list " + list + " " + path},
					runtimeStep{cmd: "add ssl crt-list " + list, payload: r.crtListLine(name, nc)})
			}
		}
	}
	pre = append(certs, pre...)
	for _, name := range slices.Sorted(maps.Keys(cur.tls.certs)) {
		if _, ok := next.tls.certs[name]; !ok {
			path := r.certPath(name + ".pem")
			post = append(post,
				runtimeStep{cmd: "del ssl crt-list " + list + " " + path},
				runtimeStep{cmd: "del ssl cert " + path})
		}
	}
	return pre, post
}

// ExecuteTLS sends one certificate command on a connection of its own: with
// a payload, "cmd <<", the payload and an empty line (the payload syntax
// ends the command line, so it cannot share one with other commands).
func (r *socketRuntime) ExecuteTLS(ctx context.Context, cmd, payload string) error {
	line := cmd
	if payload != "" {
		payload = strings.TrimRight(payload, "\n")
		if strings.Contains(payload, "\n\n") {
			return fmt.Errorf("runtime api: %q: payload holds an empty line", cmd)
		}
		line = cmd + " <<\n" + payload + "\n"
	}
	resp, err := r.roundTrip(ctx, line)
	if err != nil {
		return err
	}
	err = checkTLSResponse(cmd, resp)
	var re *runtimeError
	if errors.As(err, &re) && strings.HasPrefix(cmd, "add ssl crt-list ") {
		// Name the certificate of the refused line, so that it alone
		// can be dropped.
		if f := strings.Fields(payload); len(f) > 0 {
			re.Command += " " + f[0]
		}
	}
	return err
}

// checkTLSResponse knows what success looks like for certificate commands.
func checkTLSResponse(cmd, resp string) error {
	resp = strings.TrimSpace(resp)
	ok := false
	switch {
	case strings.HasPrefix(cmd, "new ssl cert "):
		ok = strings.HasPrefix(resp, "New empty certificate store")
	case strings.HasPrefix(cmd, "set ssl cert "):
		ok = strings.HasPrefix(resp, "Transaction created") || strings.HasPrefix(resp, "Transaction updated")
	case strings.HasPrefix(cmd, "commit ssl cert "), strings.HasPrefix(cmd, "add ssl crt-list "):
		ok = strings.HasSuffix(resp, "Success!")
	case strings.HasPrefix(cmd, "del ssl crt-list "):
		ok = strings.Contains(resp, "deleted in crtlist")
	case strings.HasPrefix(cmd, "del ssl cert "):
		ok = strings.HasSuffix(resp, "deleted!")
	}
	if !ok {
		return &runtimeError{Command: cmd, Response: resp}
	}
	return nil
}

// execCerts runs the certificate commands in order and counts those that
// went through.
func (d *Driver) execCerts(ctx context.Context, steps []runtimeStep) (int, error) {
	for i, s := range steps {
		if err := d.rt.ExecuteTLS(ctx, s.cmd, s.payload); err != nil {
			return i, err
		}
	}
	return len(steps), nil
}
