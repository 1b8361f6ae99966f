package e2e

import (
	"context"
	"fmt"
	"k8s.io/client-go/util/retry"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Status tests use pods in 198.18.50.0/24.

// ingressStatus is the published addresses of an Ingress, joined, and its
// resourceVersion.
func (e *env) ingressStatus(name string) (string, string) {
	e.t.Helper()
	ing, err := e.c.Admin.NetworkingV1().Ingresses(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var addrs []string
	for _, lb := range ing.Status.LoadBalancer.Ingress {
		addrs = append(addrs, lb.IP+lb.Hostname)
	}
	return strings.Join(addrs, ","), ing.ResourceVersion
}

// leaseHolder is the pid part of the Lease holder ("host_pid").
func (e *env) leaseHolder(name string) int {
	e.t.Helper()
	l, err := e.c.Admin.CoordinationV1().Leases(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return 0
	}
	_, pid, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	n, _ := strconv.Atoi(pid)
	return n
}

func (e *env) expectStatus(name, want string, within time.Duration) time.Duration {
	e.t.Helper()
	start := time.Now()
	testenv.Eventually(e.t, within, func() error {
		if got, _ := e.ingressStatus(name); got != want {
			return fmt.Errorf("Ingress %s status %q, want %q", name, got, want)
		}
		return nil
	})
	return time.Since(start)
}

// TestIngressStatus: two daemons serve one cluster; exactly one (the Lease
// holder) writes status, the other takes over when it stops; status is
// cleared on class change and, with --update-status-on-shutdown, on stop.
func TestIngressStatus(t *testing.T) {
	e := newEnv(t)
	pods := e.pods("st", 50, 1)
	e.service("web", nil, pods[0])
	e.ingress("site", nil, rule{host: "status.test", path: "/", service: "web"})
	lease := "perimeter-status"
	flags := []string{"--election-id=" + lease, "--election-namespace=" + e.ns, "--update-status-on-shutdown", "--disable-https"}
	a := e.startDaemon(append(flags, "--publish-address=203.0.113.10")...)
	b := e.startDaemon(append(flags, "--publish-address=203.0.113.11", "--publish-address=status.example.net")...)
	addr := map[*daemon]string{a: "203.0.113.10", b: "203.0.113.11,status.example.net"}

	// Both serve traffic, leader or not.
	a.expect("status.test", "/", 200, "st-0")
	b.expect("status.test", "/", 200, "st-0")

	var leader, follower *daemon
	testenv.Eventually(t, 30*time.Second, func() error {
		switch e.leaseHolder(lease) {
		case a.cmd.Process.Pid:
			leader, follower = a, b
		case b.cmd.Process.Pid:
			leader, follower = b, a
		default:
			return fmt.Errorf("no daemon holds Lease %s", lease)
		}
		return nil
	})
	e.expectStatus("site", addr[leader], 15*time.Second)
	if leader.metric(t, "perimeter_status_leader") != 1 || follower.metric(t, "perimeter_status_leader") != 0 {
		t.Fatal("perimeter_status_leader: want 1 on the Lease holder, 0 on the other")
	}
	// Idempotent: nothing changes, nothing is written, though both
	// daemons keep syncing (an endpoint change makes them sync now).
	_, rv := e.ingressStatus("site")
	e.service("other", nil, pods[0])
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		got, nrv := e.ingressStatus("site")
		if got != addr[leader] || nrv != rv {
			t.Fatalf("status changed to %q (resourceVersion %s -> %s) with nothing to change", got, rv, nrv)
		}
		time.Sleep(100 * time.Millisecond) // observation interval, not synchronisation
	}

	// The leader stops: it clears status (--update-status-on-shutdown) and
	// releases the Lease; the other takes over and writes its address.
	start := time.Now()
	leader.stop()
	e.expectStatus("site", addr[follower], 30*time.Second)
	t.Logf("status taken over %v after the leader was stopped", time.Since(start).Round(time.Millisecond))
	if e.leaseHolder(lease) != follower.cmd.Process.Pid {
		t.Fatal("the remaining daemon does not hold the Lease")
	}

	// A new Ingress gets status; a class change makes it not ours: cleared.
	e.ingress("second", nil, rule{host: "second.test", path: "/", service: "web"})
	e.expectStatus("second", addr[follower], 15*time.Second)
	ctx := context.Background()
	other := "not-ours"
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ing, err := e.c.Admin.NetworkingV1().Ingresses(e.ns).Get(ctx, "second", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ing.Spec.IngressClassName = &other
		_, err = e.c.Admin.NetworkingV1().Ingresses(e.ns).Update(ctx, ing, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e.expectStatus("second", "", 15*time.Second)

	// The last daemon stops: status cleared.
	follower.stop()
	if got, _ := e.ingressStatus("site"); got != "" {
		t.Fatalf("after --update-status-on-shutdown, status %q, want empty", got)
	}
}

// TestIngressStatusRestartWritesNothing: a daemon that starts where every
// served Ingress already carries the right status writes none of them
// (it used to clear them all before its first configuration, then write
// them again), and says so in its first status pass.
func TestIngressStatusRestartWritesNothing(t *testing.T) {
	e := newEnv(t)
	pods := e.pods("str", 50, 1)
	e.service("web", nil, pods[0])
	for i := range 3 {
		e.ingress(fmt.Sprintf("site%d", i), nil, rule{host: fmt.Sprintf("restart%d.test", i), path: "/", service: "web"})
	}
	flags := []string{"--election-namespace=" + e.ns, "--disable-https", "--publish-address=203.0.113.20"}
	d := e.startDaemon(flags...)
	before := map[string]string{}
	for i := range 3 {
		name := fmt.Sprintf("site%d", i)
		e.expectStatus(name, "203.0.113.20", 30*time.Second)
		_, before[name] = e.ingressStatus(name)
	}
	d.stop()

	d = e.startDaemon(flags...)
	d.expect("restart0.test", "/", 200, "str-0")
	if written := d.statusPass(t, 3, 30*time.Second); written != 0 {
		t.Errorf("first status pass after restart wrote %d Ingresses, want 0", written)
	}
	for name, rv := range before {
		if _, now := e.ingressStatus(name); now != rv {
			t.Errorf("Ingress %s was written (resourceVersion %s -> %s) though its status was right", name, rv, now)
		}
	}
}
