package model

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// stripMeta drops metadata.managedFields and kubectl's
// last-applied copy before an object enters a cache: together often the
// largest part of a cached object (for a Secret, its data again), and
// the model never reads them. Ingresses keep the latter: their status is
// written back with UpdateStatus, which would persist the removal.
func stripMeta(obj any) (any, error) {
	if m, ok := obj.(metav1.ObjectMetaAccessor); ok {
		meta := m.GetObjectMeta()
		meta.SetManagedFields(nil)
		if _, ing := obj.(*networkingv1.Ingress); ing {
			return obj, nil
		}
		if a := meta.GetAnnotations(); a[lastApplied] != "" {
			c := make(map[string]string, len(a)-1)
			for k, v := range a {
				if k != lastApplied {
					c[k] = v
				}
			}
			meta.SetAnnotations(c)
		}
	}
	return obj, nil
}

// StripUnread keeps of Services and EndpointSlices only what the model
// reads (backends.go): at 10,000 Services the rest (cluster IPs,
// selectors, owner references, endpoints' target references, nodes, zones
// and hints, the Service labels copied onto every slice) is most of the
// cache. Other objects lose what stripMeta drops. It is the informers'
// transform (client-go cache.TransformFunc): it changes obj in place.
func StripUnread(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		o.OwnerReferences = nil
		o.Spec = corev1.ServiceSpec{Type: o.Spec.Type, Ports: o.Spec.Ports, ExternalName: o.Spec.ExternalName}
		o.Status = corev1.ServiceStatus{}
	case *discoveryv1.EndpointSlice:
		o.OwnerReferences = nil
		o.Annotations = nil
		if name, ok := o.Labels[discoveryv1.LabelServiceName]; ok {
			o.Labels = map[string]string{discoveryv1.LabelServiceName: name}
		} else {
			o.Labels = nil
		}
		// The addresses of all endpoints share one array: one allocation
		// per slice instead of one per endpoint, 100,000 fewer objects
		// for the collector to trace at 100,000 endpoints.
		n := 0
		for _, ep := range o.Endpoints {
			n += len(ep.Addresses)
		}
		addrs := make([]string, 0, n)
		// A new array of exactly the endpoints: the decoder's grew by
		// doubling, and at 96 bytes an endpoint the spare capacity of
		// 10,000 slices was 6 MB.
		eps := make([]discoveryv1.Endpoint, len(o.Endpoints))
		for i, ep := range o.Endpoints {
			from := len(addrs)
			addrs = append(addrs, ep.Addresses...)
			eps[i] = discoveryv1.Endpoint{Addresses: addrs[from:len(addrs):len(addrs)], Conditions: discoveryv1.EndpointConditions{
				Ready: sharedBool(ep.Conditions.Ready), Serving: sharedBool(ep.Conditions.Serving), Terminating: sharedBool(ep.Conditions.Terminating)}}
		}
		if len(eps) == 0 {
			eps = o.Endpoints
		}
		o.Endpoints = eps
	}
	return stripMeta(obj)
}

// Every endpoint's conditions point at these two: three small
// allocations fewer per endpoint, 300,000 at 100,000 endpoints.
var boolTrue, boolFalse = true, false

func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &boolTrue
	}
	return &boolFalse
}

const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"
