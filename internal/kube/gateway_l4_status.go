package kube

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// syncGatewayL4Routes writes the TLSRoutes' and TCPRoutes' parent status
// as syncGatewayAPI does the HTTPRoutes'.
func (s *StatusWriter) syncGatewayL4Routes(ctx context.Context, want *model.GatewayAPIStatus, now metav1.Time) {
	cs := s.opts.Gateway
	tls, tcp := s.w.gatewayL4Routes()
	wanted := func(list []model.RouteStatus) map[[2]string]model.RouteStatus {
		m := make(map[[2]string]model.RouteStatus, len(list))
		for _, r := range list {
			m[[2]string{r.Namespace, r.Name}] = r
		}
		return m
	}
	// parents gives the route's new parents (ours from want, others'
	// kept) and whether they differ from cur.
	parents := func(cur []gwv1.RouteParentStatus, r model.RouteStatus, ok bool) ([]gwv1.RouteParentStatus, bool) {
		if ok {
			return mergeParents(cur, r.Parents, now)
		}
		kept := slices.DeleteFunc(slices.Clone(cur), func(p gwv1.RouteParentStatus) bool {
			return string(p.ControllerName) == want.Controller
		})
		return kept, len(kept) != len(cur)
	}
	wantTLS := wanted(want.TLSRoutes)
	for _, o := range tls {
		r, ok := wantTLS[[2]string{o.Namespace, o.Name}]
		ps, changed := parents(o.Status.Parents, r, ok)
		if !changed {
			continue
		}
		up := o.DeepCopy()
		up.Status.Parents = ps
		if _, err := cs.GatewayV1().TLSRoutes(o.Namespace).UpdateStatus(ctx, up, metav1.UpdateOptions{}); err != nil {
			s.log.Warn("tlsroute status", "namespace", o.Namespace, "name", o.Name, "err", err)
		}
	}
	wantTCP := wanted(want.TCPRoutes)
	for _, o := range tcp {
		r, ok := wantTCP[[2]string{o.Namespace, o.Name}]
		ps, changed := parents(o.Status.Parents, r, ok)
		if !changed {
			continue
		}
		up := o.DeepCopy()
		up.Status.Parents = ps
		if _, err := cs.GatewayV1().TCPRoutes(o.Namespace).UpdateStatus(ctx, up, metav1.UpdateOptions{}); err != nil {
			s.log.Warn("tcproute status", "namespace", o.Namespace, "name", o.Name, "err", err)
		}
	}
}
