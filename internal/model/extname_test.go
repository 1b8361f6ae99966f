package model

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

func externalService(ns, name, host string, ports ...corev1.ServicePort) *corev1.Service {
	svc := service(ns, name, ports...)
	svc.Spec.Type = corev1.ServiceTypeExternalName
	svc.Spec.ExternalName = host
	return svc
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func externalSnapshot(names map[string]ResolvedName) *Snapshot {
	ing := ingress("ns", "web", 0, rule("x.example",
		path("/db", "Prefix", "db", 8443),
		path("/bare", "Prefix", "bare", 9000),
		path("/", "Prefix", "web", 80),
	))
	return &Snapshot{
		Ingresses: []*networkingv1.Ingress{ing},
		Services: []*corev1.Service{
			service("ns", "web", svcPort("", 80, 8080)),
			externalService("ns", "db", "DB.Example.", svcPort("https", 8443, 443)),
			externalService("ns", "bare", "bare.example"),
		},
		ExternalNames: names,
	}
}

func TestExternalNameEndpoints(t *testing.T) {
	d := Build(externalSnapshot(map[string]ResolvedName{
		"db.example":   {Addrs: addrs("203.0.113.7", "::ffff:198.51.100.2", "203.0.113.7", "2001:db8::5")},
		"bare.example": {Addrs: addrs("198.51.100.9")},
	}), Options{})
	if got := problemsOf(d); len(got) != 0 {
		t.Fatalf("problems %v", got)
	}
	// The Service port's number, not its targetPort: a client of the DNS
	// name connects to the port it was given.
	want := []Endpoint{{Address: "198.51.100.2", Port: 8443}, {Address: "203.0.113.7", Port: 8443}, {Address: "2001:db8::5", Port: 8443}}
	if got := backendByName(t, d, "ns_db_8443").Endpoints; !reflect.DeepEqual(got, want) {
		t.Errorf("db endpoints %v, want %v", got, want)
	}
	if got := backendByName(t, d, "ns_bare_9000").Endpoints; !reflect.DeepEqual(got, []Endpoint{{Address: "198.51.100.9", Port: 9000}}) {
		t.Errorf("a Service without ports takes the Ingress's port number: %v", got)
	}
}

func TestExternalNameRefused(t *testing.T) {
	o := Options{LocalAddresses: addrs("198.51.100.1")}
	d := Build(externalSnapshot(map[string]ResolvedName{
		"db.example":   {Addrs: addrs("127.0.0.1", "169.254.169.254", "::1", "fe80::1", "0.0.0.0", "198.51.100.1", "::ffff:127.0.0.2", "203.0.113.7")},
		"bare.example": {Addrs: addrs("127.0.0.1")},
	}), o)
	if got := backendByName(t, d, "ns_db_8443").Endpoints; !reflect.DeepEqual(got, []Endpoint{{Address: "203.0.113.7", Port: 8443}}) {
		t.Errorf("only the public address serves: %v", got)
	}
	if got := backendByName(t, d, "ns_bare_9000").Endpoints; len(got) != 0 {
		t.Errorf("a name resolving only to refused addresses has no servers: %v", got)
	}
	var db, bare int
	for _, p := range d.Problems {
		if p.Reason != ReasonInvalidEndpoint || p.Object.Kind != "Service" {
			t.Errorf("unexpected problem %v", p)
		}
		switch p.Object.Name {
		case "db":
			db++
		case "bare":
			bare++
		}
	}
	if db != 7 || bare != 1 {
		t.Errorf("InvalidEndpoint problems: db %d (want 7), bare %d (want 1): %v", db, bare, problemsOf(d))
	}
	// Other Services are untouched.
	if b := backendByName(t, d, "ns_web_80"); b.Slots != slotsFor(len(b.Endpoints), 0) {
		t.Errorf("web backend changed: %+v", b)
	}
}

func TestExternalNameUnresolvedAndPending(t *testing.T) {
	d := Build(externalSnapshot(map[string]ResolvedName{
		"db.example": {Err: "no such host"},
	}), Options{})
	if got := problemsOf(d); !slices.Equal(got, []string{"Service ns/db ExternalNameUnresolved"}) {
		t.Errorf("problems %v", got)
	}
	for _, name := range []string{"ns_db_8443", "ns_bare_9000"} {
		if b := backendByName(t, d, name); len(b.Endpoints) != 0 || b.Slots != slotsFor(0, 0) {
			t.Errorf("%s: %+v", name, b)
		}
	}
	// The route stays: 503 from the empty backend, not the catch-all.
	if r, ok := Match(d, "x.example", "/db"); !ok || r.Backend != "ns_db_8443" {
		t.Errorf("/db -> %v", r.Backend)
	}
}

func TestExternalNameDisabled(t *testing.T) {
	d := Build(externalSnapshot(map[string]ResolvedName{
		"db.example":   {Addrs: addrs("203.0.113.7")},
		"bare.example": {Addrs: addrs("203.0.113.8")},
	}), Options{DisableExternalName: true})
	want := []string{"Ingress ns/web UnsupportedService", "Ingress ns/web UnsupportedService"}
	if got := problemsOf(d); !slices.Equal(got, want) {
		t.Errorf("problems %v, want %v", got, want)
	}
	if b := backendByName(t, d, "ns_db_8443"); len(b.Endpoints) != 0 {
		t.Errorf("disabled ExternalName has servers: %v", b.Endpoints)
	}
}

func TestExternalNameRefresh(t *testing.T) {
	db := map[ServiceKey]bool{{Namespace: "ns", Name: "db"}: true}
	steps := []map[string]ResolvedName{
		nil,
		{"db.example": {Addrs: addrs("203.0.113.7")}},
		{"db.example": {Addrs: addrs("203.0.113.8", "203.0.113.9")}},
		{"db.example": {Addrs: addrs("127.0.0.1")}},
		{"db.example": {Err: "no such host"}},
		{"db.example": {Addrs: addrs("203.0.113.7")}},
	}
	for i := 1; i < len(steps); i++ {
		checkRefresh(t, externalSnapshot(steps[i-1]), Options{}, func(s *Snapshot) map[ServiceKey]bool {
			s.ExternalNames = steps[i]
			return db
		})
	}
	// A new address is a server change only: the routes and everything
	// else are shared with the previous result.
	prev := Build(externalSnapshot(steps[1]), Options{})
	got := RefreshEndpoints(prev, externalSnapshot(steps[2]), Options{}, db)
	if e := backendByName(t, got, "ns_db_8443").Endpoints; len(e) != 2 || e[0].Address != "203.0.113.8" {
		t.Errorf("refreshed endpoints %v", e)
	}
	if backendByName(t, got, "ns_web_80") != backendByName(t, prev, "ns_web_80") {
		t.Error("an untouched backend was copied")
	}
}
