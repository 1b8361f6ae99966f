package model

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// listenerCondition finds a listener's condition in the model's status.
func listenerCondition(t *testing.T, d *Desired, gw, listener, typ string) metav1.Condition {
	t.Helper()
	for _, g := range d.GatewayAPI.Gateways {
		if g.Name != gw {
			continue
		}
		for _, l := range g.Listeners {
			if string(l.Name) != listener {
				continue
			}
			for _, c := range l.Conditions {
				if c.Type == typ {
					return c
				}
			}
		}
	}
	t.Fatalf("no %s condition on listener %s/%s", typ, gw, listener)
	return metav1.Condition{}
}

// TestListenerSecretNotYetRead: a certificateRef whose Secret is still
// loading keeps its listener programmed (no flapping status while the
// watch starts); one the watcher refuses to read is an
// InvalidCertificateRef that says why.
func TestListenerSecretNotYetRead(t *testing.T) {
	s, o := loadCase(t, "testdata/gateway_listeners.yaml")
	s.PendingSecrets = []string{"infra/nowhere"}
	d := Build(s, o)
	if c := listenerCondition(t, d, "edge", "missing", "Programmed"); c.Status != metav1.ConditionTrue {
		t.Errorf("listener with a loading Secret: Programmed %s %s, want True", c.Status, c.Reason)
	}
	s.PendingSecrets = nil
	s.RefusedSecrets = map[string]string{"infra/edge-tls": "namespace infra is not watched"}
	d = Build(s, o)
	c := listenerCondition(t, d, "edge", "secure", "ResolvedRefs")
	if c.Status != metav1.ConditionFalse || c.Reason != string(gwv1.ListenerReasonInvalidCertificateRef) ||
		c.Message != "Secret infra/edge-tls is not read: namespace infra is not watched" {
		t.Errorf("listener with a refused Secret: ResolvedRefs %s %s %q", c.Status, c.Reason, c.Message)
	}
	for _, cert := range d.TLS.Certificates {
		if cert.Name == "infra_edge-tls" {
			t.Errorf("refused Secret served for %v", cert.Hosts)
		}
	}
}

// TestGatewayListenersOrder: the same objects in another order give the
// same result: hosts, ports and the default certificate go to the oldest
// Gateway and route, not to the first listed.
func TestGatewayListenersOrder(t *testing.T) {
	s, o := loadCase(t, "testdata/gateway_listeners.yaml")
	want := Dump(Build(s, o))
	slices.Reverse(s.Gateways)
	slices.Reverse(s.HTTPRoutes)
	slices.Reverse(s.TLSRoutes)
	slices.Reverse(s.TCPRoutes)
	slices.Reverse(s.Namespaces)
	slices.Reverse(s.Secrets)
	if got := Dump(Build(s, o)); got != want {
		t.Errorf("reversed snapshot lists change the result:\n%s", lineDiff(want, got))
	}
}
