package routes

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vishvananda/netlink"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Addresses: this package's tests use links in 198.19.96.0/24 and pods in
// 198.18.64.0/18, always inside namespaces they create.

var nsCounter atomic.Int32

type testNS struct {
	name string
	h    *netlink.Handle
}

// newTestNS creates a network namespace with a veth link rt0
// (198.19.96.1/24) to a second namespace (rt1, 198.19.96.2/24), so
// 198.19.96.2 is an on-link gateway.
func newTestNS(tb testing.TB) *testNS {
	tb.Helper()
	testenv.RequireRoot(tb)
	name := fmt.Sprintf("routes-%d", nsCounter.Add(1))
	ns := testenv.NewNetns(tb, name)
	peer := testenv.NewNetns(tb, name+"-gw")
	testenv.Veth(tb, testenv.VethOptions{NS: ns, PeerNS: peer, Name: "rt0", PeerName: "rt1",
		Addr: "198.19.96.1/24", PeerAddr: "198.19.96.2/24"})
	h, err := ns.Netlink()
	if err != nil {
		tb.Fatal(err)
	}
	return &testNS{name: ns.Name, h: h}
}

func ip(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// kernelRoutes returns "dst via gw proto P" lines for the whole main table.
func (n *testNS) show(tb testing.TB, args ...string) string {
	tb.Helper()
	return ip(tb, append([]string{"-N", "-n", n.name, "route", "show"}, args...)...)
}

func (n *testNS) ours(tb testing.TB) map[string]string {
	tb.Helper()
	out := map[string]string{}
	rs, err := n.h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: DefaultProtocol},
		netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range rs {
		out[r.Dst.String()] = r.Gw.String()
	}
	return out
}

func quietLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newManager(tb testing.TB, n *testNS, reg prometheus.Registerer) *Manager {
	tb.Helper()
	m, err := New(Config{}, n.h, quietLog(), reg)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

func TestSetAndDelete(t *testing.T) {
	n := newTestNS(t)
	reg := prometheus.NewRegistry()
	m := newManager(t, n, reg)
	gw := addr("198.19.96.2")
	m.Set(pfx("198.18.64.0/26"), gw)
	m.Set(pfx("198.18.64.64/26"), gw)
	m.Set(pfx("198.18.64.130/32"), gw)

	got := n.ours(t)
	want := map[string]string{"198.18.64.0/26": "198.19.96.2", "198.18.64.64/26": "198.19.96.2", "198.18.64.130/32": "198.19.96.2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("routes with protocol 201 = %v, want %v", got, want)
	}
	if !strings.Contains(n.show(t, "proto", "201"), "198.18.64.0/26 via 198.19.96.2 dev rt0") {
		t.Fatalf("ip route show proto 201:\n%s", n.show(t, "proto", "201"))
	}
	if v := testutil.ToFloat64(m.m.installed); v != 3 {
		t.Fatalf("perimeter_routes_installed = %v, want 3", v)
	}

	// A next-hop change replaces the route in place.
	ip(t, "-n", n.name, "addr", "add", "198.19.97.1/24", "dev", "rt0")
	m.Set(pfx("198.18.64.0/26"), addr("198.19.97.2"))
	if got := n.ours(t)["198.18.64.0/26"]; got != "198.19.97.2" {
		t.Fatalf("after next-hop change gateway = %s, want 198.19.97.2", got)
	}

	m.Delete(pfx("198.18.64.64/26"))
	if _, ok := n.ours(t)["198.18.64.64/26"]; ok {
		t.Fatalf("withdrawn route still present:\n%s", n.show(t))
	}
	if v := testutil.ToFloat64(m.m.installed); v != 2 {
		t.Fatalf("perimeter_routes_installed = %v, want 2", v)
	}
}

func TestForeignRoutesAreNeverTouched(t *testing.T) {
	n := newTestNS(t)
	// The administrator's routes: one to a destination BGP will also
	// announce, one elsewhere, one from another daemon's protocol.
	ip(t, "-n", n.name, "route", "add", "198.18.65.0/26", "via", "198.19.96.3", "proto", "static")
	ip(t, "-n", n.name, "route", "add", "198.18.66.0/26", "via", "198.19.96.3", "proto", "static")
	ip(t, "-n", n.name, "route", "add", "198.18.67.0/26", "via", "198.19.96.3", "proto", "12")
	before := n.show(t, "proto", "static") + n.show(t, "proto", "12")

	m := newManager(t, n, nil)
	if _, err := m.Adopt(); err != nil {
		t.Fatal(err)
	}
	m.Set(pfx("198.18.65.0/26"), addr("198.19.96.2"))
	m.Set(pfx("198.18.64.0/26"), addr("198.19.96.2"))
	st := statusOf(m, "198.18.65.0/26")
	if st.State != StateConflict {
		t.Fatalf("route to a destination held by a static route: state %q, want conflict", st.State)
	}
	if err := m.Reconcile(); err != nil {
		t.Fatal(err)
	}
	m.Delete(pfx("198.18.65.0/26"))
	m.Sweep()
	if _, err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	after := n.show(t, "proto", "static") + n.show(t, "proto", "12")
	if before != after {
		t.Fatalf("foreign routes changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if len(n.ours(t)) != 0 {
		t.Fatalf("flush left routes: %v", n.ours(t))
	}
}

func TestNextHopResolution(t *testing.T) {
	n := newTestNS(t)
	// 203.0.113.0/24 sits behind the router 198.19.96.2.
	ip(t, "-n", n.name, "route", "add", "203.0.113.0/24", "via", "198.19.96.2")
	ip(t, "-n", n.name, "route", "add", "unreachable", "198.51.100.0/24")
	m := newManager(t, n, nil)

	m.Set(pfx("198.18.64.0/26"), addr("203.0.113.5"))
	if got := n.ours(t)["198.18.64.0/26"]; got != "198.19.96.2" {
		t.Fatalf("not-on-link next hop: kernel gateway %q, want 198.19.96.2 (resolved)\n%s", got, n.show(t))
	}
	if st := statusOf(m, "198.18.64.0/26"); st.State != StateInstalled || st.Gateway != addr("198.19.96.2") || st.NextHop != addr("203.0.113.5") {
		t.Fatalf("status %+v", st)
	}

	for _, tc := range []struct{ dst, nh, why string }{
		{"198.18.64.64/26", "198.51.100.9", "unreachable route"},
		{"198.18.64.128/26", "203.0.114.9", "no route at all"},
		{"198.18.64.192/26", "198.18.64.5", "only through our own route"},
		{"198.18.65.0/26", "198.19.96.1", "own address"},
	} {
		m.Set(pfx(tc.dst), addr(tc.nh))
		if st := statusOf(m, tc.dst); st.State != StateRefused || st.Error == "" {
			t.Errorf("%s via %s (%s): status %+v, want refused", tc.dst, tc.nh, tc.why, st)
		}
		if _, ok := n.ours(t)[tc.dst]; ok {
			t.Errorf("%s via %s (%s) installed", tc.dst, tc.nh, tc.why)
		}
	}

	// A next hop only the default route covers is refused: it would send
	// the pod's traffic out through the uplink.
	ip(t, "-n", n.name, "route", "add", "default", "via", "198.19.96.2")
	m.Set(pfx("198.18.65.64/26"), addr("203.0.114.9"))
	if err := m.Reconcile(); err != nil { // a full pass looks next hops up afresh
		t.Fatal(err)
	}
	if st := statusOf(m, "198.18.65.64/26"); st.State != StateRefused || !strings.Contains(st.Error, "default route") {
		t.Errorf("next hop behind the default route: status %+v, want refused", st)
	}
	if _, ok := n.ours(t)["198.18.65.64/26"]; ok {
		t.Errorf("route via a next hop behind the default route installed:\n%s", n.show(t))
	}

	// The router goes away: the resolved route must not outlive it.
	ip(t, "-n", n.name, "route", "del", "203.0.113.0/24")
	if err := m.Reconcile(); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(m, "198.18.64.0/26"); st.State != StateRefused {
		t.Fatalf("after the route to the next hop vanished: %+v", st)
	}
	if _, ok := n.ours(t)["198.18.64.0/26"]; ok {
		t.Fatalf("route through a vanished gateway kept:\n%s", n.show(t))
	}
}

func TestAdoptKeepsRoutesUntilSweep(t *testing.T) {
	n := newTestNS(t)
	ip(t, "-n", n.name, "route", "add", "198.18.64.0/26", "via", "198.19.96.2", "proto", "201")
	ip(t, "-n", n.name, "route", "add", "198.18.64.64/26", "via", "198.19.96.2", "proto", "201")

	m := newManager(t, n, nil)
	stale, err := m.Adopt()
	if err != nil || stale != 2 {
		t.Fatalf("Adopt = %d, %v; want 2 stale", stale, err)
	}
	// A periodic pass before the sweep keeps stale routes.
	if err := m.Reconcile(); err != nil {
		t.Fatal(err)
	}
	if len(n.ours(t)) != 2 {
		t.Fatalf("stale routes removed before the sweep: %v", n.ours(t))
	}
	m.Set(pfx("198.18.64.0/26"), addr("198.19.96.2"))
	if st := statusOf(m, "198.18.64.64/26"); st.State != StateStale {
		t.Fatalf("not re-announced route: %+v, want stale", st)
	}
	if got := m.Sweep(); got != 1 {
		t.Fatalf("Sweep deleted %d, want 1", got)
	}
	want := map[string]string{"198.18.64.0/26": "198.19.96.2"}
	if got := n.ours(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after sweep %v, want %v", got, want)
	}
}

func TestReconcileRepairs(t *testing.T) {
	n := newTestNS(t)
	m := newManager(t, n, nil)
	m.Set(pfx("198.18.64.0/26"), addr("198.19.96.2"))
	// Someone deletes our route, and an old one of ours lingers.
	ip(t, "-n", n.name, "route", "del", "198.18.64.0/26", "proto", "201")
	ip(t, "-n", n.name, "route", "add", "198.18.70.0/26", "via", "198.19.96.2", "proto", "201")
	if err := m.Reconcile(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"198.18.64.0/26": "198.19.96.2"}
	if got := n.ours(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after reconcile %v, want %v", got, want)
	}
}

func TestRunRetriesFailedWrites(t *testing.T) {
	n := newTestNS(t)
	m, err := New(Config{ResyncInterval: time.Hour}, n.h, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ip(t, "-n", n.name, "link", "set", "rt0", "down")
	// Down link: the kernel has no route to the next hop, so it is refused;
	// the loop must pick it up again once the link is back. The loop's
	// periodic pass is an hour away: only the retry with backoff can do it.
	m.Set(pfx("198.18.64.0/26"), addr("198.19.96.2"))
	if st := statusOf(m, "198.18.64.0/26"); st.State == StateInstalled {
		t.Fatalf("installed through a down link: %+v", st)
	}
	ip(t, "-n", n.name, "link", "set", "rt0", "up")
	ctx := t.Context()
	go func() { _ = m.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for statusOf(m, "198.18.64.0/26").State != StateInstalled {
		if time.Now().After(deadline) {
			t.Fatalf("route never installed after the link came back: %+v", statusOf(m, "198.18.64.0/26"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestOtherTable(t *testing.T) {
	n := newTestNS(t)
	m, err := New(Config{Table: 4242}, n.h, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Set(pfx("198.18.64.0/26"), addr("198.19.96.2"))
	if out := n.show(t, "table", "4242"); !strings.Contains(out, "198.18.64.0/26 via 198.19.96.2 dev rt0 proto 201") {
		t.Fatalf("table 4242:\n%s", out)
	}
	if len(n.ours(t)) != 0 {
		t.Fatalf("route leaked into main: %v", n.ours(t))
	}
	if c, err := Flush(n.h, 4242, DefaultProtocol); err != nil || c != 1 {
		t.Fatalf("Flush = %d, %v", c, err)
	}
	if out := n.show(t, "table", "4242"); strings.TrimSpace(out) != "" {
		t.Fatalf("table 4242 after flush:\n%s", out)
	}
}

func TestConfigChecks(t *testing.T) {
	for _, p := range []int{1, 2, 4, 256} {
		if _, err := New(Config{Protocol: p}, &netlink.Handle{}, nil, nil); err == nil {
			t.Errorf("protocol %d accepted", p)
		}
	}
	if _, err := Flush(&netlink.Handle{}, 0, 4); err == nil {
		t.Error("Flush of static routes accepted")
	}
}

func statusOf(m *Manager, dst string) Status {
	for _, s := range m.Routes() {
		if s.Dst == pfx(dst) {
			return s
		}
	}
	return Status{}
}

// IPv6 routes (from Calico's bird6 sessions) beside IPv4 ones: the kernel
// stores an IPv6 route written with metric 0 at 1024; a restarted manager
// must still recognise it as its own (adopt, sweep, flush), or it would
// duplicate or leak it.
func TestIPv6Routes(t *testing.T) {
	n := newTestNS(t)
	testenv.GuardRoutes(t)
	ip(t, "-n", n.name, "-6", "addr", "add", "2001:db8:18:96::1/64", "dev", "rt0", "nodad")
	ip(t, "-n", n.name, "-6", "route", "add", "2001:db8:18:1::/64", "via", "2001:db8:18:96::3", "proto", "static")
	reg := prometheus.NewRegistry()
	m := newManager(t, n, reg)
	gw6 := addr("2001:db8:18:96::2")
	m.Set(pfx("2001:db8:18::/122"), gw6)
	m.Set(pfx("2001:db8:18::45/128"), gw6)
	m.Set(pfx("198.18.64.0/26"), addr("198.19.96.2"))
	m.Set(pfx("2001:db8:18::80/122"), addr("fe80::1"))        // link-local: refused
	m.Set(pfx("2001:db8:18::c0/122"), addr("2001:db8:77::1")) // no route to it: refused
	m.Set(pfx("2001:db8:18:1::/64"), gw6)                     // held by the administrator's route

	ours := func() map[string]string {
		out := map[string]string{}
		rs, err := n.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: DefaultProtocol}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			out[r.Dst.String()] = r.Gw.String()
		}
		return out
	}
	want := map[string]string{"2001:db8:18::/122": "2001:db8:18:96::2", "2001:db8:18::45/128": "2001:db8:18:96::2",
		"198.18.64.0/26": "198.19.96.2"}
	if got := ours(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("routes with protocol 201 = %v, want %v\n%s", got, want, n.show(t, "-6"))
	}
	if out := ip(t, "-n", n.name, "-6", "route", "show", "proto", "201"); !strings.Contains(out, "2001:db8:18::/122 via 2001:db8:18:96::2 dev rt0") {
		t.Fatalf("ip -6 route show proto 201:\n%s", out)
	}
	states := map[string]State{}
	for _, s := range m.Routes() {
		states[s.Dst.String()] = s.State
	}
	if states["2001:db8:18::80/122"] != StateRefused || states["2001:db8:18::c0/122"] != StateRefused ||
		states["2001:db8:18:1::/64"] != StateConflict {
		t.Fatalf("states %v", states)
	}
	if v := testutil.ToFloat64(m.m.installedFamily.WithLabelValues("ipv6")); v != 2 {
		t.Fatalf("perimeter_routes_installed_by_family{family=ipv6} = %v, want 2", v)
	}
	// A full reconcile leaves them as they are (no re-add, no duplicate).
	if err := m.Reconcile(); err != nil {
		t.Fatal(err)
	}
	if out := ip(t, "-n", n.name, "-6", "route", "show", "proto", "201"); strings.Count(out, "2001:db8:18::/122") != 1 {
		t.Fatalf("after reconcile:\n%s", out)
	}

	// A new manager adopts them as stale and sweeps what is not
	// re-announced.
	m2, err := New(Config{}, n.h, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := m2.Adopt(); err != nil || k != 3 {
		t.Fatalf("adopted %d routes (%v), want 3", k, err)
	}
	m2.Set(pfx("2001:db8:18::/122"), gw6)
	if k := m2.Sweep(); k != 2 {
		t.Fatalf("swept %d, want 2", k)
	}
	want = map[string]string{"2001:db8:18::/122": "2001:db8:18:96::2"}
	if got := ours(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after sweep = %v, want %v", got, want)
	}
	if k, err := m2.Flush(); err != nil || k != 1 {
		t.Fatalf("flushed %d (%v), want 1", k, err)
	}
	if got := ours(); len(got) != 0 {
		t.Fatalf("after flush: %v", got)
	}
	if out := ip(t, "-n", n.name, "-6", "route", "show", "2001:db8:18:1::/64"); !strings.Contains(out, "proto static") {
		t.Fatalf("the administrator's route is gone: %q", out)
	}
}
