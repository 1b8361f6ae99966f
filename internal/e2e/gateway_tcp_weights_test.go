package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// TCPRoute weight tests use pods in 198.18.233.0/24.

// TestGatewayTCPRouteWeights: a TCPRoute with weighted backendRefs on a
// real HAProxy splits the TCP listener's connections: both weighted pods
// answer and the weight-0 pod never does. A backendRef whose Service is
// missing makes the route ResolvedRefs=False, and its share of the
// connections is refused while the others are still served.
func TestGatewayTCPRouteWeights(t *testing.T) {
	e := newEnv(t)
	gw := e.gatewayClient()
	ctx := context.Background()
	pods := map[string]*fePod{}
	for i, name := range []string{"tcpw-v1", "tcpw-v2", "tcpw-v3"} {
		pods[name] = feEchoPod(t, name, 233, 10+i)
		e.service(name, nil, pods[name].Pod)
	}
	controller, class := e.gatewayClass(gw)
	e.startDaemon("--gateway-controller=" + controller)
	tcpPort := testenv.FreePort(t)
	if _, err := gw.GatewayV1().Gateways(e.ns).Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: e.ns},
		Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(class),
			Listeners: []gwv1.Listener{{Name: "tcp", Protocol: gwv1.TCPProtocolType, Port: gwv1.PortNumber(tcpPort)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	weighted := func(svc string, w int32) gwv1.BackendRef {
		return gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(svc), Port: ptrTo(gwv1.PortNumber(80))}, Weight: ptrTo(w)}
	}
	if _, err := gw.GatewayV1().TCPRoutes(e.ns).Create(ctx, &gwv1.TCPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "split", Namespace: e.ns},
		Spec: gwv1.TCPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "edge", SectionName: ptrTo(gwv1.SectionName("tcp"))}}},
			Rules:           []gwv1.TCPRouteRule{{BackendRefs: []gwv1.BackendRef{weighted("tcpw-v1", 70), weighted("tcpw-v2", 30), weighted("tcpw-v3", 0)}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	routeCondition(t, gw, "TCPRoute", e.ns, "split", "Accepted", "True", "Accepted")
	routeCondition(t, gw, "TCPRoute", e.ns, "split", "ResolvedRefs", "True", "ResolvedRefs")

	// spread makes n connections and counts who answered; refused counts
	// the connections closed without an answer.
	spread := func(n int) (answers map[string]int, refused int, err error) {
		answers = map[string]int{}
		for range n {
			out, err := rawTCPGet(tcpPort, "/tcp")
			if err != nil || out == "" {
				refused++
				continue
			}
			pod := ""
			for name := range pods {
				if strings.Contains(out, "X-Pod: "+name+"\r\n") {
					pod = name
				}
			}
			if pod == "" {
				return nil, 0, fmt.Errorf("answer %q is from none of the pods", out)
			}
			answers[pod]++
		}
		return answers, refused, nil
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		_, err := rawTCPGet(tcpPort, "/tcp")
		return err
	})
	// At 70/30 the chance that 200 connections miss either pod is below
	// 1e-30.
	answers, refused, err := spread(200)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("weights 70/30/0 over 200 connections: %v, %d refused", answers, refused)
	if answers["tcpw-v1"] == 0 || answers["tcpw-v2"] == 0 || answers["tcpw-v3"] != 0 || refused != 0 {
		t.Fatalf("weights 70/30/0: answers %v and %d refused, want both weighted pods, not the weight-0 one, none refused", answers, refused)
	}

	// A missing Service keeps its share: those connections are refused.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		r, err := gw.GatewayV1().TCPRoutes(e.ns).Get(ctx, "split", metav1.GetOptions{})
		if err != nil {
			return err
		}
		r.Spec.Rules[0].BackendRefs = append(r.Spec.Rules[0].BackendRefs, weighted("tcpw-missing", 50))
		_, err = gw.GatewayV1().TCPRoutes(e.ns).Update(ctx, r, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	routeCondition(t, gw, "TCPRoute", e.ns, "split", "ResolvedRefs", "False", "BackendNotFound")
	routeCondition(t, gw, "TCPRoute", e.ns, "split", "Accepted", "True", "Accepted")
	e.event("TCPRoute", "split", "BackendNotFound")
	testenv.Eventually(t, 20*time.Second, func() error {
		answers, refused, err := spread(100)
		if err != nil {
			return err
		}
		if answers["tcpw-v1"] == 0 || answers["tcpw-v2"] == 0 || answers["tcpw-v3"] != 0 || refused == 0 {
			return fmt.Errorf("weights 70/30/0 and a missing Service at 50: answers %v and %d refused, want both weighted pods and some refused", answers, refused)
		}
		t.Logf("weights 70/30/0 and a missing Service at 50 over 100 connections: %v, %d refused", answers, refused)
		return nil
	})
}
