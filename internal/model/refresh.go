package model

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// ServiceKey names a Service whose EndpointSlices changed, or, for an
// ExternalName Service, whose name resolves to other addresses.
type ServiceKey struct{ Namespace, Name string }

// endpointSource is what a Backend keeps so that its Endpoints and Slots can
// be recomputed from new EndpointSlices without the Ingresses that made it.
type endpointSource struct {
	port             networkingv1.ServiceBackendPort
	serversIncrement int
	// failClosed: the backend's server-ca Secret is unusable, so it gets no
	// servers whatever its endpoints (tls.go).
	failClosed bool
}

// RefreshEndpoints returns what Build(s, o) returns when prev was built
// from a snapshot that differs from s only in the EndpointSlices of the
// given Services; any other difference (an Ingress, a Service, a Secret, a
// ConfigMap, the options) needs Build; a change in Snapshot.ExternalNames
// counts as a change of the EndpointSlices of the Services naming it. It recomputes only the Endpoints and
// Slots of the backends of those Services, so an endpoint change costs
// little at thousands of Ingresses. prev is not modified: what did not
// change is shared with it, and, like every Desired, is read-only.
func RefreshEndpoints(prev *Desired, s *Snapshot, o Options, services map[ServiceKey]bool) *Desired {
	if s == nil {
		s = &Snapshot{}
	}
	if d, ok := TryRefreshEndpoints(prev, s, o, services); ok {
		return d
	}
	return Build(s, o)
}

// TryRefreshEndpoints is RefreshEndpoints without the fall back to Build:
// ok is false when a Build is needed. s needs to hold only the given
// Services, their EndpointSlices and the ExternalNames they name, so that
// the caller can skip copying every cached object for an endpoint change.
func TryRefreshEndpoints(prev *Desired, s *Snapshot, o Options, services map[ServiceKey]bool) (d *Desired, ok bool) {
	if prev == nil {
		return nil, false
	}
	if s == nil {
		s = &Snapshot{}
	}
	// Problems on EndpointSlices and refused endpoint addresses come from
	// the endpoints themselves; which of them still hold is only known by
	// looking at every slice again.
	for _, p := range prev.Problems {
		if p.Object.Kind == kindEndpointSlice || p.Reason == ReasonInvalidEndpoint || p.Reason == ReasonExternalNameUnresolved {
			return nil, false
		}
	}
	next := *prev
	// The Ingress index stays valid: endpoints are no part of it. It
	// moves to the result, as UpdateIngresses's does.
	next.inc = nil
	handOver := func(d *Desired) *Desired {
		if x := prev.inc; x != nil && x.owner == prev {
			x.owner, d.inc = d, x
		}
		return d
	}
	if len(services) == 0 {
		return handOver(&next), true
	}
	b := &builder{
		s:        s,
		o:        o,
		d:        &Desired{},
		services: make(map[nsName]*corev1.Service, len(services)),
		slices:   make(map[nsName][]*discoveryv1.EndpointSlice, len(services)),
	}
	for _, svc := range s.Services {
		if svc != nil && services[ServiceKey{svc.Namespace, svc.Name}] {
			b.services[nsName{svc.Namespace, svc.Name}] = svc
		}
	}
	for _, sl := range s.EndpointSlices {
		if k, ok := sliceService(sl); ok && services[ServiceKey{k.ns, k.name}] {
			b.slices[k] = append(b.slices[k], sl)
		}
	}
	next.Backends = slices.Clone(prev.Backends)
	refresh := func(i int) {
		be := next.Backends[i]
		nb := *be
		// The Service is unchanged, so the reason the backend may have no
		// servers is unchanged too and already in prev.Problems.
		b.resolveEndpoints(&nb, b.services[nsName{be.Namespace, be.Service}])
		next.Backends[i] = &nb
	}
	if prev.bySvc != nil {
		for k := range services {
			for _, name := range prev.bySvc[k] {
				if i, ok := slices.BinarySearchFunc(next.Backends, name, compareBackendName); ok {
					refresh(i)
				}
			}
		}
	} else {
		for i, be := range next.Backends {
			if services[ServiceKey{be.Namespace, be.Service}] {
				refresh(i)
			}
		}
	}
	if len(b.d.Problems) > 0 {
		return nil, false
	}
	return handOver(&next), true
}

// indexBackends names the backends of each Service for
// TryRefreshEndpoints, which finds them by name in the sorted Backends:
// names stay valid when an update adds a backend, where positions would
// all shift.
func indexBackends(d *Desired) map[ServiceKey][]string {
	m := make(map[ServiceKey][]string, len(d.Backends))
	for _, be := range d.Backends {
		k := ServiceKey{be.Namespace, be.Service}
		m[k] = append(m[k], be.Name)
	}
	return m
}

func compareBackendName(be *Backend, name string) int { return strings.Compare(be.Name, name) }
