package model

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// sameDesired compares two results, leaving out the index kept for
// UpdateIngresses, which is bookkeeping and not state.
func sameDesired(a, b *Desired) bool {
	x, y := *a, *b
	x.inc, y.inc = nil, nil
	x.bySvc, y.bySvc = nil, nil
	// A hint of how the maps changed, checked by checkMapChanges.
	x.MapChanges, y.MapChanges = nil, nil
	return reflect.DeepEqual(&x, &y)
}

// ingressMutator changes a snapshot's Ingresses as the API would: objects
// are replaced by modified copies, never edited in place.
type ingressMutator struct {
	r    *rand.Rand
	step int
}

// serviceTargets lists "name:port" of the snapshot's Services' ports, by
// number and by name.
func serviceTargets(s *Snapshot, ns string) []networkingv1.IngressBackend {
	var out []networkingv1.IngressBackend
	for _, svc := range s.Services {
		if svc.Namespace != ns {
			continue
		}
		for _, p := range svc.Spec.Ports {
			out = append(out, backend(svc.Name, int(p.Port)))
			if p.Name != "" {
				out = append(out, backend(svc.Name, p.Name))
			}
		}
	}
	return out
}

// annotationChoices are Ingress annotations that make an Ingress not plain
// or change what other Ingresses get: variants, canaries, redirects,
// passthrough, standalone backends, invalid values.
var annotationChoices = []string{
	"haproxy.org/load-balance=leastconn",
	"haproxy.org/check-http=/healthz",
	"haproxy.org/ssl-redirect=true",
	"haproxy.org/ssl-passthrough=true",
	"haproxy.org/standalone-backend=true",
	"haproxy.org/load-balance=source\n x",
	"haproxy.org/unknown-key=1",
	"kubernetes.io/ingress.class=other",
	"example.com/owner=team-a",
}

func (m *ingressMutator) pickIngress(s *Snapshot) int {
	if len(s.Ingresses) == 0 {
		return -1
	}
	return m.r.IntN(len(s.Ingresses))
}

// mutate applies one random change to s2's Ingresses.
func (m *ingressMutator) mutate(s *Snapshot) string {
	m.step++
	r := m.r
	namespaces := []string{}
	for _, svc := range s.Services {
		if !slices.Contains(namespaces, svc.Namespace) {
			namespaces = append(namespaces, svc.Namespace)
		}
	}
	hosts := []string{}
	for _, ing := range s.Ingresses {
		for _, rl := range ing.Spec.Rules {
			hosts = append(hosts, rl.Host)
		}
	}
	newHost := func() string {
		if len(hosts) > 0 && r.IntN(4) == 0 {
			return hosts[r.IntN(len(hosts))]
		}
		return fmt.Sprintf("h%d-%d.example.com", m.step, r.IntN(1000))
	}
	newPath := func(ns string) (networkingv1.HTTPIngressPath, bool) {
		t := serviceTargets(s, ns)
		if len(t) == 0 || r.IntN(20) == 0 {
			return path("/", "Prefix", "missing", 80), true
		}
		p := []string{"/", "/api", "/x/y", "/api/"}[r.IntN(4)]
		typ := []string{"Prefix", "Exact", "ImplementationSpecific", "Prefix"}[r.IntN(4)]
		return networkingv1.HTTPIngressPath{Path: p, PathType: ptrType(typ), Backend: t[r.IntN(len(t))]}, true
	}
	// ages: mostly newer than everything, sometimes in between.
	age := 100000 + m.step
	if r.IntN(5) == 0 {
		age = r.IntN(3000)
	}
	switch op := r.IntN(10); {
	case op < 4 && len(namespaces) > 0: // a new Ingress
		ns := namespaces[r.IntN(len(namespaces))]
		var rules []networkingv1.IngressRule
		for range 1 + r.IntN(2) {
			p, _ := newPath(ns)
			rl := rule(newHost(), p)
			if r.IntN(3) == 0 {
				p2, _ := newPath(ns)
				rl.HTTP.Paths = append(rl.HTTP.Paths, p2)
			}
			rules = append(rules, rl)
		}
		ing := ingress(ns, fmt.Sprintf("new-%d", m.step), age, rules...)
		if r.IntN(6) == 0 {
			withAnnotations(ing, annotationChoices[r.IntN(len(annotationChoices))])
		}
		if r.IntN(10) == 0 {
			ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{rules[0].Host}, SecretName: "tls"}}
		}
		s.Ingresses = append(s.Ingresses, ing)
		return "add " + ing.Namespace + "/" + ing.Name
	case op < 6: // delete one
		i := m.pickIngress(s)
		if i < 0 {
			return "none"
		}
		ing := s.Ingresses[i]
		s.Ingresses = slices.Delete(s.Ingresses, i, i+1)
		return "delete " + ing.Namespace + "/" + ing.Name
	default: // change one
		i := m.pickIngress(s)
		if i < 0 {
			return "none"
		}
		ing := s.Ingresses[i].DeepCopy()
		what := ""
		switch r.IntN(7) {
		case 0:
			p, _ := newPath(ing.Namespace)
			ing.Spec.Rules = append(ing.Spec.Rules, rule(newHost(), p))
			what = "add rule"
		case 1:
			if len(ing.Spec.Rules) > 0 {
				ing.Spec.Rules[0].Host = newHost()
			}
			what = "change host"
		case 2:
			if len(ing.Spec.Rules) > 0 {
				ing.Spec.Rules = ing.Spec.Rules[1:]
			}
			what = "drop rule"
		case 3:
			withAnnotations(ing, annotationChoices[r.IntN(len(annotationChoices))])
			what = "annotate"
		case 4:
			ing.Annotations = nil
			what = "clear annotations"
		case 5:
			ing.Labels = map[string]string{"step": fmt.Sprint(m.step)}
			what = "relabel"
		case 6:
			if len(ing.Spec.Rules) > 0 && ing.Spec.Rules[0].HTTP != nil {
				p, _ := newPath(ing.Namespace)
				ing.Spec.Rules[0].HTTP.Paths = append(ing.Spec.Rules[0].HTTP.Paths, p)
			}
			what = "add path"
		}
		s.Ingresses[i] = ing
		return what + " " + ing.Namespace + "/" + ing.Name
	}
}

func ptrType(t string) *networkingv1.PathType {
	pt := networkingv1.PathType(t)
	return &pt
}

// incrementalBases are the snapshots the random sequences start from: every
// golden case (variants, canaries, route-acl, passthrough, default
// backends, TLS, conflicts, problems, classes, Gateway API) and a larger
// one of plain Ingresses where the incremental path applies most.
func incrementalBases(t *testing.T) map[string]func() (*Snapshot, Options) {
	cases, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(cases) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	out := map[string]func() (*Snapshot, Options){}
	for _, c := range cases {
		out[strings.TrimSuffix(filepath.Base(c), ".yaml")] = func() (*Snapshot, Options) { return loadCase(t, c) }
	}
	out["plain"] = func() (*Snapshot, Options) {
		s := benchSnapshot(60)
		for i, ing := range s.Ingresses {
			if i%3 != 0 {
				c := ing.DeepCopy()
				c.Annotations = nil
				s.Ingresses[i] = c
			}
		}
		return s, Options{}
	}
	out["plain-cross"] = func() (*Snapshot, Options) {
		s, _ := out["plain"]()
		return s, Options{AllowCrossNamespaceHosts: true}
	}
	out["plain-redirect"] = func() (*Snapshot, Options) {
		s, _ := out["plain"]()
		s.ConfigMap = configMap("ssl-redirect=true", "ssl-redirect-code=301")
		return s, Options{}
	}
	return out
}

// plainSnapshot is benchSnapshot without annotations: every Ingress is
// plain.
func plainSnapshot(n int) *Snapshot {
	s := benchSnapshot(n)
	for i, ing := range s.Ingresses {
		c := ing.DeepCopy()
		c.Annotations = nil
		s.Ingresses[i] = c
	}
	return s
}

// TestUpdateIngressesRandom applies random sequences of Ingress changes
// (and, between them, endpoint changes) and checks after every step that
// the incremental result is exactly a full Build's, that the previous
// result was left as it was, and that the fast path shares every backend.
func TestUpdateIngressesRandom(t *testing.T) {
	fast, total := 0, 0
	bases := incrementalBases(t)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range bases {
			if !yield(k) {
				return
			}
		}
	}) {
		for seed := range uint64(6) {
			t.Run(fmt.Sprintf("%s/seed=%d", name, seed), func(t *testing.T) {
				s, o := bases[name]()
				m := &ingressMutator{r: rand.New(rand.NewPCG(seed, 13))}
				prev := Build(s, o)
				var log []string
				for range 40 {
					s2 := *s
					s2.Ingresses = slices.Clone(s.Ingresses)
					s2.EndpointSlices = slices.Clone(s.EndpointSlices)
					before := Dump(prev)
					var got *Desired
					if m.r.IntN(6) == 0 && len(s2.Services) > 0 {
						svc := s2.Services[m.r.IntN(len(s2.Services))]
						k := ServiceKey{svc.Namespace, svc.Name}
						sliceMutations[0].do(&s2, k)
						log = append(log, "endpoints of "+k.Namespace+"/"+k.Name)
						got = RefreshEndpoints(prev, &s2, o, map[ServiceKey]bool{k: true})
					} else {
						for range 1 + m.r.IntN(2) {
							log = append(log, m.mutate(&s2))
						}
						total++
						if m.step%2 == 0 {
							// As the daemon does: told which Ingresses
							// changed, without a snapshot.
							got, _ = TryUpdateIngresses(prev, changedIngresses(s, &s2), o)
						} else {
							got = updateIngresses(prev, &s2, o)
						}
						if got != nil {
							fast++
							for i, be := range got.Backends {
								if be != prev.Backends[i] {
									t.Fatalf("after %q: backend %s is a new value", log, be.Name)
								}
							}
							checkMapChanges(t, log, prev, got)
						} else {
							got = Build(&s2, o)
						}
					}
					want := Build(&s2, o)
					if !sameDesired(got, want) {
						t.Fatalf("after %q: the update differs from Build:\n%s", log, lineDiff(Dump(want), Dump(got)))
					}
					if after := Dump(prev); after != before {
						t.Fatalf("after %q: the update modified the previous result:\n%s", log, lineDiff(before, after))
					}
					s, prev = &s2, got
				}
			})
		}
	}
	t.Logf("%d of %d Ingress changes applied incrementally", fast, total)
	if fast < total/8 {
		t.Fatalf("only %d of %d Ingress changes took the incremental path", fast, total)
	}
}

// checkMapChanges checks that got's MapChanges tell exactly how its maps
// differ from prev's, and that every other map is prev's own.
func checkMapChanges(t *testing.T, log []string, prev, got *Desired) {
	t.Helper()
	for name, m := range got.Maps {
		c, ok := got.MapChanges[name]
		if !ok {
			if !sameMapObject(m, prev.Maps[name]) {
				t.Fatalf("after %q: map %s changed without a MapChange", log, name)
			}
			continue
		}
		if !sameMapObject(c.From, prev.Maps[name]) || !sameMapObject(c.To, m) {
			t.Fatalf("after %q: MapChange of %s names other maps", log, name)
		}
		if !slices.IsSorted(c.Keys) {
			t.Fatalf("after %q: MapChange of %s: keys not sorted", log, name)
		}
		for k, v := range c.From {
			if w, ok := m[k]; (!ok || w != v) && !slices.Contains(c.Keys, k) {
				t.Fatalf("after %q: map %s: key %q changed but is not in MapChange", log, name, k)
			}
		}
		for k := range m {
			if _, ok := c.From[k]; !ok && !slices.Contains(c.Keys, k) {
				t.Fatalf("after %q: map %s: key %q added but is not in MapChange", log, name, k)
			}
		}
	}
	for name := range got.MapChanges {
		if _, ok := got.Maps[name]; !ok {
			t.Fatalf("after %q: MapChange for map %s, which is missing", log, name)
		}
	}
}

func sameMapObject(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// changedIngresses lists, as the watcher reports them, the Ingresses that
// differ between a and b (nil: gone in b), and one that did not change.
func changedIngresses(a, b *Snapshot) map[ObjectRef]*networkingv1.Ingress {
	out := map[ObjectRef]*networkingv1.Ingress{}
	inB := map[ObjectRef]*networkingv1.Ingress{}
	for _, ing := range b.Ingresses {
		inB[ingressRef(ing)] = ing
	}
	for _, ing := range a.Ingresses {
		if cur := inB[ingressRef(ing)]; cur != ing {
			out[ingressRef(ing)] = cur
		}
	}
	for ref, ing := range inB {
		out[ref] = ing
		break
	}
	for _, ing := range b.Ingresses {
		if !slices.Contains(a.Ingresses, ing) {
			out[ingressRef(ing)] = ing
		}
	}
	return out
}

// TestUpdateIngressesFallback checks the changes that need a full Build
// take it: what they change is outside any one Ingress.
func TestUpdateIngressesFallback(t *testing.T) {
	s := plainSnapshot(20)
	prev := Build(s, Options{})
	cases := map[string]func(s *Snapshot) (*Snapshot, Options){
		"options": func(s *Snapshot) (*Snapshot, Options) { return s, Options{IngressClass: "x"} },
		"configmap": func(s *Snapshot) (*Snapshot, Options) {
			s.ConfigMap = configMap("servers-increment=4")
			return s, Options{}
		},
		"service": func(s *Snapshot) (*Snapshot, Options) {
			s.Services = append(slices.Clone(s.Services), service("ns-1", "extra", svcPort("http", 80, 8080)))
			return s, Options{}
		},
		"new backend": func(s *Snapshot) (*Snapshot, Options) {
			s.Ingresses = append(slices.Clone(s.Ingresses), ingress("ns-1", "other", 9999, rule("other.example.com", path("/", "Prefix", "app-1", 8080))))
			return s, Options{}
		},
		"shared host": func(s *Snapshot) (*Snapshot, Options) {
			s.Ingresses = append(slices.Clone(s.Ingresses), ingress("ns-1", "other", 9999, rule("app-1.example.com", path("/new", "Prefix", "app-1", "http"))))
			return s, Options{}
		},
		"tls": func(s *Snapshot) (*Snapshot, Options) {
			ing := ingress("ns-1", "other", 9999, rule("other.example.com", path("/", "Prefix", "app-1", "http")))
			ing.Spec.TLS = []networkingv1.IngressTLS{{SecretName: "x"}}
			s.Ingresses = append(slices.Clone(s.Ingresses), ing)
			return s, Options{}
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			c := *s
			s2, o := f(&c)
			if d := updateIngresses(prev, s2, o); d != nil {
				t.Fatalf("applied incrementally")
			}
			if got, want := UpdateIngresses(prev, s2, o), Build(s2, o); !sameDesired(got, want) {
				t.Fatalf("differs from Build:\n%s", lineDiff(Dump(want), Dump(got)))
			}
		})
	}
}

// TestUpdateIngressesNewHost is the common case: a new host on an existing
// Service touches only that host's routes and map entries.
func TestUpdateIngressesNewHost(t *testing.T) {
	s := plainSnapshot(100)
	prev := Build(s, Options{})
	s2 := *s
	s2.Ingresses = append(slices.Clone(s.Ingresses), ingress("ns-7", "new", 9999, rule("new.example.com", path("/", "Prefix", "app-7", "http"))))
	got := updateIngresses(prev, &s2, Options{})
	if got == nil {
		t.Fatal("a new host on an existing Service took a full Build")
	}
	if be := got.Maps[MapPrefix]["new.example.com/"]; be != "ns-7_app-7_http" {
		t.Fatalf("new.example.com/ -> %q", be)
	}
	if got.Maps[MapHostOwner]["new.example.com"] != "@ns-7" || len(got.Served) != 101 || len(got.Routes) != 201 {
		t.Fatalf("owner %q, %d served, %d routes", got.Maps[MapHostOwner]["new.example.com"], len(got.Served), len(got.Routes))
	}
	if _, ok := prev.Maps[MapPrefix]["new.example.com/"]; ok {
		t.Fatal("prev changed")
	}
	// The unchanged maps are the very same values.
	if reflect.ValueOf(got.Maps[MapSSLRedirect]).Pointer() != reflect.ValueOf(prev.Maps[MapSSLRedirect]).Pointer() {
		t.Fatal("an unchanged map was copied")
	}
	// prev handed its index over: updating it again must take a Build.
	if updateIngresses(prev, &s2, Options{}) != nil {
		t.Fatal("prev was updated twice")
	}
	if !sameDesired(got, Build(&s2, Options{})) {
		t.Fatal("differs from Build")
	}
}

// TestUpdateIngressesBesideOtherGateways: another controller's
// GatewayClass, Gateway and HTTPRoute (a mesh or a second gateway in the
// cluster) leave the incremental path open; a class of this controller
// closes it.
func TestUpdateIngressesBesideOtherGateways(t *testing.T) {
	s := plainSnapshot(20)
	s.GatewayClasses = []*gwv1.GatewayClass{{ObjectMeta: metav1.ObjectMeta{Name: "mesh"},
		Spec: gwv1.GatewayClassSpec{ControllerName: "example.net/mesh"}}}
	s.Gateways = []*gwv1.Gateway{{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "ns-1"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "mesh", Listeners: []gwv1.Listener{{Name: "http", Protocol: gwv1.HTTPProtocolType, Port: 80}}}}}
	s.HTTPRoutes = []*gwv1.HTTPRoute{{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns-1"},
		Spec: gwv1.HTTPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Hostnames: []gwv1.Hostname{"mesh.example.com"}}}}
	prev := Build(s, Options{})
	s2 := *s
	s2.Ingresses = append(slices.Clone(s.Ingresses), ingress("ns-7", "new", 9999, rule("new.example.com", path("/", "Prefix", "app-7", "http"))))
	got := updateIngresses(prev, &s2, Options{})
	if got == nil {
		t.Fatal("another controller's Gateway API objects took the incremental path away")
	}
	if !sameDesired(got, Build(&s2, Options{})) {
		t.Fatal("differs from Build")
	}
	ours := *s
	ours.GatewayClasses = append(slices.Clone(s.GatewayClasses), &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "edge"},
		Spec: gwv1.GatewayClassSpec{ControllerName: DefaultGatewayController}})
	prev = Build(&ours, Options{})
	ours.Ingresses = s2.Ingresses
	if updateIngresses(prev, &ours, Options{}) != nil {
		t.Fatal("applied incrementally beside a GatewayClass of this controller")
	}
}
