package model

import (
	"slices"

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
	if prev == nil {
		return Build(s, o)
	}
	if s == nil {
		s = &Snapshot{}
	}
	// Problems on EndpointSlices and refused endpoint addresses come from
	// the endpoints themselves; which of them still hold is only known by
	// looking at every slice again.
	for _, p := range prev.Problems {
		if p.Object.Kind == kindEndpointSlice || p.Reason == ReasonInvalidEndpoint || p.Reason == ReasonExternalNameUnresolved {
			return Build(s, o)
		}
	}
	d := *prev
	// The Ingress index stays valid: endpoints are no part of it. It
	// moves to the result, as UpdateIngresses's does.
	d.inc = nil
	handOver := func(d *Desired) *Desired {
		if x := prev.inc; x != nil && x.owner == prev {
			x.owner, d.inc = d, x
		}
		return d
	}
	if len(services) == 0 {
		return handOver(&d)
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
	d.Backends = slices.Clone(prev.Backends)
	for i, be := range d.Backends {
		if !services[ServiceKey{be.Namespace, be.Service}] {
			continue
		}
		nb := *be
		// The Service is unchanged, so the reason the backend may have no
		// servers is unchanged too and already in prev.Problems.
		b.resolveEndpoints(&nb, b.services[nsName{be.Namespace, be.Service}])
		d.Backends[i] = &nb
	}
	if len(b.d.Problems) > 0 {
		return Build(s, o)
	}
	return handOver(&d)
}
