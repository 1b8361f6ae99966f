package haproxy

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	parser "github.com/haproxytech/client-native/v6/config-parser"
	"github.com/haproxytech/client-native/v6/config-parser/common"
	"github.com/haproxytech/client-native/v6/config-parser/params"
	"github.com/haproxytech/client-native/v6/config-parser/parsers/actions"
	httpactions "github.com/haproxytech/client-native/v6/config-parser/parsers/http/actions"
	stats "github.com/haproxytech/client-native/v6/config-parser/parsers/stats/settings"
	"github.com/haproxytech/client-native/v6/config-parser/types"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// Timeouts used when model.Global leaves them unset: the settings table's
// defaults, what the model gives when the ConfigMap sets none.
var defaultTimeouts = model.DefaultGlobal()

// renderer holds what the Options fix for the Driver's lifetime.
type renderer struct {
	adminSock string
	mapsDir   string
	httpBinds []types.Bind
	stats     string // address:port, "" when disabled
	healthz   string
	promex    bool
	tcpHosts  []string
	// httpsBinds and certsDir serve the https frontend (tls.go).
	httpsBinds []types.Bind
	certsDir   string
	// trustForwardedFor keeps a client's X-Forwarded-For (Options).
	trustForwardedFor bool
	// bindAddrs are the Options that say where the edge listens
	// (bindsFor), for the Gateway binds on the edge's addresses.
	bindAddrs Options
}

func newRenderer(o Options, p paths, v Version) renderer {
	r := renderer{adminSock: p.adminSock, mapsDir: p.mapsDir, promex: v.Features["PROMEX"], tcpHosts: tcpHosts(o),
		trustForwardedFor: o.TrustForwardedFor,
		bindAddrs: Options{IPv4BindAddress: o.IPv4BindAddress, IPv6BindAddress: o.IPv6BindAddress, DisableIPv4: o.DisableIPv4,
			DisableIPv6: o.DisableIPv6, AnnounceAddresses: o.AnnounceAddresses}}
	r.httpsBinds, r.certsDir = tlsBinds(o), filepath.Join(o.ConfigDir, certsDirName)
	if !o.DisableHTTP {
		r.httpBinds = bindsFor(o, o.HTTPBindPort)
	}
	if o.StatsBindPort != 0 {
		r.stats = net.JoinHostPort(o.StatsBindAddress, strconv.Itoa(o.StatsBindPort))
	}
	if o.HealthzBindPort != 0 {
		r.healthz = net.JoinHostPort(o.StatsBindAddress, strconv.Itoa(o.HealthzBindPort))
	}
	return r
}

func (r renderer) mapPath(name string) string { return filepath.Join(r.mapsDir, name+".map") }

// config renders haproxy.cfg for st with client-native's config-parser.
// Backend sections are rendered one by one (through cache when not nil) and
// appended in the order config-parser itself uses: creating a section costs
// config-parser some 30 µs, too much to redo for thousands of backends on
// every endpoint change.
func (r renderer) config(st *state, cache *renderCache) (string, error) {
	if cache == nil {
		cache = &renderCache{}
	}
	head, err := cache.head(r, st)
	if err != nil {
		return "", err
	}
	names := cache.sortedNames(st)
	texts := make([]string, len(names)+st.spares.count)
	backendAt := func(i int) (string, *backend) {
		if i < len(names) {
			return names[i], st.backends[names[i]]
		}
		return spareName(i - len(names)), st.spares.backend(i - len(names))
	}
	var misses []int
	for i := range texts {
		var ok bool
		if texts[i], ok = cache.cached(backendAt(i)); !ok {
			misses = append(misses, i)
		}
	}
	if err := cache.render(r, misses, texts, backendAt); err != nil {
		return "", err
	}
	size := len(head)
	for _, t := range texts {
		size += len(t)
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(head)
	for _, t := range texts {
		b.WriteString(t)
	}
	cfg := b.String()
	cache.prune(st)
	cache.adopt(cfg, head, names, texts, st.spares.count)
	cache.size = len(cfg)
	return cfg, nil
}

// renderHead renders global, defaults and the frontends.
func (r renderer) renderHead(st *state) (string, error) {
	p, err := parser.New()
	if err != nil {
		return "", fmt.Errorf("config parser: %w", err)
	}
	w := &cfgWriter{p: p}
	r.global(w, st.global)
	r.tlsGlobal(w, st)
	r.defaults(w, st.global)
	if len(r.httpBinds) > 0 {
		r.httpFrontend(w, st.defaultBackend, st.extras.routeACLs, st.extras.wildcardDepths, st.extras.gwBinds)
		r.keepAliveAcrossReloads(w, "http")
		r.acceptProxy(w, "http", st.global.ProxyProtocol)
		r.addSSLRedirect(w, st)
	}
	if r.httpsOn(st) {
		r.httpsFrontend(w, st)
		r.keepAliveAcrossReloads(w, "https")
		if !r.passthroughOn(st) {
			// With passthrough, the ssl frontend accepts it instead.
			r.acceptProxy(w, "https", st.global.ProxyProtocol)
		}
	}
	if r.stats != "" {
		r.statsFrontend(w)
	}
	if r.healthz != "" {
		w.section(parser.Frontends, "healthz")
		w.set(parser.Frontends, "healthz", "bind", []types.Bind{{Path: r.healthz}})
		w.set(parser.Frontends, "healthz", "monitor-uri", &types.MonitorURI{URI: "/healthz"})
	}
	if w.err != nil {
		return "", w.err
	}
	return r.headFeatures(strings.TrimPrefix(p.String(), "\n"), st), nil
}

// renderCache keeps the rendered text of the sections before the backends
// and of each backend section.
type renderCache struct {
	headKey  headKey
	headText string
	scratch  parser.Parser
	entries  map[string]cachedBackend
	maps     map[string]renderedMap
	// names are the last config's backend names, sorted: reused while the
	// set is the same, which is every change but a backend added or removed.
	names []string
	// size is the last config's length.
	size int
}

// sortedNames returns the backend names of st and builtin404, sorted.
func (c *renderCache) sortedNames(st *state) []string {
	if len(c.names) == len(st.backends)+1 {
		same := true
		for _, n := range c.names {
			if _, ok := st.backends[n]; !ok && n != builtin404 {
				same = false
				break
			}
		}
		if same {
			return c.names
		}
	}
	names := append(slices.Collect(maps.Keys(st.backends)), builtin404)
	slices.Sort(names)
	c.names = names
	return names
}

// headKey is what the head depends on besides the Options.
type headKey struct {
	global         model.Global
	defaultBackend string
	extras         string
	tls            tlsHead
}

// headKeyOf is what the head of st depends on: a change of it reloads.
func headKeyOf(st *state) headKey {
	return headKey{st.global, st.defaultBackend, st.extras.key(), st.tls.head}
}

func (c *renderCache) head(r renderer, st *state) (string, error) {
	k := headKeyOf(st)
	if c.headText != "" && c.headKey == k {
		return c.headText, nil
	}
	text, err := r.renderHead(st)
	if err != nil {
		return "", err
	}
	c.headKey, c.headText = k, text
	return text, nil
}

type cachedBackend struct {
	spec  backendSpec
	slots []slot
	text  string
}

// parallelRender is how many backends a render must miss in the cache
// before they are rendered on every CPU: a start-up, or new settings for
// all, at thousands of backends (some 200 µs each through config-parser).
const parallelRender = 256

// render renders the backends of misses (indexes into texts, backendAt)
// into texts and the cache: on every CPU when there are many of them.
func (c *renderCache) render(r renderer, misses []int, texts []string, backendAt func(int) (string, *backend)) error {
	workers := runtime.GOMAXPROCS(0)
	if workers < 2 || len(misses) < parallelRender {
		for _, i := range misses {
			name, b := backendAt(i)
			text, err := renderBackend(r, &c.scratch, name, b)
			if err != nil {
				return err
			}
			texts[i] = text
			c.store(name, b, text)
		}
		return nil
	}
	errs := make([]error, workers)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var scratch parser.Parser
			for k := int(next.Add(1) - 1); k < len(misses) && errs[w] == nil; k = int(next.Add(1) - 1) {
				name, b := backendAt(misses[k])
				texts[misses[k]], errs[w] = renderBackend(r, &scratch, name, b)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, i := range misses {
		name, b := backendAt(i)
		c.store(name, b, texts[i])
	}
	return nil
}

// cached returns the cached section of backend name when it is current.
func (c *renderCache) cached(name string, b *backend) (string, bool) {
	var spec backendSpec
	var slots []slot
	if b != nil {
		spec, slots = b.spec, b.slots
	}
	if e, ok := c.entries[name]; ok && e.spec == spec && slices.Equal(e.slots, slots) {
		return e.text, true
	}
	return "", false
}

func (c *renderCache) store(name string, b *backend, text string) {
	var spec backendSpec
	var slots []slot
	if b != nil {
		spec, slots = b.spec, b.slots
	}
	if c.entries == nil {
		c.entries = map[string]cachedBackend{}
	}
	// A state's slot lists are never changed once made (assignSlots
	// makes new ones): the entry shares the list.
	c.entries[name] = cachedBackend{spec: spec, slots: slots, text: text}
}

// scratchBackend is the one backend section a scratch parser keeps, and
// every backend is rendered into in turn. Creating a section makes
// config-parser build its ~150 line parsers anew: at 10,000 backends that
// was most of a start's render and of its garbage.
const scratchBackend = "perimeter-scratch"

// renderBackend renders the section of backend name (b nil: the built-in
// 404) with *scratch, a config-parser holding the scratch backend alone,
// made when nil and dropped after an error. The section
// is written as name (cfgWriter.as) and emptied afterwards, attribute by
// attribute, so nothing of one backend is left for the next.
func renderBackend(r renderer, scratch *parser.Parser, name string, b *backend) (string, error) {
	var spec backendSpec
	if b != nil {
		spec = b.spec
	}
	if *scratch == nil {
		p, err := newScratchParser()
		if err != nil {
			return "", err
		}
		*scratch = p
	}
	w := &cfgWriter{p: *scratch, alias: name, as: scratchBackend, touched: map[string]bool{}}
	if b == nil {
		w.section(parser.Backends, builtin404)
		status := int64(404)
		w.set(parser.Backends, builtin404, "http-request", []types.Action{
			&httpactions.Return{Status: &status, ContentFormat: "default-errorfiles"},
		})
	} else {
		r.backend(w, b)
	}
	out := (*scratch).String()
	for attr := range w.touched {
		if err := (*scratch).Set(parser.Backends, scratchBackend, attr, nil); err != nil && w.err == nil {
			w.err = fmt.Errorf("render backend %s: clear %s: %w", name, attr, err)
		}
	}
	if w.err != nil {
		// Start afresh: the scratch parser may hold half a section.
		*scratch = nil
		return "", w.err
	}
	header := "\nbackend " + scratchBackend + "\n"
	i := strings.Index(out, header)
	if i < 0 {
		return "", fmt.Errorf("render backend %s: section missing from config-parser output", name)
	}
	text := "\nbackend " + name + " from " + defaultsName + "\n" + out[i+len(header):]
	return withBackendFeatures(text, spec) + backendExtraSections(spec), nil
}

// newScratchParser makes a parser holding the scratch backend alone: not
// even the defaults section, which String would walk through for every
// backend. renderBackend writes the "from" itself.
func newScratchParser() (parser.Parser, error) {
	p, err := parser.New()
	if err != nil {
		return nil, fmt.Errorf("config parser: %w", err)
	}
	if err := p.SectionsCreate(parser.Backends, scratchBackend); err != nil {
		return nil, fmt.Errorf("config parser: %w", err)
	}
	return p, nil
}

// adopt points the cached texts into cfg, the configuration just made of
// them, so that the sections are held once rather than twice: at 10,000
// backends the separate texts are as large as haproxy.cfg itself. The
// texts a render made afresh become garbage, and cfg stays alive only
// until the next render points the cache elsewhere.
func (c *renderCache) adopt(cfg, head string, names, texts []string, spares int) {
	if unsafe.StringData(c.headText) == unsafe.StringData(head) {
		c.headText = cfg[:len(head)]
	}
	off := len(head)
	for i, t := range texts {
		name := ""
		if i < len(names) {
			name = names[i]
		} else {
			name = spareName(i - len(names))
		}
		if e, ok := c.entries[name]; ok && len(e.text) == len(t) && unsafe.StringData(e.text) == unsafe.StringData(t) {
			e.text = cfg[off : off+len(t)]
			c.entries[name] = e
		}
		off += len(t)
	}
}

// prune forgets backends st does not have.
func (c *renderCache) prune(st *state) {
	for name := range c.entries {
		if _, ok := st.backends[name]; !ok && name != builtin404 && !strings.HasPrefix(name, sparePrefix) {
			delete(c.entries, name)
		}
	}
}

func (r renderer) global(w *cfgWriter, g model.Global) {
	const sec = parser.GlobalSectionName
	w.set(parser.Global, sec, "stats socket", []types.Socket{{
		Path: r.adminSock,
		Params: []params.BindOption{
			&params.BindOptionValue{Name: "mode", Value: "600"},
			&params.BindOptionValue{Name: "level", Value: "admin"},
		},
	}})
	if g.Maxconn > 0 {
		w.set(parser.Global, sec, "maxconn", &types.Int64C{Value: int64(g.Maxconn)})
	}
	if g.Nbthread > 0 {
		w.set(parser.Global, sec, "nbthread", &types.Int64C{Value: int64(g.Nbthread)})
	}
	if g.HardStopAfter > 0 {
		w.set(parser.Global, sec, "hard-stop-after", &types.StringC{Value: haproxyDuration(g.HardStopAfter)})
	}
	// An old worker kept alive by a busy WebSocket survives reloads; a
	// tenant who can force one reload a second would pile them up until
	// memory runs out. hard-stop-after bounds their age, this their number.
	maxReloads := g.MworkerMaxReloads
	if maxReloads <= 0 {
		maxReloads = defaultMworkerMaxReloads
	}
	w.set(parser.Global, sec, "mworker-max-reloads", &types.Int64C{Value: int64(maxReloads)})
}

// keepAliveAcrossReloads keeps a reload invisible to HTTP/1 keep-alive
// clients. By default the old worker closes idle connections as soon as it
// stops, and a request the client sent on one at that moment is lost (an
// EOF for the client, which is not always safe to retry). With the option
// the old worker serves the next request of such a connection and announces
// the close on its response with "Connection: close". It sits on the HTTP
// frontends and not in defaults: HAProxy warns about it on TCP frontends.
func (r renderer) keepAliveAcrossReloads(w *cfgWriter, fe string) {
	w.set(parser.Frontends, fe, "option idle-close-on-response", &types.SimpleOption{})
}

// defaultMworkerMaxReloads is how many reloads an old worker may survive
// before the master stops it, when the model does not say.
const defaultMworkerMaxReloads = 50

func (r renderer) defaults(w *cfgWriter, g model.Global) {
	w.section(parser.Defaults, defaultsName)
	w.set(parser.Defaults, defaultsName, "mode", &types.StringC{Value: "http"})
	for _, t := range []struct {
		name      string
		val, dflt time.Duration
	}{
		{"connect", g.TimeoutConnect, defaultTimeouts.TimeoutConnect},
		{"client", g.TimeoutClient, defaultTimeouts.TimeoutClient},
		{"server", g.TimeoutServer, defaultTimeouts.TimeoutServer},
		{"http-request", g.TimeoutHTTPRequest, defaultTimeouts.TimeoutHTTPRequest},
		{"http-keep-alive", g.TimeoutHTTPKeepAlive, defaultTimeouts.TimeoutHTTPKeepAlive},
		{"queue", g.TimeoutQueue, defaultTimeouts.TimeoutQueue},
		{"tunnel", g.TimeoutTunnel, defaultTimeouts.TimeoutTunnel},
	} {
		v := t.val
		if v <= 0 {
			v = t.dflt
		}
		w.set(parser.Defaults, defaultsName, "timeout "+t.name, &types.SimpleTimeout{Value: haproxyDuration(v)})
	}
	r.connectionDefaults(w, g.Connection)
}

// requestHygiene are the first http-request rules of a frontend. A Host
// with '/' or '@' is refused: HAProxy 2.6 accepts it, and routing on
// host+path would then let "Host: a.example/app" with path "/x" reach the
// /app backend with a path outside its prefix. X-Forwarded-Proto always
// says how the client came in, whatever the client sent.
func (r renderer) requestHygiene(proto string) []types.Action {
	status := int64(400)
	return []types.Action{
		&httpactions.Deny{Status: &status, Cond: "if", CondTest: "{ req.hdr(host) -m sub / @ }"},
		&httpactions.SetHeader{Name: "X-Forwarded-Proto", Fmt: proto},
	}
}

// httpFrontend computes the backend from map lookups only, so that hosts
// and paths never appear in haproxy.cfg. Lookup order: host+path exact,
// host+path prefix, the same with the first host label replaced by "*",
// the same with the Gateway API wildcards of more labels, then the path
// alone, then the default backend.
func (r renderer) httpFrontend(w *cfgWriter, defaultBackend string, acls []model.RouteACL, wildcardDepths []int, gw []model.GatewayBind) {
	const fe = "http"
	w.section(parser.Frontends, fe)
	gwBinds := r.gatewayBinds(gw, httpGatewayBind, nil)
	w.set(parser.Frontends, fe, "bind", append(slices.Clone(r.httpBinds), gwBinds...))
	w.set(parser.Frontends, fe, "http-request", append(r.requestHygiene("http"), r.routingActions(wildcardDepths, len(gwBinds) > 0)...))
	use := append(routeACLUseBackends(acls), types.UseBackend{
		Name: "%[var(txn.backend)]", Cond: "if", CondTest: "{ var(txn.backend) -m found }",
	})
	if len(gwBinds) > 0 {
		// A Gateway listener answers what its routes do not match with
		// 404, as the Gateway API asks, never with an Ingress default.
		use = append(use, types.UseBackend{Name: builtin404, Cond: "if", CondTest: "{ so_name -m found }"})
	}
	w.set(parser.Frontends, fe, "use_backend", use)
	if defaultBackend == "" {
		defaultBackend = builtin404
	}
	w.set(parser.Frontends, fe, "default_backend", &types.StringC{Value: defaultBackend})
}

func (r renderer) statsFrontend(w *cfgWriter) {
	const fe = "stats"
	w.section(parser.Frontends, fe)
	w.set(parser.Frontends, fe, "bind", []types.Bind{{Path: r.stats}})
	w.set(parser.Frontends, fe, "stats", []types.StatsSettings{
		&stats.OneWord{Name: "enable"},
		&stats.URI{Prefix: "/stats"},
		&stats.Refresh{Delay: "10s"},
	})
	if r.promex {
		w.set(parser.Frontends, fe, "http-request", []types.Action{
			&actions.UseService{Name: "prometheus-exporter", Cond: "if", CondTest: "{ path /metrics }"},
		})
	}
}

func (r renderer) backend(w *cfgWriter, b *backend) {
	name := b.spec.Name
	w.section(parser.Backends, name)
	if b.spec.TCP {
		w.set(parser.Backends, name, "mode", &types.StringC{Value: "tcp"})
	}
	if b.spec.Balance != "" {
		w.set(parser.Backends, name, "balance", &types.Balance{Algorithm: b.spec.Balance})
	}
	if b.spec.ForwardedFor {
		w.set(parser.Backends, name, "option forwardfor", &types.OptionForwardFor{})
	}
	if opts := append(defaultServerOptions(b.spec), r.serverTLSOptions(b.spec)...); len(opts) > 0 {
		w.set(parser.Backends, name, "default-server", []types.DefaultServer{{Params: opts}})
	}
	if !b.spec.TCP {
		r.backendFeatures(w, b)
		if b.spec.ForwardedFor && !r.trustForwardedFor {
			// option forwardfor appends a header when the request leaves, after
			// these rules: the client's own X-Forwarded-For would otherwise come
			// first, where most applications read the client address. Last, so
			// src-ip-header can still read it.
			w.insert(parser.Backends, name, "http-request", &httpactions.DelHeader{Name: "X-Forwarded-For"})
		}
	}
	servers := make([]types.Server, len(b.slots))
	static := !b.spec.TCP && b.spec.Features.Cookie != "" && b.spec.Features.CookieStatic
	for i, s := range b.slots {
		servers[i] = serverLine(i, s)
		if static {
			servers[i].Params = append(servers[i].Params, &params.ServerOptionValue{Name: "cookie", Value: servers[i].Name})
		}
	}
	if len(servers) > 0 {
		w.set(parser.Backends, name, "server", servers)
	}
}

// serverLine renders one slot. An empty slot points at a dead address in
// maintenance. A draining endpoint is written in maintenance too: at runtime
// it is set to drain, but after a reload the new worker has no connection to
// it, so both states mean the same there, and a server in maintenance is also
// left out of health checks. The slot keeps its address, so a drain->ready
// change stays a runtime change.
func serverLine(i int, s slot) types.Server {
	srv := types.Server{Name: serverName(i)}
	switch {
	case !s.used():
		srv.Address = "127.0.0.1:1"
		srv.Params = []params.ServerOption{&params.ServerOptionWord{Name: "disabled"}}
	case s.Draining:
		srv.Address = s.hostPort()
		srv.Params = []params.ServerOption{&params.ServerOptionWord{Name: "disabled"}}
	default:
		srv.Address = s.hostPort()
	}
	return srv
}

func serverName(i int) string { return serverPrefix + strconv.Itoa(i+1) }

// maxMapLine is the longest map line written, newline included. HAProxy
// reads map files with fgets into a buffer of tune.bufsize (16384 bytes by
// default) and takes every piece of a longer line as an entry of its own:
// the tail of an over-long key would become an entry for another host.
// Half the buffer leaves room for a smaller tune.bufsize; the model's caps
// (host 253 and path 4096 bytes) keep real entries far below it.
const maxMapLine = 8192

// ownerValueRE is a host-owner map value: "@" and a namespace.
var ownerValueRE = regexp.MustCompile(`^@[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// checkMapLine accepts an entry that writes as exactly one map line of
// two words: no blank, control byte (newline, CR, NUL) or quote in key or
// value, and the whole line within maxMapLine.
func checkMapLine(k, v string) error {
	switch {
	case !safeToken(k):
		return errors.New("the key has characters a map file cannot carry")
	case !safeToken(v):
		return errors.New("the value has characters a map file cannot carry")
	case len(k)+1+len(v)+1 > maxMapLine:
		return fmt.Errorf("the line is %d bytes long, more than %d", len(k)+len(v)+2, maxMapLine)
	}
	return nil
}

// mapFile renders a map file: one "key value" line per entry, sorted so the
// file is deterministic (map_str and map_beg are tree lookups in HAProxy, so
// the order carries no meaning). It is the one writer of map files, so it
// checks every line again and leaves out any that checkMapLine refuses
// (desiredState has reported them).
func mapFile(m map[string]string) []byte {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if checkMapLine(k, m[k]) != nil {
			continue
		}
		b.WriteString(k)
		b.WriteByte(' ')
		b.WriteString(m[k])
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// haproxyDuration writes d in the largest HAProxy time unit that holds it
// exactly.
func haproxyDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	case d%time.Millisecond == 0:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	default:
		return fmt.Sprintf("%dus", (d+time.Microsecond-1)/time.Microsecond)
	}
}

// cfgWriter keeps the first config-parser error so the render code reads
// as a list of lines. With as set, section alias is written to section as
// instead, which exists already, and the attributes written are recorded
// in touched.
type cfgWriter struct {
	p   parser.Parser
	err error

	alias, as string
	touched   map[string]bool
}

// target is the section name really written for name, and records attr.
func (w *cfgWriter) target(name, attr string) string {
	if w.as == "" || name != w.alias {
		return name
	}
	w.touched[attr] = true
	return w.as
}

func (w *cfgWriter) section(sec parser.Section, name string) {
	if w.err != nil || w.as != "" && name == w.alias {
		return
	}
	if err := w.p.SectionsCreate(sec, name); err != nil {
		w.err = fmt.Errorf("render %s %s: %w", sec, name, err)
		return
	}
	if sec == parser.Defaults {
		return
	}
	// A named defaults section referenced with "from" everywhere: HAProxy
	// 2.6 warns about a defaults section that is both implicit and named.
	if err := w.p.SectionsDefaultsFromSet(sec, name, defaultsName); err != nil {
		w.err = fmt.Errorf("render %s %s from %s: %w", sec, name, defaultsName, err)
	}
}

func (w *cfgWriter) set(sec parser.Section, name, attr string, data common.ParserData) {
	if w.err != nil {
		return
	}
	if err := w.p.Set(sec, w.target(name, attr), attr, data); err != nil {
		w.err = fmt.Errorf("render %s %s %s: %w", sec, name, attr, err)
	}
}

// sectionAt returns the section ("backend", name) that holds line (1-based)
// of a rendered config.
func sectionAt(cfg string, line int) (kind, name string) {
	for i, l := range strings.Split(cfg, "\n") {
		if i+1 > line {
			break
		}
		if l == "" || l[0] == ' ' || l[0] == '\t' || l[0] == '#' {
			continue
		}
		f := strings.Fields(l)
		kind, name = f[0], ""
		if len(f) > 1 {
			name = f[1]
		}
	}
	return kind, name
}

// Render returns the files Apply would write for want, by path relative to
// ConfigDir (haproxy.cfg, maps, certificates, error pages), without starting or
// touching HAProxy. It probes the program for its features when it can and
// assumes a 2.6 build with the Prometheus exporter otherwise.
func Render(o Options, want *model.Desired) (map[string][]byte, error) {
	o, err := checkedOptions(o)
	if err != nil {
		return nil, err
	}
	v := Version{Major: 2, Minor: 6, Raw: "2.6", Features: map[string]bool{"PROMEX": true}}
	if prog, err := findProgram(o.Program); err == nil {
		if pv, err := probe(prog); err == nil {
			v = pv
		}
	}
	p := pathsFor(o)
	r := newRenderer(o, p, v)
	st, _ := desiredState(want)
	fdBudget(st, o.FDLimit)
	withSlots(emptyState(), st)
	// What the daemon's first configuration would hold.
	st.spares = chooseSpares(st)
	cfg, err := r.config(st, nil)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for rel, f := range r.stateFiles(st, cfg, nil) {
		if strings.HasSuffix(rel, ".pem") {
			// Certificate files hold private keys: named, not shown.
			f.data = []byte("# PEM file, content not shown\n")
		}
		files[rel] = f.data
	}
	return files, nil
}
