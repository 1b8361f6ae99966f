package model

import (
	"cmp"
	"regexp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// GRPCRoutes are served as the HTTPRoutes they amount to: a gRPC call is
// an HTTP/2 POST to /<service>/<method>, so a method match is a path match
// and header matches and header filters are the same. Their rules get
// backends of their own that speak cleartext HTTP/2 (h2c) to the pods, and
// their status is reported as GRPCRoute status. HTTPRoutes are translated
// first and keep the host and path keys they claim.

// grpcRouteKind is the kind an HTTPRoute converted from a GRPCRoute
// carries in its TypeMeta.
const grpcRouteKind = "GRPCRoute"

// grpcAsHTTP converts g. What an HTTPRoute cannot say of g is turned into
// something the HTTPRoute translation refuses with a reason: a backendRef
// filter, an ExtensionRef filter.
func grpcAsHTTP(g *gwv1.GRPCRoute) *gwv1.HTTPRoute {
	h := &gwv1.HTTPRoute{
		TypeMeta:   metav1.TypeMeta{Kind: grpcRouteKind, APIVersion: gwv1.GroupVersion.String()},
		ObjectMeta: g.ObjectMeta,
		Spec:       gwv1.HTTPRouteSpec{CommonRouteSpec: g.Spec.CommonRouteSpec, Hostnames: g.Spec.Hostnames},
	}
	for _, gr := range g.Spec.Rules {
		var rule gwv1.HTTPRouteRule
		for _, m := range gr.Matches {
			hm := gwv1.HTTPRouteMatch{Path: grpcPath(m.Method)}
			for _, x := range m.Headers {
				t := gwv1.HeaderMatchExact
				if x.Type != nil && *x.Type == gwv1.GRPCHeaderMatchRegularExpression {
					t = gwv1.HeaderMatchRegularExpression
				}
				hm.Headers = append(hm.Headers, gwv1.HTTPHeaderMatch{Type: &t, Name: gwv1.HTTPHeaderName(x.Name), Value: x.Value})
			}
			rule.Matches = append(rule.Matches, hm)
		}
		for _, f := range gr.Filters {
			rule.Filters = append(rule.Filters, gwv1.HTTPRouteFilter{
				Type:                   gwv1.HTTPRouteFilterType(f.Type),
				RequestHeaderModifier:  f.RequestHeaderModifier,
				ResponseHeaderModifier: f.ResponseHeaderModifier,
				RequestMirror:          f.RequestMirror,
				ExtensionRef:           f.ExtensionRef,
			})
		}
		for _, br := range gr.BackendRefs {
			hbr := gwv1.HTTPBackendRef{BackendRef: br.BackendRef}
			if len(br.Filters) > 0 {
				hbr.Filters = []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterExtensionRef}}
			}
			rule.BackendRefs = append(rule.BackendRefs, hbr)
		}
		h.Spec.Rules = append(h.Spec.Rules, rule)
	}
	return h
}

// grpcPath is the path match of a gRPC method match: Exact for a service
// and method, a prefix for a service alone, a regular expression
// otherwise.
func grpcPath(m *gwv1.GRPCMethodMatch) *gwv1.HTTPPathMatch {
	if m == nil || m.Service == nil && m.Method == nil {
		return nil
	}
	regex := m.Type != nil && *m.Type == gwv1.GRPCMethodMatchRegularExpression
	if !regex {
		switch {
		case m.Service != nil && m.Method != nil:
			return &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchExact), Value: ptr("/" + *m.Service + "/" + *m.Method)}
		case m.Service != nil:
			return &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchPathPrefix), Value: ptr("/" + *m.Service)}
		}
	}
	svc, meth := "[^/]+", "[^/]+"
	if m.Service != nil {
		svc = *m.Service
		if !regex {
			svc = regexp.QuoteMeta(svc)
		}
	}
	if m.Method != nil {
		meth = *m.Method
		if !regex {
			meth = regexp.QuoteMeta(meth)
		}
	}
	return &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchRegularExpression), Value: ptr("/(?:" + svc + ")/(?:" + meth + ")")}
}

// routeKindOf is the kind of a route the translation handles.
func routeKindOf(r *gwv1.HTTPRoute) string {
	if r.Kind == grpcRouteKind {
		return grpcRouteKind
	}
	return "HTTPRoute"
}

// grpcRoutes are the snapshot's GRPCRoutes of served namespaces as
// HTTPRoutes, oldest first.
func (b *builder) grpcRoutes() []*gwv1.HTTPRoute {
	var out []*gwv1.HTTPRoute
	for _, g := range b.s.GRPCRoutes {
		if g != nil && namespaceAllowed(g.Namespace, b.o) {
			out = append(out, grpcAsHTTP(g))
		}
	}
	slices.SortFunc(out, func(x, y *gwv1.HTTPRoute) int {
		return cmp.Or(x.CreationTimestamp.Time.Compare(y.CreationTimestamp.Time), cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
	})
	return out
}

// AppProtocolH2C is the Service port appProtocol of cleartext HTTP/2.
const AppProtocolH2C = "kubernetes.io/h2c"

// routeH2C reports whether a backend Gateway API routes use is a Service
// port whose appProtocol says it speaks h2c, as the Gateway API asks
// implementations to honour (HTTPRouteBackendProtocolH2C).
func routeH2C(st *backendState, svc *corev1.Service) bool {
	if len(st.routes) == 0 || svc == nil {
		return false
	}
	sp, ok := servicePort(svc, st.port)
	return ok && sp.AppProtocol != nil && *sp.AppProtocol == AppProtocolH2C
}
