package model

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
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

// serviceAnnotations are Service annotations a new Service may carry:
// settings of its backends, ones that make its routes not plain, invalid
// values and unknown keys.
var serviceAnnotations = []string{
	"haproxy.org/load-balance=leastconn",
	"haproxy.org/check=true",
	"haproxy.org/servers-increment=7",
	"haproxy.org/ssl-passthrough=true",
	"haproxy.org/route-acl=path_beg /x",
	"haproxy.org/standalone-backend=true",
	"haproxy.org/backend-config-snippet=http-request deny",
	"haproxy.org/auth-type=basic-auth",
	"haproxy.org/server-ssl=true",
	"haproxy.org/load-balance=nope",
	"haproxy.org/no-such-key=1",
}

// mutateServices applies one random change to s's Services: a new Service
// with its slice and Ingresses routing to it, a change of a Service
// (mostly one no Ingress names), or a deletion.
func (m *ingressMutator) mutateServices(s *Snapshot) string {
	m.step++
	r := m.r
	var namespaces []string
	for _, svc := range s.Services {
		if !slices.Contains(namespaces, svc.Namespace) {
			namespaces = append(namespaces, svc.Namespace)
		}
	}
	named := map[ServiceKey]bool{}
	for _, ing := range s.Ingresses {
		for _, k := range namedServices(ing) {
			named[ServiceKey{k.ns, k.name}] = true
		}
	}
	// Mostly Services no Ingress names.
	var pick []int
	for i, svc := range s.Services {
		if !named[ServiceKey{svc.Namespace, svc.Name}] || r.IntN(5) == 0 {
			pick = append(pick, i)
		}
	}
	switch op := r.IntN(10); {
	case op < 6 && len(namespaces) > 0: // a new Service, its slice and Ingresses
		ns := namespaces[r.IntN(len(namespaces))]
		if r.IntN(8) == 0 {
			ns = "fresh-ns"
		}
		name := fmt.Sprintf("svc-%d", m.step)
		// The plain bases name ns-3/later and ns-4/later elsewhere than in
		// Ingresses (incrementalBases).
		if later := []string{"ns-3", "ns-4"}[r.IntN(2)]; r.IntN(4) == 0 && slices.Contains(namespaces, later) &&
			!slices.ContainsFunc(s.Services, func(svc *corev1.Service) bool { return svc.Namespace == later && svc.Name == "later" }) {
			ns, name = later, "later"
		}
		svc := service(ns, name, svcPort("http", 80, 8080), svcPort("", 81, 8081))
		svc.CreationTimestamp = metav1.NewTime(epoch.Add(time.Duration(100000+m.step) * time.Minute))
		if r.IntN(4) == 0 {
			svc.Annotations = annotations(nil, serviceAnnotations[r.IntN(len(serviceAnnotations))])
		}
		if r.IntN(15) == 0 {
			svc.Spec.Type = corev1.ServiceTypeExternalName
			svc.Spec.ExternalName = "db.example.net"
		}
		s.Services = append(s.Services, svc)
		addr := fmt.Sprintf("198.18.%d.%d", 100+m.step%100, 1+r.IntN(200))
		if r.IntN(15) == 0 {
			addr = "127.0.0.1"
		}
		if r.IntN(8) != 0 {
			s.EndpointSlices = append(s.EndpointSlices, endpointSlice(ns, name, name+"-abcde", discoveryv1.AddressTypeIPv4, "http", 8080,
				endpoint(addr, "ready"), endpoint(fmt.Sprintf("198.19.%d.%d", m.step%200, 1+r.IntN(200)), "draining")))
		}
		log := "new Service " + ns + "/" + name
		for i := range r.IntN(3) {
			port := []any{"http", 80, 81, "http", "missing", 82}[r.IntN(6)]
			age := 100000 + m.step
			if r.IntN(6) == 0 {
				age = r.IntN(3000)
			}
			ing := ingress(ns, fmt.Sprintf("to-%s-%d", name, i), age,
				rule(fmt.Sprintf("%s-%d.example.com", name, i), path([]string{"/", "/api"}[r.IntN(2)], "Prefix", name, port)))
			if r.IntN(6) == 0 {
				withAnnotations(ing, annotationChoices[r.IntN(len(annotationChoices))])
			}
			s.Ingresses = append(s.Ingresses, ing)
			log += fmt.Sprintf(", Ingress %s port %v", ing.Name, port)
		}
		return log
	case len(pick) == 0:
		return "none"
	case op < 9: // change a Service
		i := pick[r.IntN(len(pick))]
		svc := s.Services[i].DeepCopy()
		what := ""
		switch r.IntN(3) {
		case 0:
			svc.Labels = map[string]string{"step": fmt.Sprint(m.step)}
			what = "relabel"
		case 1:
			svc.Annotations = annotations(nil, serviceAnnotations[r.IntN(len(serviceAnnotations))])
			what = "annotate"
		case 2:
			svc.Spec.Ports = append(svc.Spec.Ports, svcPort(fmt.Sprintf("p%d", m.step), 9000+m.step, 9000))
			what = "add port to"
		}
		s.Services[i] = svc
		return what + " Service " + svc.Namespace + "/" + svc.Name
	default: // delete a Service and its slices
		i := pick[r.IntN(len(pick))]
		svc := s.Services[i]
		s.Services = slices.Delete(s.Services, i, i+1)
		s.EndpointSlices = slices.DeleteFunc(s.EndpointSlices, func(sl *discoveryv1.EndpointSlice) bool {
			k, ok := sliceService(sl)
			return ok && k.ns == svc.Namespace && k.name == svc.Name
		})
		return "delete Service " + svc.Namespace + "/" + svc.Name
	}
}

// changedServices lists, as the watcher reports them, the Services that
// differ between a and b, and one that did not change.
func changedServices(a, b *Snapshot) map[ServiceKey]bool {
	out := map[ServiceKey]bool{}
	inB := map[ServiceKey]*corev1.Service{}
	for _, svc := range b.Services {
		inB[ServiceKey{svc.Namespace, svc.Name}] = svc
	}
	for _, svc := range a.Services {
		if k := (ServiceKey{svc.Namespace, svc.Name}); inB[k] != svc {
			out[k] = true
		}
	}
	for _, svc := range b.Services {
		if !slices.Contains(a.Services, svc) {
			out[ServiceKey{svc.Namespace, svc.Name}] = true
		}
	}
	for k := range inB {
		out[k] = true
		break
	}
	return out
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
	// Services that Ingresses do not name, yet that tcp-services or
	// --default-backend-service do, some of them missing.
	out["plain-elsewhere"] = func() (*Snapshot, Options) {
		s, _ := out["plain"]()
		s.Services = append(s.Services, service("ns-1", "db", svcPort("pg", 5432, 5432)))
		s.EndpointSlices = append(s.EndpointSlices, endpointSlice("ns-1", "db", "db-abcde", discoveryv1.AddressTypeIPv4, "pg", 5432,
			endpoint("198.18.99.1", "ready")))
		s.TCPServices = configMap("5432=ns-1/db:5432", "6000=ns-3/later:http")
		return s, Options{DefaultBackendService: "ns-4/later"}
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

// TestUpdateIngressesRandom applies random sequences of Ingress and Service
// changes (new Services with their slices and Ingresses, changed and
// deleted Services) and, between them, endpoint changes, and checks after
// every step that the incremental result is exactly a full Build's, that
// the previous result was left as it was, and that the fast path shares
// every backend it keeps.
func TestUpdateIngressesRandom(t *testing.T) {
	fast, total, newBackends, svcFast, svcTotal := 0, 0, 0, 0, 0
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
				late := map[ServiceKey]bool{}
				for range 40 {
					s2 := *s
					s2.Ingresses = slices.Clone(s.Ingresses)
					s2.Services = slices.Clone(s.Services)
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
						svcs := m.r.IntN(3) == 0
						if svcs {
							log = append(log, m.mutateServices(&s2))
						}
						for range m.r.IntN(2) {
							log = append(log, m.mutate(&s2))
						}
						total++
						if svcs {
							svcTotal++
						}
						if m.step%2 == 0 {
							// As the daemon does: told which Ingresses
							// and Services changed, without a snapshot.
							// A new Service's event may come a pass
							// after the Ingress routing to it.
							// Only a Service that a changed Ingress routes
							// to is held back: one named only by the
							// ConfigMap has nothing else to carry it, and
							// until its event comes the result is stale
							// by design.
							keys := changedServices(s, &s2)
							ings := changedIngresses(s, &s2)
							maps.Copy(keys, late)
							clear(late)
							for _, k := range slices.SortedFunc(maps.Keys(keys), func(a, b ServiceKey) int {
								return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
							}) {
								if m.r.IntN(4) == 0 && routedBy(ings, k) && !slices.ContainsFunc(s.Services, func(svc *corev1.Service) bool { return svc.Namespace == k.Namespace && svc.Name == k.Name }) {
									delete(keys, k)
									late[k] = true
								}
							}
							got, _ = TryUpdate(prev, Change{Ingresses: ings, Services: keys, Lookup: snapshotLookup(&s2)}, o)
						} else {
							got = updateIngresses(prev, &s2, o)
						}
						if got != nil {
							fast++
							if svcs {
								svcFast++
							}
							newBackends += len(got.Backends) - len(prev.Backends)
							for _, be := range prev.Backends {
								i, ok := slices.BinarySearchFunc(got.Backends, be.Name, compareBackendName)
								if !ok || got.Backends[i] != be {
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
					// Half the time the loop had a moment to copy the
					// maps ahead of the next change.
					if m.r.IntN(2) == 0 {
						Prepare(got)
					}
					s, prev = &s2, got
				}
			})
		}
	}
	t.Logf("%d of %d changes applied incrementally, %d of %d with Service changes; %d backends added", fast, total, svcFast, svcTotal, newBackends)
	if fast < total/8 {
		t.Fatalf("only %d of %d changes took the incremental path", fast, total)
	}
	if svcFast < svcTotal/8 || newBackends == 0 {
		t.Fatalf("only %d of %d Service changes took the incremental path, adding %d backends", svcFast, svcTotal, newBackends)
	}
}

// routedBy reports whether one of ings routes to the Service k.
func routedBy(ings map[ObjectRef]*networkingv1.Ingress, k ServiceKey) bool {
	for _, ing := range ings {
		if ing == nil || ing.Namespace != k.Namespace {
			continue
		}
		if b := ing.Spec.DefaultBackend; b != nil && b.Service != nil && b.Service.Name == k.Name {
			return true
		}
		for _, r := range ing.Spec.Rules {
			if r.HTTP == nil {
				continue
			}
			for _, p := range r.HTTP.Paths {
				if p.Backend.Service != nil && p.Backend.Service.Name == k.Name {
					return true
				}
			}
		}
	}
	return false
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
		"used service": func(s *Snapshot) (*Snapshot, Options) {
			s.Services = slices.Clone(s.Services)
			s.Services[1] = s.Services[1].DeepCopy()
			s.Services[1].Annotations = map[string]string{"haproxy.org/load-balance": "source"}
			return s, Options{}
		},
		"deleted service": func(s *Snapshot) (*Snapshot, Options) {
			s.Services = slices.Delete(slices.Clone(s.Services), 1, 2)
			return s, Options{}
		},
		"new service with a problem": func(s *Snapshot) (*Snapshot, Options) {
			svc := service("ns-1", "extra", svcPort("http", 80, 8080))
			svc.Annotations = map[string]string{"haproxy.org/load-balance": "nope"}
			s.Services = append(slices.Clone(s.Services), svc)
			s.Ingresses = append(slices.Clone(s.Ingresses), ingress("ns-1", "other", 9999, rule("other.example.com", path("/", "Prefix", "extra", "http"))))
			return s, Options{}
		},
		"new external name": func(s *Snapshot) (*Snapshot, Options) {
			svc := service("ns-1", "extra", svcPort("http", 80, 8080))
			svc.Spec.Type, svc.Spec.ExternalName = corev1.ServiceTypeExternalName, "db.example.net"
			s.Services = append(slices.Clone(s.Services), svc)
			s.Ingresses = append(slices.Clone(s.Ingresses), ingress("ns-1", "other", 9999, rule("other.example.com", path("/", "Prefix", "extra", "http"))))
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
	if got.Maps[MapHostOwner]["new.example.com"] != "@ns-7" || len(got.Served) != 101 || got.Routes.Len() != 201 {
		t.Fatalf("owner %q, %d served, %d routes", got.Maps[MapHostOwner]["new.example.com"], len(got.Served), got.Routes.Len())
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

// TestUpdateNewService is a new Service, its EndpointSlice and an Ingress
// to it, told as the daemon tells them: the backend is added without a
// Build, with the Service's settings and endpoints, and every other
// backend is the previous result's own.
func TestUpdateNewService(t *testing.T) {
	s := plainSnapshot(100)
	prev := Build(s, Options{})
	s2 := *s
	svc := service("ns-7", "fresh", svcPort("web", 80, 8080))
	svc.Annotations = map[string]string{"haproxy.org/load-balance": "source"}
	s2.Services = append(slices.Clone(s.Services), svc)
	s2.EndpointSlices = append(slices.Clone(s.EndpointSlices), endpointSlice("ns-7", "fresh", "fresh-abcde", discoveryv1.AddressTypeIPv4, "web", 8080,
		endpoint("198.18.42.1", "ready"), endpoint("198.18.42.2", "draining")))
	s2.Ingresses = append(slices.Clone(s.Ingresses), ingress("ns-7", "fresh", 9999,
		rule("fresh.example.com", path("/", "Prefix", "fresh", "web"), path("/v1", "Exact", "fresh", 80))))
	looked := map[ServiceKey]bool{}
	lookup := func(keys map[ServiceKey]bool) *Snapshot {
		for k := range keys {
			looked[k] = true
		}
		return snapshotLookup(&s2)(keys)
	}
	got, ok := TryUpdate(prev, Change{
		Ingresses: map[ObjectRef]*networkingv1.Ingress{{Kind: "Ingress", Namespace: "ns-7", Name: "fresh"}: s2.Ingresses[len(s2.Ingresses)-1]},
		Services:  map[ServiceKey]bool{{"ns-7", "fresh"}: true},
		Lookup:    lookup,
	}, Options{})
	if !ok {
		t.Fatal("a new Service and its Ingress took a full Build")
	}
	if want := Build(&s2, Options{}); !sameDesired(got, want) {
		t.Fatalf("differs from Build:\n%s", lineDiff(Dump(want), Dump(got)))
	}
	if len(looked) != 1 || !looked[ServiceKey{"ns-7", "fresh"}] {
		t.Fatalf("looked up %v, want the new Service alone", looked)
	}
	var added []string
	for _, be := range got.Backends {
		i, ok := slices.BinarySearchFunc(prev.Backends, be.Name, compareBackendName)
		if !ok {
			added = append(added, fmt.Sprintf("%s balance=%s endpoints=%d", be.Name, be.Balance, len(be.Endpoints)))
		} else if prev.Backends[i] != be {
			t.Fatalf("backend %s is a new value", be.Name)
		}
	}
	if want := []string{"ns-7_fresh_80 balance=source endpoints=2", "ns-7_fresh_web balance=source endpoints=2"}; !slices.Equal(added, want) {
		t.Fatalf("added %q, want %q", added, want)
	}
	// The new backends' endpoints refresh as any other's.
	s3 := cloneSnapshot(&s2)
	sliceMutations[0].do(s3, ServiceKey{"ns-7", "fresh"})
	refreshed, ok := TryRefreshEndpoints(got, s3, Options{}, map[ServiceKey]bool{{"ns-7", "fresh"}: true})
	if !ok || !sameDesired(refreshed, Build(s3, Options{})) {
		t.Fatal("the new backends' endpoints did not refresh as Build's")
	}
	// Without a lookup the backend cannot be finished: a Build.
	if _, ok := TryUpdateIngresses(Build(&s2, Options{}), map[ObjectRef]*networkingv1.Ingress{{Kind: "Ingress", Namespace: "ns-8", Name: "other"}: ingress("ns-8", "other", 9999,
		rule("other.example.com", path("/", "Prefix", "app-8", 80)))}, Options{}); ok {
		t.Fatal("a new backend without a lookup")
	}
}

// TestUpdateUnusedService: a Service no Ingress names comes, changes and
// goes without a Build and without a change of the result.
func TestUpdateUnusedService(t *testing.T) {
	s := plainSnapshot(50)
	prev := Build(s, Options{})
	s2 := *s
	s2.Services = append(slices.Clone(s.Services), service("ns-3", "idle", svcPort("http", 80, 8080)))
	got, ok := TryUpdate(prev, Change{Services: map[ServiceKey]bool{{"ns-3", "idle"}: true}, Lookup: snapshotLookup(&s2)}, Options{})
	if !ok || !sameDesired(got, Build(&s2, Options{})) {
		t.Fatal("a new unused Service was not applied as Build would")
	}
	if !slices.Equal(got.Backends, prev.Backends) || !sameMapObject(got.Maps[MapExact], prev.Maps[MapExact]) {
		t.Fatal("an unused Service changed the backends or maps")
	}
	s3 := *s
	got, ok = TryUpdate(got, Change{Services: map[ServiceKey]bool{{"ns-3", "idle"}: true}, Lookup: snapshotLookup(&s3)}, Options{})
	if !ok || !sameDesired(got, Build(&s3, Options{})) {
		t.Fatal("an unused Service's deletion was not applied as Build would")
	}
	// A Service an Ingress names is not unused.
	s4 := *s
	s4.Services = slices.Clone(s.Services)
	s4.Services[0] = s4.Services[0].DeepCopy()
	s4.Services[0].Labels = map[string]string{"x": "y"}
	if _, ok := TryUpdate(got, Change{Services: map[ServiceKey]bool{{s4.Services[0].Namespace, s4.Services[0].Name}: true}, Lookup: snapshotLookup(&s4)}, Options{}); ok {
		t.Fatal("a used Service's change was applied without a Build")
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

// TestNewServiceNamedElsewhere: a new Service that tcp-services names is
// never taken as unused, whether its own event comes with the change or
// an Ingress routing to it brings it first.
func TestNewServiceNamedElsewhere(t *testing.T) {
	for _, told := range []bool{true, false} {
		s, o := incrementalBases(t)["plain-elsewhere"]()
		prev := Build(s, o)
		s2 := *s
		s2.Services = append(slices.Clone(s.Services), service("ns-3", "later", svcPort("http", 80, 8080)))
		s2.EndpointSlices = append(slices.Clone(s.EndpointSlices), endpointSlice("ns-3", "later", "later-abcde",
			discoveryv1.AddressTypeIPv4, "http", 8080, endpoint("198.18.98.1", "ready")))
		s2.Ingresses = append(slices.Clone(s.Ingresses), ingress("ns-3", "to-later", 100000,
			rule("later.example.com", path("/", "Prefix", "later", "http"))))
		keys := map[ServiceKey]bool{}
		if told {
			keys[ServiceKey{"ns-3", "later"}] = true
		}
		got, ok := TryUpdate(prev, Change{Ingresses: changedIngresses(s, &s2), Services: keys, Lookup: snapshotLookup(&s2)}, o)
		if !ok {
			got = Build(&s2, o)
		}
		if want := Build(&s2, o); !sameDesired(got, want) {
			t.Fatalf("told=%v: the update differs from Build:\n%s", told, lineDiff(Dump(want), Dump(got)))
		}
	}
}

// TestPrepareCopiesAhead: after Prepare, the next update that changes the
// same maps writes into the copies Prepare made, once each, and gives
// what Build gives; the result it started from is left as it was.
func TestPrepareCopiesAhead(t *testing.T) {
	s := plainSnapshot(20)
	prev := Build(s, Options{})
	add := func(d *Desired, name, host string) *Desired {
		t.Helper()
		ing := ingress("ns-3", name, 100, rule(host, path("/", "Prefix", "app-3", "http")))
		got, ok := TryUpdate(d, Change{Ingresses: map[ObjectRef]*networkingv1.Ingress{ingressRef(ing): ing}}, Options{})
		if !ok {
			t.Fatalf("adding %s took a full Build", host)
		}
		s.Ingresses = append(s.Ingresses, ing)
		if want := Build(s, Options{}); !sameDesired(got, want) {
			t.Fatalf("adding %s: the update differs from Build:\n%s", host, lineDiff(Dump(want), Dump(got)))
		}
		return got
	}
	first := add(prev, "one", "one.example.com")
	if len(first.MapChanges) == 0 {
		t.Fatal("a new host changed no map")
	}
	Prepare(first)
	copies := map[string]map[string]string{}
	for name := range first.MapChanges {
		sp, ok := first.inc.spare[name]
		if !ok || sameMapObject(sp.copy, first.Maps[name]) {
			t.Fatalf("map %s: no private copy prepared (%v)", name, ok)
		}
		copies[name] = sp.copy
	}
	before := Dump(first)
	second := add(first, "two", "two.example.com")
	for name, c := range copies {
		if _, changed := second.MapChanges[name]; changed && !sameMapObject(second.Maps[name], c) {
			t.Errorf("map %s: the update copied it again instead of taking the prepared copy", name)
		}
	}
	if len(second.inc.spare) != 0 {
		t.Errorf("copies left after the update: %d", len(second.inc.spare))
	}
	if after := Dump(first); after != before {
		t.Fatalf("the update modified the result it started from:\n%s", lineDiff(before, after))
	}
}
