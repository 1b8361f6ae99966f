package kube

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// routeKind is how the status writer reads and writes one route kind's
// parent status: the four kinds share gwv1.RouteStatus but no Go type.
type routeKind[T metav1.Object] struct {
	name   string // in log lines
	status func(T) *gwv1.RouteStatus
	copy   func(T) T
	update func(context.Context, T) error
}

// syncRoutes writes the parent status of the cached routes of one kind:
// ours from want where it differs (a condition whose status did not change
// keeps its lastTransitionTime), and none on a route no longer attached to
// a Gateway of ours; other controllers' entries are left alone.
func syncRoutes[T metav1.Object](ctx context.Context, s *StatusWriter, k routeKind[T], cached []T, want []model.RouteStatus, controller string, now metav1.Time) {
	byName := make(map[[2]string]model.RouteStatus, len(want))
	for _, r := range want {
		byName[[2]string{r.Namespace, r.Name}] = r
	}
	for _, o := range cached {
		cur := k.status(o).Parents
		var parents []gwv1.RouteParentStatus
		var changed bool
		if r, ok := byName[[2]string{o.GetNamespace(), o.GetName()}]; ok {
			parents, changed = mergeParents(cur, r.Parents, now)
		} else {
			parents = slices.DeleteFunc(slices.Clone(cur), func(p gwv1.RouteParentStatus) bool {
				return string(p.ControllerName) == controller
			})
			changed = len(parents) != len(cur)
		}
		if !changed {
			continue
		}
		up := k.copy(o)
		k.status(up).Parents = parents
		if err := k.update(ctx, up); err != nil {
			s.log.Warn(k.name+" status", "namespace", o.GetNamespace(), "name", o.GetName(), "err", err)
		}
	}
}

// syncGatewayRoutes writes the parent status of every route kind.
func (s *StatusWriter) syncGatewayRoutes(ctx context.Context, want *model.GatewayAPIStatus, now metav1.Time) {
	v1 := s.opts.Gateway.GatewayV1()
	upd := metav1.UpdateOptions{}
	syncRoutes(ctx, s, routeKind[*gwv1.HTTPRoute]{
		name:   "httproute",
		status: func(o *gwv1.HTTPRoute) *gwv1.RouteStatus { return &o.Status.RouteStatus },
		copy:   (*gwv1.HTTPRoute).DeepCopy,
		update: func(ctx context.Context, o *gwv1.HTTPRoute) error {
			_, err := v1.HTTPRoutes(o.Namespace).UpdateStatus(ctx, o, upd)
			return err
		},
	}, listOf[*gwv1.HTTPRoute](s.w.gatewayInformer("HTTPRoute")), want.HTTPRoutes, want.Controller, now)
	syncRoutes(ctx, s, routeKind[*gwv1.GRPCRoute]{
		name:   "grpcroute",
		status: func(o *gwv1.GRPCRoute) *gwv1.RouteStatus { return &o.Status.RouteStatus },
		copy:   (*gwv1.GRPCRoute).DeepCopy,
		update: func(ctx context.Context, o *gwv1.GRPCRoute) error {
			_, err := v1.GRPCRoutes(o.Namespace).UpdateStatus(ctx, o, upd)
			return err
		},
	}, listOf[*gwv1.GRPCRoute](s.w.gatewayInformer("GRPCRoute")), want.GRPCRoutes, want.Controller, now)
	syncRoutes(ctx, s, routeKind[*gwv1.TLSRoute]{
		name:   "tlsroute",
		status: func(o *gwv1.TLSRoute) *gwv1.RouteStatus { return &o.Status.RouteStatus },
		copy:   (*gwv1.TLSRoute).DeepCopy,
		update: func(ctx context.Context, o *gwv1.TLSRoute) error {
			_, err := v1.TLSRoutes(o.Namespace).UpdateStatus(ctx, o, upd)
			return err
		},
	}, listOf[*gwv1.TLSRoute](s.w.gatewayInformer("TLSRoute")), want.TLSRoutes, want.Controller, now)
	syncRoutes(ctx, s, routeKind[*gwv1.TCPRoute]{
		name:   "tcproute",
		status: func(o *gwv1.TCPRoute) *gwv1.RouteStatus { return &o.Status.RouteStatus },
		copy:   (*gwv1.TCPRoute).DeepCopy,
		update: func(ctx context.Context, o *gwv1.TCPRoute) error {
			_, err := v1.TCPRoutes(o.Namespace).UpdateStatus(ctx, o, upd)
			return err
		},
	}, listOf[*gwv1.TCPRoute](s.w.gatewayInformer("TCPRoute")), want.TCPRoutes, want.Controller, now)
}
