package model

import (
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
)

func TestClassSelection(t *testing.T) {
	ours := ingressClass("haproxy", Controller+"/haproxy", false)
	oursBare := ingressClass("hap", Controller, false)
	oursSlash := ingressClass("hap-slash", Controller+"/", false)
	other := ingressClass("nginx", "k8s.io/ingress-nginx", false)
	oursDefault := ingressClass("haproxy-default", Controller+"/haproxy", true)
	bareDefault := ingressClass("bare-default", Controller, true)
	otherDefault := ingressClass("nginx-default", "k8s.io/ingress-nginx", true)

	plain := func() *networkingv1.Ingress {
		return ingress("ns", "web", 0, rule("a.example.com", path("/", "Prefix", "svc", 80)))
	}
	field := func(class string) *networkingv1.Ingress { return withClass(plain(), class) }
	annotated := func(key, class string) *networkingv1.Ingress { return withAnnotations(plain(), key+"="+class) }

	named := Options{IngressClass: "haproxy"}
	namedEmpty := Options{IngressClass: "haproxy", EmptyIngressClass: true}

	tests := []struct {
		name    string
		o       Options
		classes []*networkingv1.IngressClass
		ing     *networkingv1.Ingress
		served  bool
	}{
		// --ingress.class set.
		{"field names our class", named, []*networkingv1.IngressClass{ours, other}, field("haproxy"), true},
		{"field names a class of another controller", named, []*networkingv1.IngressClass{ours, other}, field("nginx"), false},
		{"field names a missing class", named, []*networkingv1.IngressClass{other}, field("haproxy"), false},
		{"field names a class with the bare controller", named, []*networkingv1.IngressClass{oursBare}, field("hap"), false},
		{"annotation names our class", named, nil, annotated(AnnotationIngressClass, "haproxy"), true},
		{"prefixed annotation names our class", named, nil, annotated("haproxy.org/ingress.class", "haproxy"), true},
		{"annotation names another class", named, []*networkingv1.IngressClass{ours}, annotated(AnnotationIngressClass, "nginx"), false},
		{"no class", named, []*networkingv1.IngressClass{ours}, plain(), false},
		{"no class, empty class allowed", namedEmpty, []*networkingv1.IngressClass{ours}, plain(), true},
		{"no class, our default class", named, []*networkingv1.IngressClass{oursDefault, other}, plain(), true},
		{"no class, foreign default class", named, []*networkingv1.IngressClass{ours, otherDefault}, plain(), false},
		{"no class, foreign default, empty class allowed", namedEmpty, []*networkingv1.IngressClass{otherDefault}, plain(), true},

		// --ingress.class empty.
		{"empty: no class, no classes", Options{}, nil, plain(), true},
		{"empty: no class, our bare default", Options{}, []*networkingv1.IngressClass{bareDefault}, plain(), true},
		{"empty: no class, foreign default", Options{}, []*networkingv1.IngressClass{otherDefault}, plain(), false},
		{"empty: field names bare controller class", Options{}, []*networkingv1.IngressClass{oursBare}, field("hap"), true},
		{"empty: field names controller/ class", Options{}, []*networkingv1.IngressClass{oursSlash}, field("hap-slash"), true},
		{"empty: field names a named class", Options{}, []*networkingv1.IngressClass{ours}, field("haproxy"), false},
		{"empty: annotation names any class", Options{}, nil, annotated(AnnotationIngressClass, "haproxy"), false},
		{"empty: field names a missing class", Options{}, nil, field("haproxy"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Snapshot{
				Ingresses:      []*networkingv1.Ingress{tt.ing},
				IngressClasses: tt.classes,
				Services:       nil,
			}
			d := Build(s, tt.o)
			got := len(d.Served) == 1
			if got != tt.served {
				t.Fatalf("served = %t, want %t", got, tt.served)
			}
			if got != (d.Routes.Len() == 1) {
				t.Fatalf("served=%t but %d routes", got, d.Routes.Len())
			}
		})
	}
}

func TestDefaultClassNewestWins(t *testing.T) {
	older := ingressClass("old", "k8s.io/ingress-nginx", true)
	newer := ingressClass("new", Controller+"/haproxy", true)
	newer.CreationTimestamp.Time = epoch.Add(1)
	ing := ingress("ns", "web", 0, rule("a.example.com", path("/", "Prefix", "svc", 80)))
	for _, order := range [][]*networkingv1.IngressClass{{older, newer}, {newer, older}} {
		d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, IngressClasses: order}, Options{IngressClass: "haproxy"})
		if len(d.Served) != 1 {
			t.Fatalf("order %s,%s: not served; the newest default class is ours", order[0].Name, order[1].Name)
		}
	}
}

func TestNamespaceFilter(t *testing.T) {
	ings := []*networkingv1.Ingress{
		ingress("a", "x", 0, rule("a.example.com", path("/", "Prefix", "svc", 80))),
		ingress("b", "x", 0, rule("b.example.com", path("/", "Prefix", "svc", 80))),
		ingress("c", "x", 0, rule("c.example.com", path("/", "Prefix", "svc", 80))),
	}
	tests := []struct {
		name string
		o    Options
		want []string
	}{
		{"none", Options{}, []string{"a", "b", "c"}},
		{"whitelist", Options{NamespaceWhitelist: []string{"a", "c"}}, []string{"a", "c"}},
		{"blacklist", Options{NamespaceBlacklist: []string{"b"}}, []string{"a", "c"}},
		{"both", Options{NamespaceWhitelist: []string{"a", "b"}, NamespaceBlacklist: []string{"b"}}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Build(&Snapshot{Ingresses: ings}, tt.o)
			var got []string
			for _, r := range d.Served {
				got = append(got, r.Namespace)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("served namespaces %v, want %v", got, tt.want)
			}
			for _, b := range d.Backends {
				if !slices.Contains(tt.want, b.Namespace) {
					t.Errorf("backend %s from a filtered namespace", b.Name)
				}
			}
		})
	}
}
