package kube

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/model"
	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

func externalNameService(ns, name, host string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: host},
	}
}

// TestNameResolver runs the resolver against a DNS server on loopback: the
// first answer, a changed answer and a name that stops existing each mark
// exactly the Services naming it as changed, and snapshots carry the
// answers of the names still wanted only.
func TestNameResolver(t *testing.T) {
	dns := testenv.StartDNS(t)
	dns.Set("db.example", "203.0.113.7", "2001:db8::7")
	dns.Set("other.example", "203.0.113.9")

	var mu sync.Mutex
	changed := map[model.ServiceKey]int{}
	n := newNameResolver(dns.Addr, 50*time.Millisecond, func(ks []model.ServiceKey) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range ks {
			changed[k]++
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svcs := []*corev1.Service{
		externalNameService("a", "db", "DB.example."),
		externalNameService("b", "db", "db.example"),
		externalNameService("a", "other", "other.example"),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "web"}},
	}
	if got := n.want(svcs); len(got) != 0 {
		t.Fatalf("answers before start: %v", got)
	}
	n.start(ctx)
	wait := func(name string, want model.ResolvedName) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, func() error {
			got := n.want(svcs)[name]
			if got.Err != want.Err || !slices.Equal(got.Addrs, want.Addrs) {
				return fmt.Errorf("%s: %+v, want %+v", name, got, want)
			}
			return nil
		})
	}
	ip := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	wait("db.example", model.ResolvedName{Addrs: ip("203.0.113.7", "2001:db8::7")})
	wait("other.example", model.ResolvedName{Addrs: ip("203.0.113.9")})

	dns.Set("db.example", "203.0.113.8")
	wait("db.example", model.ResolvedName{Addrs: ip("203.0.113.8")})
	dns.Set("db.example")
	wait("db.example", model.ResolvedName{Err: "no such host"})

	mu.Lock()
	got := map[model.ServiceKey]int{}
	for k, v := range changed {
		got[k] = v
	}
	mu.Unlock()
	// Three answers for db.example (first, changed, gone) and one for
	// other.example: unchanged answers every 50ms mark nothing.
	want := map[model.ServiceKey]int{{Namespace: "a", Name: "db"}: 3, {Namespace: "b", Name: "db"}: 3, {Namespace: "a", Name: "other"}: 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("changed %v, want %v", got, want)
	}

	// A name no Service names any more is dropped.
	if got := n.want(svcs[2:]); len(got) != 1 || len(got["other.example"].Addrs) != 1 {
		t.Errorf("answers after db Services went: %v", got)
	}
	n.mu.Lock()
	_, still := n.names["db.example"]
	n.mu.Unlock()
	if still {
		t.Error("db.example is still looked up")
	}
}

// TestNameResolverTTL: the answer's TTL, read from the DNS response,
// brings the next lookup forward within [5s or the interval, interval].
func TestNameResolverTTL(t *testing.T) {
	dns := testenv.StartDNS(t)
	dns.Set("db.example", "203.0.113.7")
	n := newNameResolver(dns.Addr, time.Minute, func([]model.ServiceKey) {})
	e := &resolvedName{}
	n.names["db.example"] = e
	if ttl := n.lookup(context.Background(), "db.example", e); ttl != time.Second {
		t.Errorf("TTL %v, want the server's 1s", ttl)
	}
	if !e.have || len(e.result.Addrs) != 1 {
		t.Errorf("answer %+v", e.result)
	}
	lit := &resolvedName{}
	if ttl := n.lookup(context.Background(), "127.0.0.1", lit); ttl >= 0 || fmt.Sprint(lit.result.Addrs) != "[127.0.0.1]" {
		t.Errorf("an address as ExternalName: TTL %v, answer %+v; want itself, TTL unknown", ttl, lit.result)
	}
	if ttl := n.lookup(context.Background(), "gone.example", &resolvedName{}); ttl >= 0 {
		t.Errorf("TTL of a failed lookup %v, want unknown", ttl)
	}
	for _, c := range []struct{ interval, ttl, want time.Duration }{
		{time.Minute, -1, time.Minute},
		{time.Minute, 0, 5 * time.Second},
		{time.Minute, time.Second, 5 * time.Second},
		{time.Minute, 20 * time.Second, 20 * time.Second},
		{time.Minute, time.Hour, time.Minute},
		{200 * time.Millisecond, time.Second, 200 * time.Millisecond},
		{200 * time.Millisecond, 0, 200 * time.Millisecond},
	} {
		n := newNameResolver("", c.interval, nil)
		if got := n.next(c.ttl); got != c.want {
			t.Errorf("interval %v, TTL %v: next lookup in %v, want %v", c.interval, c.ttl, got, c.want)
		}
	}
}
