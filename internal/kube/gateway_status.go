package kube

import (
	"context"
	"net/netip"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// ServeGatewayAPI hands the writer the Gateway API status the model wants.
func (s *StatusWriter) ServeGatewayAPI(st model.GatewayAPIStatus) {
	s.mu.Lock()
	// Without Gateway API objects before and now there is nothing to
	// write: waking the writer on every pass (every endpoint change)
	// would only compete with the pass for the CPU.
	idle := s.gateway != nil && s.gateway.Controller == st.Controller && noGatewayAPI(*s.gateway) && noGatewayAPI(st)
	s.gateway = &st
	s.mu.Unlock()
	if idle {
		return
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func noGatewayAPI(st model.GatewayAPIStatus) bool {
	return len(st.Classes)+len(st.Gateways)+len(st.HTTPRoutes)+len(st.TLSRoutes)+len(st.TCPRoutes)+len(st.GRPCRoutes) == 0
}

// syncGatewayAPI writes the status of our GatewayClasses, Gateways and
// HTTPRoutes where it differs from the model's; a condition whose status
// did not change keeps its lastTransitionTime, and other controllers'
// entries in a route's parents are left alone.
func (s *StatusWriter) syncGatewayAPI(ctx context.Context) {
	s.mu.Lock()
	want := s.gateway
	s.mu.Unlock()
	cs := s.opts.Gateway
	if want == nil || cs == nil {
		return
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	for _, c := range want.Classes {
		o, _ := s.w.gatewayObject("GatewayClass", "", c.Name).(*gwv1.GatewayClass)
		if o == nil {
			continue
		}
		conds, changed := mergeConditions(o.Status.Conditions, c.Conditions, now)
		if !changed {
			continue
		}
		up := o.DeepCopy()
		up.Status.Conditions = conds
		if _, err := cs.GatewayV1().GatewayClasses().UpdateStatus(ctx, up, metav1.UpdateOptions{}); err != nil {
			s.log.Warn("gatewayclass status", "name", c.Name, "err", err)
		}
	}
	published := s.gatewayAddresses()
	for _, g := range want.Gateways {
		o, _ := s.w.gatewayObject("Gateway", g.Namespace, g.Name).(*gwv1.Gateway)
		if o == nil {
			continue
		}
		addrs := published
		if g.OwnAddress {
			addrs = ownAddress(g.Address)
		}
		conds, changed := mergeConditions(o.Status.Conditions, g.Conditions, now)
		listeners := make([]gwv1.ListenerStatus, 0, len(g.Listeners))
		for _, l := range g.Listeners {
			var cur []metav1.Condition
			var old *gwv1.ListenerStatus
			if i := slices.IndexFunc(o.Status.Listeners, func(x gwv1.ListenerStatus) bool { return x.Name == l.Name }); i >= 0 {
				old = &o.Status.Listeners[i]
				cur = old.Conditions
			}
			lc, lchanged := mergeConditions(cur, l.Conditions, now)
			l.Conditions = lc
			if lchanged || old == nil || old.AttachedRoutes != l.AttachedRoutes || !slices.EqualFunc(old.SupportedKinds, l.SupportedKinds, sameKind) {
				changed = true
			}
			listeners = append(listeners, l)
		}
		if len(o.Status.Listeners) != len(listeners) || !slices.EqualFunc(o.Status.Addresses, addrs, sameAddress) {
			changed = true
		}
		if !changed {
			continue
		}
		up := o.DeepCopy()
		up.Status.Conditions, up.Status.Listeners, up.Status.Addresses = conds, listeners, addrs
		if _, err := cs.GatewayV1().Gateways(g.Namespace).UpdateStatus(ctx, up, metav1.UpdateOptions{}); err != nil {
			s.log.Warn("gateway status", "namespace", g.Namespace, "name", g.Name, "err", err)
		}
	}
	s.syncGatewayRoutes(ctx, want, now)
}

// ownAddress is a Gateway's own address in status form (none when "").
func ownAddress(a string) []gwv1.GatewayStatusAddress {
	if a == "" {
		return nil
	}
	t := gwv1.IPAddressType
	return []gwv1.GatewayStatusAddress{{Type: &t, Value: a}}
}

// gatewayAddresses are the published addresses in Gateway status form.
func (s *StatusWriter) gatewayAddresses() []gwv1.GatewayStatusAddress {
	var out []gwv1.GatewayStatusAddress
	for _, a := range s.opts.Addresses {
		t := gwv1.HostnameAddressType
		if ip, err := netip.ParseAddr(a); err == nil {
			t, a = gwv1.IPAddressType, ip.String()
		}
		out = append(out, gwv1.GatewayStatusAddress{Type: &t, Value: a})
	}
	return out
}

func sameKind(a, b gwv1.RouteGroupKind) bool {
	return a.Kind == b.Kind && (a.Group == nil) == (b.Group == nil) && (a.Group == nil || *a.Group == *b.Group)
}

// mergeConditions gives want with the lastTransitionTime of cur's
// condition of the same type and status (now otherwise), and whether that
// differs from cur.
func mergeConditions(cur, want []metav1.Condition, now metav1.Time) ([]metav1.Condition, bool) {
	out := make([]metav1.Condition, 0, len(want))
	changed := len(cur) != len(want)
	for _, c := range want {
		c.LastTransitionTime = now
		i := slices.IndexFunc(cur, func(x metav1.Condition) bool { return x.Type == c.Type })
		switch {
		case i < 0:
			changed = true
		case cur[i].Status == c.Status:
			c.LastTransitionTime = cur[i].LastTransitionTime
			if cur[i].Reason != c.Reason || cur[i].Message != c.Message || cur[i].ObservedGeneration != c.ObservedGeneration {
				changed = true
			}
		default:
			changed = true
		}
		out = append(out, c)
	}
	return out, changed
}

// mergeParents replaces our parents' entries in cur by want's, keeping the
// entries of other controllers.
func mergeParents(cur, want []gwv1.RouteParentStatus, now metav1.Time) ([]gwv1.RouteParentStatus, bool) {
	var controller gwv1.GatewayController
	if len(want) > 0 {
		controller = want[0].ControllerName
	}
	var out []gwv1.RouteParentStatus
	ours := 0
	for _, p := range cur {
		if p.ControllerName == controller {
			ours++
			continue
		}
		out = append(out, p)
	}
	changed := ours != len(want)
	for _, p := range want {
		var old []metav1.Condition
		if i := slices.IndexFunc(cur, func(x gwv1.RouteParentStatus) bool {
			return x.ControllerName == controller && sameParent(x.ParentRef, p.ParentRef)
		}); i >= 0 {
			old = cur[i].Conditions
		} else {
			changed = true
		}
		c, ch := mergeConditions(old, p.Conditions, now)
		p.Conditions = c
		changed = changed || ch
		out = append(out, p)
	}
	return out, changed
}

func sameParent(a, b gwv1.ParentReference) bool {
	str := func(p *gwv1.Namespace) string {
		if p == nil {
			return ""
		}
		return string(*p)
	}
	sec := func(p *gwv1.SectionName) string {
		if p == nil {
			return ""
		}
		return string(*p)
	}
	port := func(p *gwv1.PortNumber) gwv1.PortNumber {
		if p == nil {
			return 0
		}
		return *p
	}
	return a.Name == b.Name && str(a.Namespace) == str(b.Namespace) && sec(a.SectionName) == sec(b.SectionName) && port(a.Port) == port(b.Port)
}

func sameAddress(a, b gwv1.GatewayStatusAddress) bool {
	return a.Value == b.Value && (a.Type == nil) == (b.Type == nil) && (a.Type == nil || *a.Type == *b.Type)
}
