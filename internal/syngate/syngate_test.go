package syngate_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/perimeter-ingress/perimeter/internal/syngate"
	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

var (
	announce4 = netip.MustParseAddr("203.0.113.10")
	announce6 = netip.MustParseAddr("2001:db8:10::10")
	server6   = netip.MustParseAddr("2001:db8:1::a")
	client6   = netip.MustParseAddr("2001:db8:1::b")
)

// gateLab is an edge namespace (announce addresses on lo, an echo server on
// every address) and a client namespace routed to it over a veth.
type gateLab struct {
	edge, client *testenv.Netns
	link         *testenv.VethPair
}

func newGateLab(t *testing.T) *gateLab {
	l := &gateLab{edge: testenv.NewNetns(t, "gate-edge"), client: testenv.NewNetns(t, "gate-client")}
	l.link = testenv.Veth(t, testenv.VethOptions{NS: l.edge, PeerNS: l.client, Addr: "198.51.100.0/31", PeerAddr: "198.51.100.1/31"})
	eh, err := l.edge.Netlink()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := l.client.Netlink()
	if err != nil {
		t.Fatal(err)
	}
	addr := func(h *netlink.Handle, link string, a netip.Addr, bits int) {
		t.Helper()
		ln, err := h.LinkByName(link)
		if err != nil {
			t.Fatal(err)
		}
		na := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}, Flags: unix.IFA_F_NODAD}
		if err := h.AddrAdd(ln, na); err != nil {
			t.Fatal(err)
		}
	}
	addr(eh, "lo", announce4, 32)
	addr(eh, "lo", announce6, 128)
	addr(eh, l.link.Name, server6, 64)
	addr(ch, l.link.PeerName, client6, 64)
	cl, err := ch.LinkByName(l.link.PeerName)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []netlink.Route{
		{LinkIndex: cl.Attrs().Index, Dst: &net.IPNet{IP: announce4.AsSlice(), Mask: net.CIDRMask(32, 32)}, Gw: net.IP(l.link.Addr.Addr().AsSlice())},
		{LinkIndex: cl.Attrs().Index, Dst: &net.IPNet{IP: announce6.AsSlice(), Mask: net.CIDRMask(128, 128)}, Gw: net.IP(server6.AsSlice())},
	} {
		if err := ch.RouteAdd(&r); err != nil {
			t.Fatal(err)
		}
	}
	var ln net.Listener
	if err := l.edge.Do(func() error {
		ln, err = net.Listen("tcp", ":80")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := fmt.Fprintln(c, sc.Text()); err != nil {
						return
					}
				}
			}()
		}
	}()
	// The gate must not touch the interfaces of another namespace.
	t.Cleanup(func() {
		_ = l.edge.Do(func() error { _, err := syngate.Open(); return err })
	})
	return l
}

func (l *gateLab) dial(to netip.Addr, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := l.client.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", netip.AddrPortFrom(to, 80).String(), timeout)
		return err
	})
	return c, err
}

func echo(c net.Conn, s string) error {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintln(c, s); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != s+"\n" {
		return fmt.Errorf("echo %q, want %q", got, s)
	}
	return nil
}

// TestGate: with the gate closed a SYN to an announce address (IPv4 and
// IPv6) is dropped, not answered or reset; established connections keep
// working; the edge's other addresses are not gated; the kernel lists the
// connections in progress; opening the gate removes the filter and lets
// the client's retransmitted SYN in.
func TestGate(t *testing.T) {
	l := newGateLab(t)
	var before []net.Conn
	for _, a := range []netip.Addr{announce4, announce6} {
		c, err := l.dial(a, 2*time.Second)
		if err != nil {
			t.Fatalf("before the gate: %v", err)
		}
		defer c.Close()
		before = append(before, c)
	}

	// The qdisc goes in at start; a second start (a hand-over) adds none.
	for i, want := range [][]string{{l.link.Name}, nil} {
		var added []string
		if err := l.edge.Do(func() (err error) {
			added, err = syngate.Prepare()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(added, want) {
			t.Fatalf("start %d added clsact to %v, want %v", i, added, want)
		}
	}
	var links []string
	if err := l.edge.Do(func() (err error) {
		links, err = syngate.Close([]netip.Addr{announce4, announce6})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(links, []string{l.link.Name}) {
		t.Fatalf("gated %v, want only %s (not lo)", links, l.link.Name)
	}
	if closed := closedLinks(t, l.edge); !slices.Equal(closed, links) {
		t.Fatalf("the gate reads closed on %v, want %v", closed, links)
	}

	for _, a := range []netip.Addr{announce4, announce6} {
		start := time.Now()
		c, err := l.dial(a, 500*time.Millisecond)
		if err == nil {
			c.Close()
			t.Fatalf("connected to %s through the closed gate", a)
		}
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			t.Fatalf("connect to %s: %v, want a timeout (SYN dropped, not refused)", a, err)
		}
		t.Logf("connect to %s with the gate closed: %v after %s", a, err, time.Since(start).Round(time.Millisecond))
	}
	for i, c := range before {
		if err := echo(c, fmt.Sprintf("established %d", i)); err != nil {
			t.Fatalf("established connection through the closed gate: %v", err)
		}
	}
	for _, a := range []netip.Addr{l.link.Addr.Addr(), server6} {
		c, err := l.dial(a, 2*time.Second)
		if err != nil {
			t.Fatalf("%s is not an announce address and must not be gated: %v", a, err)
		}
		err = echo(c, "other")
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}

	// The kernel lists both established connections, from the client.
	var conns []syngate.Conn
	if err := l.edge.Do(func() (err error) {
		conns, err = syngate.Connections([]netip.Addr{announce4, announce6})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	est := 0
	for _, c := range conns {
		if c.State == "established" && (c.Remote.Addr() == l.link.PeerAddr.Addr() || c.Remote.Addr() == client6) {
			est++
		}
	}
	if est != 2 {
		t.Fatalf("connections in progress: %v, want the 2 established ones", conns)
	}

	// A connect in progress while the gate is closed: its SYN is
	// retransmitted, and goes through once the gate opens.
	done := make(chan error, 1)
	go func() {
		c, err := l.dial(announce4, 10*time.Second)
		if err == nil {
			err = echo(c, "after")
			c.Close()
		}
		done <- err
	}()
	testenv.Eventually(t, 5*time.Second, func() error {
		var socks []*netlink.Socket
		if err := l.client.Do(func() (err error) {
			socks, err = netlink.SocketDiagTCP(unix.AF_INET)
			return err
		}); err != nil {
			return err
		}
		for _, s := range socks {
			if s.State == unix.BPF_TCP_SYN_SENT && s.ID.Destination.Equal(announce4.AsSlice()) && s.Retrans > 0 {
				return nil
			}
		}
		return errors.New("no retransmitted SYN yet")
	})
	var opened []string
	if err := l.edge.Do(func() (err error) {
		opened, err = syngate.Open()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(opened, []string{l.link.Name}) {
		t.Fatalf("opened %v, want %s", opened, l.link.Name)
	}
	if err := <-done; err != nil {
		t.Fatalf("the retransmitted SYN after the gate opened: %v", err)
	}
	eh, _ := l.edge.Netlink()
	link, err := eh.LinkByName(l.link.Name)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := eh.FilterList(link, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 0 || len(closedLinks(t, l.edge)) != 0 {
		t.Fatalf("filters left after the gate opened: %v", fs)
	}
	for _, a := range []netip.Addr{announce4, announce6} {
		c, err := l.dial(a, 2*time.Second)
		if err != nil {
			t.Fatalf("after the gate opened: %v", err)
		}
		c.Close()
	}
}

func closedLinks(t *testing.T, ns *testenv.Netns) []string {
	t.Helper()
	var closed []string
	if err := ns.Do(func() (err error) {
		closed, err = syngate.Closed()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return closed
}
