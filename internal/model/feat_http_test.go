package model

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

func featureBackend(t *testing.T, o Options, cm *corev1.ConfigMap, ann ...string) (*Backend, *Desired) {
	t.Helper()
	svc := service("ns", "web", svcPort("", 80, 8080))
	d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{webIngress("a", 0, ann...)}, Services: []*corev1.Service{svc}, ConfigMap: cm}, o)
	return backendByName(t, d, "ns_web_80"), d
}

func TestHTTPRulesParsed(t *testing.T) {
	b, d := featureBackend(t, Options{ConfigSnippets: []string{"backend"}}, configMap("cors-allow-methods=GET, POST"),
		"haproxy.org/request-redirect=example.com:8443",
		"haproxy.org/request-redirect-code=308",
		`haproxy.org/path-rewrite=/foo/(.*) /\1`,
		"haproxy.org/set-host=backend.local",
		"haproxy.org/request-set-header=X-A one\nX-B \"two words\"\n",
		`haproxy.org/response-set-header=Cache-Control "no-store,no-cache,private"`,
		"haproxy.org/request-capture=cookie(id)\nhdr(User-Agent)",
		"haproxy.org/request-capture-len=64",
		"haproxy.org/cors-enable=true",
		"haproxy.org/cors-allow-origin=https://a.example, https://b.example:8443",
		"haproxy.org/cors-max-age=1m",
		"haproxy.org/cors-respond-to-options=true",
		"haproxy.org/backend-config-snippet=http-send-name-header x-dst\n\n  option  httpchk\n",
	)
	if len(d.Problems) != 0 {
		t.Fatalf("problems: %v", d.Problems)
	}
	h := b.HTTP
	want := HTTPRules{
		Redirect: "example.com:8443", RedirectCode: 308,
		Rewrites:        []PathRewrite{{Regex: "/foo/(.*)", To: `/\1`}},
		SetHost:         "backend.local",
		RequestHeaders:  []Header{{"X-A", "one", "one"}, {"X-B", "two words", "two words"}},
		ResponseHeaders: []Header{{"Cache-Control", "no-store,no-cache,private", "no-store,no-cache,private"}},
		Captures:        []string{"cookie(id)", "hdr(User-Agent)"}, CaptureLen: 64,
		CORS: CORS{Enabled: true, Origins: []string{"https://a.example", "https://b.example:8443"},
			Methods: []string{"GET", "POST"}, Headers: []string{"*"}, MaxAge: time.Minute, RespondToOptions: true},
		Snippet:     []string{"http-send-name-header x-dst", "option  httpchk"},
		SnippetFrom: ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "a"},
	}
	if got, w := Dump(&Desired{Backends: []*Backend{b}}), Dump(&Desired{Backends: []*Backend{{Name: b.Name, Namespace: b.Namespace, Service: b.Service, Port: b.Port,
		Balance: b.Balance, Check: b.Check, ForwardedFor: b.ForwardedFor, Slots: b.Slots, HTTP: want}}}); got != w {
		t.Fatalf("rules:\n%s\nwant:\n%s", got, w)
	}
	_ = h
}

func TestSnippetsOffByDefault(t *testing.T) {
	b, d := featureBackend(t, Options{}, configMap("global-config-snippet=tune.bufsize 32768"),
		"haproxy.org/backend-config-snippet=http-send-name-header x-dst")
	if len(b.HTTP.Snippet) != 0 || d.Global.ConfigSnippet != "" {
		t.Fatalf("snippets applied while --config-snippets is empty: %q %q", b.HTTP.Snippet, d.Global.ConfigSnippet)
	}
	var reasons []string
	for _, p := range d.Problems {
		reasons = append(reasons, p.Object.Kind+" "+p.Reason)
	}
	// Each Event goes to the object that set the snippet: here the Ingress.
	if !slices.Contains(reasons, "ConfigMap SnippetDisabled") || !slices.Contains(reasons, "Ingress SnippetDisabled") {
		t.Fatalf("problems %v, want SnippetDisabled on the ConfigMap and the Ingress", reasons)
	}
	_, d = featureBackend(t, Options{ConfigSnippets: []string{"global"}}, configMap("global-config-snippet=tune.bufsize 32768\ntune.maxrewrite 1024"))
	if d.Global.ConfigSnippet != "tune.bufsize 32768\ntune.maxrewrite 1024" {
		t.Fatalf("global snippet %q", d.Global.ConfigSnippet)
	}
}

// TestSnippetOrigin: the backend snippet's origin follows the precedence of
// its value (Service, oldest Ingress that sets it, ConfigMap); Events about
// the snippet go there.
func TestSnippetOrigin(t *testing.T) {
	const snippet = "backend-config-snippet=http-send-name-header x-dst"
	for _, tc := range []struct {
		name     string
		cm       string
		svc, ing []string
		want     ObjectRef
	}{
		{name: "service beats ingress", svc: []string{"haproxy.org/" + snippet}, ing: []string{"haproxy.org/" + snippet},
			want: ObjectRef{Kind: "Service", Namespace: "ns", Name: "web"}},
		{name: "ingress", ing: []string{"haproxy.org/" + snippet}, want: ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "a"}},
		{name: "configmap", cm: snippet, want: ObjectRef{Kind: "ConfigMap", Namespace: "haproxy-controller", Name: "haproxy-kubernetes-ingress"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cm *corev1.ConfigMap
			if tc.cm != "" {
				cm = configMap(tc.cm)
			}
			svc := service("ns", "web", svcPort("", 80, 8080))
			svc.Annotations = annotations(nil, tc.svc...)
			s := &Snapshot{Ingresses: []*networkingv1.Ingress{webIngress("a", 0, tc.ing...)}, Services: []*corev1.Service{svc}, ConfigMap: cm}
			d := Build(s, Options{ConfigSnippets: []string{"backend"}})
			if b := backendByName(t, d, "ns_web_80"); b.HTTP.SnippetFrom != tc.want {
				t.Errorf("enabled: snippet from %+v, want %+v", b.HTTP.SnippetFrom, tc.want)
			}
			d = Build(s, Options{})
			var got []ObjectRef
			for _, p := range d.Problems {
				if p.Reason == ReasonSnippetDisabled {
					got = append(got, p.Object)
				}
			}
			if !slices.Equal(got, []ObjectRef{tc.want}) {
				t.Errorf("disabled: SnippetDisabled on %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestFeatureValuesRejected(t *testing.T) {
	for _, kv := range []string{
		"request-redirect=ftp://x.example", "request-redirect=exa mple.com", "request-redirect=http://x.example/#frag",
		"request-redirect-code=200", "path-rewrite=a b c", "path-rewrite=(.* /x", "path-rewrite=foo",
		`path-rewrite=(.*) /\x`, "set-host=a b", "request-set-header=X-A", "request-set-header=X:A v",
		"request-capture=hdr(a) len 5", "request-capture=hdr(a b)", "request-capture-len=0",
		"cors-allow-origin=example.com", "cors-allow-origin=^(a", "cors-allow-methods=GET;POST",
		"cors-allow-headers=X A", "cors-max-age=soon",
		"backend-config-snippet=backend evil", "backend-config-snippet=  Frontend x", "backend-config-snippet=.if 1",
		"backend-config-snippet=http-request return status 200 content-type text/plain file /etc/perimeter/kubeconfig",
		"backend-config-snippet=http-request set-map(/var/lib/perimeter/maps/path-exact.map) a b",
		"backend-config-snippet=server evil 203.0.113.9:80", "backend-config-snippet=http-request use-service lua.x",
		"backend-config-snippet=http-request lua.perimeter-mirror other_db_5432", "backend-config-snippet=http-request LUA.perimeter-mirror x if TRUE",
		"backend-config-snippet=errorfile 503 /etc/shadow", "backend-config-snippet=stick-table type ip size 100m",
		"syslog-server=address:1.2.3.4", "syslog-server=address:1.2.3.4, facility:local9",
		"syslog-server=address:host.example, facility:local0", "log-format=a\x01b",
	} {
		name, value, _ := strings.Cut(kv, "=")
		s := settingByName(t, name)
		if err := s.Check(value); err == nil {
			t.Errorf("%s=%q accepted", name, value)
		}
	}
}

func settingByName(t testing.TB, name string) Setting {
	for _, s := range Settings() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no setting %s", name)
	return Setting{}
}

func TestLoggingSettings(t *testing.T) {
	_, d := featureBackend(t, Options{}, configMap(
		"syslog-server=address:127.0.0.1, port:5514, facility:local0, level:info\naddress:stdout, format:raw, facility:daemon",
		"log-format=%ci %hr", "dontlognull=false"))
	g := d.Global.Log
	want := LogSettings{Format: "%ci %hr", LogNull: true, Servers: [MaxSyslogServers]SyslogServer{
		{Address: "127.0.0.1", Port: 5514, Facility: "local0", Level: "info"},
		{Address: "stdout", Facility: "daemon", Format: "raw"},
	}}
	if g != want {
		t.Fatalf("log settings %+v, want %+v", g, want)
	}
	if _, d := featureBackend(t, Options{}, nil); d.Global.Log.LogNull {
		t.Fatal("dontlognull defaults to true")
	}
}

func TestErrorPages(t *testing.T) {
	cm := &corev1.ConfigMap{Data: map[string]string{
		"404": "<h1>nothing here</h1>",
		"503": "HTTP/1.0 503 Service Unavailable\nCache-Control: no-cache\nContent-Type: text/html\n\n<h1>later</h1>",
		"418": "teapot", "abc": "x",
	}}
	cm.Namespace, cm.Name = "ns", "pages"
	d := Build(&Snapshot{ErrorFiles: cm}, Options{})
	if len(d.ErrorPages) != 2 || d.ErrorPages[0].Code != 404 || d.ErrorPages[1].Code != 503 {
		t.Fatalf("pages %+v", d.ErrorPages)
	}
	if got := d.ErrorPages[0].Content; !strings.HasPrefix(got, "HTTP/1.1 404 Not Found\r\n") || !strings.HasSuffix(got, "\r\nContent-Length: 21\r\n\r\n<h1>nothing here</h1>") {
		t.Fatalf("404 page %q", got)
	}
	if got := d.ErrorPages[1].Content; got != "HTTP/1.0 503 Service Unavailable\r\nCache-Control: no-cache\r\nContent-Type: text/html\r\nContent-Length: 14\r\n\r\n<h1>later</h1>" {
		t.Fatalf("503 page %q", got)
	}
	if n := len(problemsOf(d)); n != 2 {
		t.Fatalf("want 2 problems (418, abc), got %v", problemsOf(d))
	}
}

func TestTCPServices(t *testing.T) {
	svc := service("db", "pg", svcPort("sql", 5432, 5432))
	cm := &corev1.ConfigMap{Data: map[string]string{
		"15432": "db/pg:5432", "15433": "db/pg:sql", "15434": "db/pg:5432::ssl", "x": "db/pg:1", "15435": "nope",
		"15436": "db/pg:5432:send-proxy", "15437": "db/pg:5432::tls",
		"15438": "db/pg:5432:ssl", "15439": "db/pg:sql:ssl", "15440": "db/pg:5432:PROXY:ssl", "15441": "db/pg:5432:ssl:",
		"15442": "db/pg:5432::", "15443": "db/pg:5432:::ssl",
	}}
	cm.Namespace, cm.Name = "ns", "tcp"
	d := Build(&Snapshot{TCPServices: cm, Services: []*corev1.Service{svc},
		EndpointSlices: nil}, Options{})
	want := []TCPService{
		{Port: 15432, Backend: "tcp15432_db_pg_5432"},
		{Port: 15433, Backend: "tcp15433_db_pg_sql"},
		{Port: 15434, Backend: "tcp15434_db_pg_5432", SSL: true},
		{Port: 15438, Backend: "tcp15438_db_pg_5432", SSL: true},
		{Port: 15439, Backend: "tcp15439_db_pg_sql", SSL: true},
		{Port: 15442, Backend: "tcp15442_db_pg_5432"},
	}
	if !reflect.DeepEqual(d.TCPServices, want) {
		t.Fatalf("tcp services %+v, want %+v", d.TCPServices, want)
	}
	b := backendByName(t, d, "tcp15432_db_pg_5432")
	if !b.TCP {
		t.Fatal("TCP backend not marked TCP")
	}
	if n := len(problemsOf(d)); n != 7 {
		t.Fatalf("want 7 problems (x, nope, send-proxy, tls, PROXY, ssl:, :::ssl), got %v", problemsOf(d))
	}
}

// FuzzAnnotations feeds arbitrary values to every setting's parser and
// checks the invariants haproxy.cfg relies on: Build never panics, is
// deterministic, and whatever a parser accepts is free of control
// characters (one line per value; snippet and header lists split into
// lines that are each clean), within length limits, and never opens a
// section.
func FuzzAnnotations(f *testing.F) {
	list := Settings()
	for i, s := range list {
		for _, v := range []string{s.Example, s.Default, "a\nbackend x", "x' #", `"\`, strings.Repeat("%", 3000)} {
			f.Add(uint16(i), v)
		}
	}
	svc := service("ns", "web", svcPort("", 80, 8080))
	f.Fuzz(func(t *testing.T, idx uint16, raw string) {
		s := list[int(idx)%len(list)]
		snap := &Snapshot{Services: []*corev1.Service{svc}}
		if s.Scopes&ScopeIngress != 0 {
			snap.Ingresses = []*networkingv1.Ingress{webIngress("a", 0, "haproxy.org/"+s.Name+"="+raw)}
		} else {
			snap.Ingresses = []*networkingv1.Ingress{webIngress("a", 0)}
			snap.ConfigMap = configMap(s.Name + "=" + raw)
		}
		o := Options{ConfigSnippets: []string{"global", "backend"}}
		d := Build(snap, o)
		if Dump(d) != Dump(Build(snap, o)) {
			t.Fatal("Build is not deterministic")
		}
		clean := func(what, v string) {
			if !utf8.ValidString(v) {
				t.Fatalf("%s=%q: %s %q is not UTF-8", s.Name, raw, what, v)
			}
			for _, r := range v {
				if r < 0x20 || r == 0x7f {
					t.Fatalf("%s=%q: %s %q has a control character", s.Name, raw, what, v)
				}
			}
			if len(v) > 2000 {
				t.Fatalf("%s=%q: %s is %d bytes long", s.Name, raw, what, len(v))
			}
		}
		for _, b := range d.Backends {
			h := b.HTTP
			values := append([]string{h.Redirect, h.SetHost, h.CORS.OriginRegex}, h.Captures...)
			for _, r := range h.Rewrites {
				values = append(values, r.Regex, r.To)
			}
			for _, v := range values {
				clean("value", v)
				if strings.ContainsAny(v, " '\"") && v != h.SetHost {
					t.Fatalf("%s=%q: word %q has a blank or a quote", s.Name, raw, v)
				}
			}
			for i, x := range append(slices.Clone(h.RequestHeaders), h.ResponseHeaders...) {
				if validHeaderName(x.Name) != nil {
					t.Fatalf("%s=%q: header name %q", s.Name, raw, x.Name)
				}
				clean("header value", x.Value)
				clean("header format", x.Format)
				ctx := SampleRequest
				if i >= len(h.RequestHeaders) {
					ctx = SampleResponse
				}
				if err := CheckHeaderFormat(x.Format, ctx); err != nil {
					t.Fatalf("%s=%q: header format %q: %v", s.Name, raw, x.Format, err)
				}
			}
			for _, l := range append(append(append([]string{}, h.CORS.Origins...), h.CORS.Methods...), h.CORS.Headers...) {
				clean("cors value", l)
				if strings.ContainsAny(l, " '\",") {
					t.Fatalf("%s=%q: cors word %q", s.Name, raw, l)
				}
			}
			for _, l := range h.Snippet {
				clean("snippet line", l)
				if sectionKeywords[strings.ToLower(strings.Fields(l)[0])] {
					t.Fatalf("%s=%q: snippet line %q opens a section", s.Name, raw, l)
				}
			}
		}
		g := d.Global
		clean("log-format", g.Log.Format)
		for l := range strings.SplitSeq(g.ConfigSnippet, "\n") {
			clean("global snippet line", l)
			if f := strings.Fields(l); len(f) > 0 && sectionKeywords[strings.ToLower(f[0])] {
				t.Fatalf("%s=%q: global snippet line %q opens a section", s.Name, raw, l)
			}
		}
		for _, srv := range g.Log.Servers {
			for _, v := range []string{srv.Address, srv.Facility, srv.Level, srv.MinLevel, srv.Format} {
				if strings.ContainsAny(v, " '\"\\#") {
					t.Fatalf("%s=%q: syslog word %q", s.Name, raw, v)
				}
				clean("syslog word", v)
			}
		}
	})
}
