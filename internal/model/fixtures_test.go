package model

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Small constructors for table tests. Ages are minutes after a fixed epoch,
// so a lower age is an older object.

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func meta(ns, name string, age int) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Minute))}
}

func ingress(ns, name string, age int, rules ...networkingv1.IngressRule) *networkingv1.Ingress {
	return &networkingv1.Ingress{ObjectMeta: meta(ns, name, age), Spec: networkingv1.IngressSpec{Rules: rules}}
}

// withClass sets spec.ingressClassName.
func withClass(ing *networkingv1.Ingress, class string) *networkingv1.Ingress {
	ing.Spec.IngressClassName = &class
	return ing
}

// withAnnotations adds "key=value" annotations.
func withAnnotations(ing *networkingv1.Ingress, kv ...string) *networkingv1.Ingress {
	ing.Annotations = annotations(ing.Annotations, kv...)
	return ing
}

func annotations(m map[string]string, kv ...string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return m
}

func withDefault(ing *networkingv1.Ingress, svc string, port any) *networkingv1.Ingress {
	be := backend(svc, port)
	ing.Spec.DefaultBackend = &be
	return ing
}

func rule(host string, paths ...networkingv1.HTTPIngressPath) networkingv1.IngressRule {
	return networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{
		HTTP: &networkingv1.HTTPIngressRuleValue{Paths: paths},
	}}
}

// path makes a rule path; typ "" leaves pathType nil.
func path(p, typ, svc string, port any) networkingv1.HTTPIngressPath {
	hp := networkingv1.HTTPIngressPath{Path: p, Backend: backend(svc, port)}
	if typ != "" {
		pt := networkingv1.PathType(typ)
		hp.PathType = &pt
	}
	return hp
}

// backend names a Service port by number (int) or name (string).
func backend(svc string, port any) networkingv1.IngressBackend {
	be := networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: svc}}
	switch p := port.(type) {
	case int:
		be.Service.Port.Number = int32(p)
	case string:
		be.Service.Port.Name = p
	}
	return be
}

func ingressClass(name, controller string, isDefault bool) *networkingv1.IngressClass {
	ic := &networkingv1.IngressClass{ObjectMeta: meta("", name, 0), Spec: networkingv1.IngressClassSpec{Controller: controller}}
	if isDefault {
		ic.Annotations = map[string]string{AnnotationDefaultClass: "true"}
	}
	return ic
}

// svcPort is a Service port named name with port and targetPort.
func svcPort(name string, port, target int) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: int32(port), Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt(target)}
}

func service(ns, name string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: meta(ns, name, 0), Spec: corev1.ServiceSpec{Ports: ports}}
}

// endpoint's state sets its conditions: "ready", "notready", "draining"
// (terminating and serving), "terminated" (terminating, not serving);
// anything else leaves all three nil.
func endpoint(addr, state string) discoveryv1.Endpoint {
	t, f := true, false
	ep := discoveryv1.Endpoint{Addresses: []string{addr}}
	switch state {
	case "ready":
		ep.Conditions = discoveryv1.EndpointConditions{Ready: &t, Serving: &t, Terminating: &f}
	case "notready":
		ep.Conditions = discoveryv1.EndpointConditions{Ready: &f, Serving: &f, Terminating: &f}
	case "draining":
		ep.Conditions = discoveryv1.EndpointConditions{Ready: &f, Serving: &t, Terminating: &t}
	case "terminated":
		ep.Conditions = discoveryv1.EndpointConditions{Ready: &f, Serving: &f, Terminating: &t}
	}
	return ep
}

func endpointSlice(ns, svc, name string, family discoveryv1.AddressType, portName string, port int, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	m := meta(ns, name, 0)
	m.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
	p, proto := int32(port), corev1.ProtocolTCP
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  m,
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &p, Protocol: &proto}},
		Endpoints:   eps,
	}
}

func configMap(kv ...string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: meta("haproxy-controller", controllerConfigMap, 0), Data: annotations(nil, kv...)}
}

// problemsOf lists "Kind ns/name Reason" for each problem, the part tests
// assert on; messages are covered by the golden files.
func problemsOf(d *Desired) []string {
	var out []string
	for _, p := range d.Problems {
		out = append(out, p.Object.String()+" "+p.Reason)
	}
	return out
}

func backendByName(t *testing.T, d *Desired, name string) *Backend {
	t.Helper()
	for _, b := range d.Backends {
		if b.Name == name {
			return b
		}
	}
	t.Fatalf("no backend %s; have:\n%s", name, Dump(d))
	return nil
}
