package model

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// sliceMutation changes the EndpointSlices of one Service, as the API
// would: slices are replaced by modified copies, never edited in place.
type sliceMutation struct {
	name string
	do   func(s *Snapshot, k ServiceKey)
}

// serviceSlices gives the indexes of k's slices in s.EndpointSlices.
func serviceSlices(s *Snapshot, k ServiceKey) []int {
	var out []int
	for i, sl := range s.EndpointSlices {
		if sl != nil && sl.Namespace == k.Namespace && sl.Labels[discoveryv1.LabelServiceName] == k.Name {
			out = append(out, i)
		}
	}
	return out
}

// editFirst replaces k's first slice by an edited copy; without a slice it
// adds one for the Service's first port.
func editFirst(s *Snapshot, k ServiceKey, edit func(*discoveryv1.EndpointSlice)) {
	idx := serviceSlices(s, k)
	if len(idx) == 0 {
		port := "http"
		for _, svc := range s.Services {
			if svc.Namespace == k.Namespace && svc.Name == k.Name && len(svc.Spec.Ports) > 0 {
				port = svc.Spec.Ports[0].Name
			}
		}
		sl := endpointSlice(k.Namespace, k.Name, k.Name+"-new", discoveryv1.AddressTypeIPv4, port, 8080)
		edit(sl)
		s.EndpointSlices = append(s.EndpointSlices, sl)
		return
	}
	sl := s.EndpointSlices[idx[0]].DeepCopy()
	edit(sl)
	s.EndpointSlices[idx[0]] = sl
}

var sliceMutations = []sliceMutation{
	{"add", func(s *Snapshot, k ServiceKey) {
		editFirst(s, k, func(sl *discoveryv1.EndpointSlice) {
			addr := "198.18.250.7"
			if sl.AddressType == discoveryv1.AddressTypeIPv6 {
				addr = "2001:db8::fa07"
			}
			sl.Endpoints = append(sl.Endpoints, endpoint(addr, "ready"))
		})
	}},
	{"add-many", func(s *Snapshot, k ServiceKey) {
		editFirst(s, k, func(sl *discoveryv1.EndpointSlice) {
			for i := range 25 {
				addr := fmt.Sprintf("198.18.251.%d", i+1)
				if sl.AddressType == discoveryv1.AddressTypeIPv6 {
					addr = fmt.Sprintf("2001:db8::fb%02x", i+1)
				}
				sl.Endpoints = append(sl.Endpoints, endpoint(addr, "ready"))
			}
		})
	}},
	{"remove", func(s *Snapshot, k ServiceKey) {
		editFirst(s, k, func(sl *discoveryv1.EndpointSlice) {
			if len(sl.Endpoints) > 0 {
				sl.Endpoints = sl.Endpoints[1:]
			}
		})
	}},
	{"notready", func(s *Snapshot, k ServiceKey) {
		editFirst(s, k, func(sl *discoveryv1.EndpointSlice) {
			for i := range sl.Endpoints {
				sl.Endpoints[i].Conditions = endpoint("", "notready").Conditions
			}
		})
	}},
	{"terminating", func(s *Snapshot, k ServiceKey) {
		editFirst(s, k, func(sl *discoveryv1.EndpointSlice) {
			for i := range sl.Endpoints {
				sl.Endpoints[i].Conditions = endpoint("", "draining").Conditions
			}
		})
	}},
	{"ready", func(s *Snapshot, k ServiceKey) {
		editFirst(s, k, func(sl *discoveryv1.EndpointSlice) {
			for i := range sl.Endpoints {
				sl.Endpoints[i].Conditions = endpoint("", "ready").Conditions
			}
		})
	}},
	{"port", func(s *Snapshot, k ServiceKey) {
		editFirst(s, k, func(sl *discoveryv1.EndpointSlice) {
			for i := range sl.Ports {
				p := int32(9999)
				sl.Ports[i].Port = &p
			}
		})
	}},
	{"invalid-address", func(s *Snapshot, k ServiceKey) {
		editFirst(s, k, func(sl *discoveryv1.EndpointSlice) {
			sl.Endpoints = append(sl.Endpoints, endpoint("198.18.0.010", "ready"))
		})
	}},
	{"delete", func(s *Snapshot, k ServiceKey) {
		idx := serviceSlices(s, k)
		if len(idx) == 0 {
			return
		}
		s.EndpointSlices = slices.Delete(s.EndpointSlices, idx[0], idx[0]+1)
	}},
	{"delete-all", func(s *Snapshot, k ServiceKey) {
		s.EndpointSlices = slices.DeleteFunc(s.EndpointSlices, func(sl *discoveryv1.EndpointSlice) bool {
			return sl != nil && sl.Namespace == k.Namespace && sl.Labels[discoveryv1.LabelServiceName] == k.Name
		})
	}},
}

// touchedServices lists every Service a case names: by object, by slice
// label and by backend.
func touchedServices(s *Snapshot, d *Desired) []ServiceKey {
	seen := map[ServiceKey]bool{}
	for _, svc := range s.Services {
		seen[ServiceKey{svc.Namespace, svc.Name}] = true
	}
	for _, sl := range s.EndpointSlices {
		if k, ok := sliceService(sl); ok {
			seen[ServiceKey{k.ns, k.name}] = true
		}
	}
	for _, be := range d.Backends {
		seen[ServiceKey{be.Namespace, be.Service}] = true
	}
	out := make([]ServiceKey, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b ServiceKey) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out
}

func cloneSnapshot(s *Snapshot) *Snapshot {
	c := *s
	c.EndpointSlices = slices.Clone(s.EndpointSlices)
	return &c
}

// checkRefresh asserts that refreshing prev for the mutated Services gives
// exactly what Build gives, and leaves prev as it was.
func checkRefresh(t *testing.T, s *Snapshot, o Options, mutate func(*Snapshot) map[ServiceKey]bool) {
	t.Helper()
	prev := Build(s, o)
	before := Dump(prev)
	s2 := cloneSnapshot(s)
	changed := mutate(s2)
	got := RefreshEndpoints(prev, s2, o, changed)
	want := Build(s2, o)
	if !sameDesired(got, want) {
		t.Fatalf("RefreshEndpoints differs from Build:\n%s", lineDiff(Dump(want), Dump(got)))
	}
	if after := Dump(prev); after != before {
		t.Fatalf("RefreshEndpoints modified prev:\n%s", lineDiff(before, after))
	}
	// The daemon passes only the changed Services and their slices.
	part := &Snapshot{ExternalNames: s2.ExternalNames}
	for _, svc := range s2.Services {
		if changed[ServiceKey{svc.Namespace, svc.Name}] {
			part.Services = append(part.Services, svc)
		}
	}
	for _, sl := range s2.EndpointSlices {
		if k, ok := sliceService(sl); ok && changed[ServiceKey{k.ns, k.name}] {
			part.EndpointSlices = append(part.EndpointSlices, sl)
		}
	}
	if got, ok := TryRefreshEndpoints(Build(s, o), part, o, changed); ok && !sameDesired(got, want) {
		t.Fatalf("TryRefreshEndpoints on the changed Services alone differs from Build:\n%s", lineDiff(Dump(want), Dump(got)))
	}
}

func TestRefreshEndpointsGolden(t *testing.T) {
	cases, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(cases) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, c := range cases {
		s, o := loadCase(t, c)
		keys := touchedServices(s, Build(s, o))
		for _, m := range sliceMutations {
			for _, k := range keys {
				t.Run(fmt.Sprintf("%s/%s/%s_%s", strings.TrimSuffix(filepath.Base(c), ".yaml"), m.name, k.Namespace, k.Name), func(t *testing.T) {
					checkRefresh(t, s, o, func(s2 *Snapshot) map[ServiceKey]bool {
						m.do(s2, k)
						return map[ServiceKey]bool{k: true}
					})
				})
			}
			t.Run(fmt.Sprintf("%s/%s/all", strings.TrimSuffix(filepath.Base(c), ".yaml"), m.name), func(t *testing.T) {
				checkRefresh(t, s, o, func(s2 *Snapshot) map[ServiceKey]bool {
					changed := map[ServiceKey]bool{}
					for _, k := range keys {
						m.do(s2, k)
						changed[k] = true
					}
					return changed
				})
			})
		}
	}
}

func TestRefreshEndpointsMany(t *testing.T) {
	s := benchSnapshot(400)
	o := Options{}
	for _, m := range sliceMutations {
		t.Run(m.name, func(t *testing.T) {
			checkRefresh(t, s, o, func(s2 *Snapshot) map[ServiceKey]bool {
				changed := map[ServiceKey]bool{}
				for i := 0; i < 400; i += 37 {
					k := ServiceKey{fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("app-%d", i)}
					m.do(s2, k)
					changed[k] = true
				}
				return changed
			})
		})
	}
	// Marking a Service whose slices did not change is harmless.
	checkRefresh(t, s, o, func(*Snapshot) map[ServiceKey]bool {
		return map[ServiceKey]bool{{"ns-1", "app-1"}: true, {"ns-1", "missing"}: true}
	})
}

// TestRefreshEndpointsShares checks that the fast path is taken: backends
// of other Services are the very same objects as before.
func TestRefreshEndpointsShares(t *testing.T) {
	s := benchSnapshot(100)
	prev := Build(s, Options{})
	s2 := cloneSnapshot(s)
	k := ServiceKey{"ns-7", "app-7"}
	sliceMutations[0].do(s2, k)
	got := RefreshEndpoints(prev, s2, Options{}, map[ServiceKey]bool{k: true})
	shared := 0
	for i, be := range got.Backends {
		if be == prev.Backends[i] {
			shared++
		} else if be.Service != k.Name || len(be.Endpoints) != 4 {
			t.Fatalf("backend %s was recomputed: %+v", be.Name, be)
		}
	}
	if shared != 99 {
		t.Fatalf("%d backends shared with prev, want 99", shared)
	}
}
