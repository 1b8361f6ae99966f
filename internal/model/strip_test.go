package model

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStripUnread: the cache keeps neither managedFields nor kubectl's
// last-applied copy (except on Ingresses, whose status is written back
// whole), nor the Service and EndpointSlice fields the model
// does not read; the annotations the model reads stay, and the maps the
// object came with are not modified (they may be shared).
func TestStripUnread(t *testing.T) {
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: "x", Namespace: "ns",
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			OwnerReferences: []metav1.OwnerReference{{Name: "owner"}},
			Annotations:     map[string]string{lastApplied: `{"big":"copy"}`, "haproxy.org/check": "false"}}
	}
	svc := &corev1.Service{ObjectMeta: meta(), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.1",
		Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	orig := svc.Annotations
	if _, err := StripUnread(svc); err != nil {
		t.Fatal(err)
	}
	if svc.ManagedFields != nil || svc.OwnerReferences != nil || !reflect.DeepEqual(svc.Annotations, map[string]string{"haproxy.org/check": "false"}) {
		t.Errorf("Service after strip: managedFields %v, owners %v, annotations %v", svc.ManagedFields, svc.OwnerReferences, svc.Annotations)
	}
	if !reflect.DeepEqual(svc.Spec, corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}) {
		t.Errorf("Service spec after strip: %+v", svc.Spec)
	}
	if orig[lastApplied] == "" {
		t.Error("the annotations map the object came with was modified")
	}
	ing := &networkingv1.Ingress{ObjectMeta: meta()}
	if _, err := StripUnread(ing); err != nil {
		t.Fatal(err)
	}
	if ing.ManagedFields != nil || ing.Annotations[lastApplied] == "" || ing.Annotations["haproxy.org/check"] != "false" {
		t.Errorf("Ingress after strip: managedFields %v, annotations %v", ing.ManagedFields, ing.Annotations)
	}
	node := "n1"
	sl := endpointSlice("ns", "web", "web-1", discoveryv1.AddressTypeIPv4, "http", 8080, endpoint("198.18.0.1", "ready"))
	sl.Labels["app"] = "web"
	sl.Annotations = map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "x"}
	sl.Endpoints = append(sl.Endpoints, endpoint("198.18.0.2", "ready"))
	sl.Endpoints[1].Addresses = append(sl.Endpoints[1].Addresses, "198.18.0.3")
	sl.Endpoints[0].NodeName = &node
	sl.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "web-abc"}
	// As the decoder leaves it: room for more endpoints than there are.
	sl.Endpoints = slices.Grow(sl.Endpoints, 14)
	if _, err := StripUnread(sl); err != nil {
		t.Fatal(err)
	}
	if len(sl.Labels) != 1 || sl.Labels[discoveryv1.LabelServiceName] != "web" || sl.Annotations != nil ||
		sl.Endpoints[0].NodeName != nil || sl.Endpoints[0].TargetRef != nil || len(sl.Ports) != 1 {
		t.Errorf("EndpointSlice after strip: %+v", sl)
	}
	if a, b := sl.Endpoints[0].Addresses, sl.Endpoints[1].Addresses; !slices.Equal(a, []string{"198.18.0.1"}) || !slices.Equal(b, []string{"198.18.0.2", "198.18.0.3"}) || cap(a) != 1 {
		t.Errorf("EndpointSlice addresses after strip: %q (cap %d), %q", a, cap(a), b)
	}
	if cap(sl.Endpoints) != 2 {
		t.Errorf("EndpointSlice endpoints after strip: capacity %d for 2", cap(sl.Endpoints))
	}
}

// TestGoldenStripped builds every golden case from objects as the cache
// holds them, stripped: the result must be the same, so the transform
// drops nothing the model reads.
func TestGoldenStripped(t *testing.T) {
	cases, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(cases) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, c := range cases {
		t.Run(strings.TrimSuffix(filepath.Base(c), ".yaml"), func(t *testing.T) {
			s, o := loadCase(t, c)
			want := Dump(Build(s, o))
			stripped, _ := loadCase(t, c)
			n := 0
			strip := func(obj any) {
				if _, err := StripUnread(obj); err != nil {
					t.Fatal(err)
				}
				n++
			}
			for _, x := range stripped.Ingresses {
				strip(x)
			}
			for _, x := range stripped.IngressClasses {
				strip(x)
			}
			for _, x := range stripped.Services {
				strip(x)
			}
			for _, x := range stripped.EndpointSlices {
				strip(x)
			}
			for _, x := range stripped.Secrets {
				strip(x)
			}
			for _, x := range []*corev1.ConfigMap{stripped.ConfigMap, stripped.ErrorFiles, stripped.TCPServices, stripped.PatternFiles} {
				if x != nil {
					strip(x)
				}
			}
			if n == 0 {
				t.Fatal("nothing to strip")
			}
			if got := Dump(Build(stripped, o)); got != want {
				t.Fatalf("stripped objects build differently:\n%s", lineDiff(want, got))
			}
		})
	}
}
