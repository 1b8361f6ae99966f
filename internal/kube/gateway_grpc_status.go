package kube

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// syncGRPCRoutes writes GRPCRoute parent status as syncGatewayAPI does
// for HTTPRoutes: our entries where they differ from the model's, and
// none on a route no longer attached to a Gateway of ours.
func (s *StatusWriter) syncGRPCRoutes(ctx context.Context, want *model.GatewayAPIStatus, now metav1.Time) {
	cs := s.opts.Gateway
	wanted := make(map[[2]string]bool, len(want.GRPCRoutes))
	for _, r := range want.GRPCRoutes {
		wanted[[2]string{r.Namespace, r.Name}] = true
	}
	for _, o := range s.w.gatewayGRPCRoutes() {
		if wanted[[2]string{o.Namespace, o.Name}] {
			continue
		}
		kept := slices.DeleteFunc(slices.Clone(o.Status.Parents), func(p gwv1.RouteParentStatus) bool {
			return string(p.ControllerName) == want.Controller
		})
		if len(kept) == len(o.Status.Parents) {
			continue
		}
		up := o.DeepCopy()
		up.Status.Parents = kept
		if _, err := cs.GatewayV1().GRPCRoutes(o.Namespace).UpdateStatus(ctx, up, metav1.UpdateOptions{}); err != nil {
			s.log.Warn("grpcroute status", "namespace", o.Namespace, "name", o.Name, "err", err)
		}
	}
	for _, r := range want.GRPCRoutes {
		o, _ := s.w.gatewayObject("GRPCRoute", r.Namespace, r.Name).(*gwv1.GRPCRoute)
		if o == nil {
			continue
		}
		parents, changed := mergeParents(o.Status.Parents, r.Parents, now)
		if !changed {
			continue
		}
		up := o.DeepCopy()
		up.Status.Parents = parents
		if _, err := cs.GatewayV1().GRPCRoutes(r.Namespace).UpdateStatus(ctx, up, metav1.UpdateOptions{}); err != nil {
			s.log.Warn("grpcroute status", "namespace", r.Namespace, "name", r.Name, "err", err)
		}
	}
}
