package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/bgp"
	"github.com/perimeter-ingress/perimeter/internal/config"
	"github.com/perimeter-ingress/perimeter/internal/syngate"
)

type fakeHAProxy struct{ running, adopted bool }

func (f *fakeHAProxy) Running() bool            { return f.running }
func (f *fakeHAProxy) Adopted() bool            { return f.adopted }
func (f *fakeHAProxy) Changed() <-chan struct{} { return nil }

// TestGate: each condition of ha.md's table withdraws with its reason, and
// the address is announced only when all hold.
func TestGate(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	up, err := bgp.NewUpstream(bgp.UpstreamConfig{LocalAS: 64601, RouterID: netip.MustParseAddr("127.0.0.1"),
		Addresses: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHAProxy{running: true}
	var ready atomic.Bool
	stalled := false
	c := &config.Config{HTTPBindPort: port}
	g := newGate(up, h, &ready, func() bool { return !stalled }, c, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	expect := func(want string) {
		t.Helper()
		g.update()
		st := up.Status()
		if want == "serving" {
			if !st.Announced {
				t.Fatalf("withdrawn (%s: %s), want announced", st.Reason, st.Detail)
			}
			return
		}
		if st.Announced || st.Reason != want {
			t.Fatalf("announced %v reason %q (%s), want withdrawn for %q", st.Announced, st.Reason, st.Detail, want)
		}
	}
	expect(bgp.ReasonNotReady)
	h.adopted = true // a HAProxy handed over serves before the first sync
	expect("serving")
	h.adopted = false
	ready.Store(true)
	expect("serving")
	h.running = false
	expect(bgp.ReasonHAProxyDown)
	h.running = true
	stalled = true
	expect(bgp.ReasonSyncStalled)
	stalled = false
	ln.Close()
	expect(bgp.ReasonBindsSilent)
	ln, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	expect("serving")
	// The drain: the SYN gate closes, HAProxy winds its connections down,
	// and the addresses are withdrawn once none is left.
	var order []string
	open := 2
	g.closeSYN = func(a []netip.Addr) ([]string, error) {
		order = append(order, "gate "+a[0].String())
		return []string{"eth0"}, nil
	}
	g.connections = func([]netip.Addr) ([]syngate.Conn, error) {
		if up.Status().Announced {
			order = append(order, fmt.Sprintf("announced with %d connections", open))
		}
		if open > 0 {
			open--
			return []syngate.Conn{{State: "established"}}, nil
		}
		return nil, nil
	}
	d := &fakeDrainer{}
	g.drain(time.Second, d, discardLog())
	if d.calls != 1 || open != 0 || !slices.Equal(order, []string{"gate 127.0.0.1", "announced with 2 connections", "announced with 1 connections", "announced with 0 connections"}) {
		t.Fatalf("drain: %d HAProxy drains, %d connections left, steps %q", d.calls, open, order)
	}
	expect(bgp.ReasonDraining)
	if st := up.Status(); st.Transitions != 4 || time.Since(st.Since) > time.Minute {
		t.Fatalf("status %+v", st)
	}
}

func TestUpstreamConfigFlags(t *testing.T) {
	c := &config.Config{}
	c.BGP.LocalAS = 64601
	c.BGP.RouterID = "198.51.100.11"
	c.BGP.UpstreamPeers = []string{"198.51.100.1,as=64500"}
	c.BGP.AnnounceAddresses = []string{"203.0.113.10", "2001:db8::10/128"}
	c.BGP.UpstreamCommunities = []string{"64601:10"}
	c.BGP.UpstreamMED = "20"
	cfg, err := UpstreamConfig(c)
	if err != nil || len(cfg.Peers) != 1 || len(cfg.Addresses) != 2 || *cfg.MED != 20 || cfg.Communities[0] != 64601<<16|10 || cfg.RestartTime != -1 {
		t.Fatalf("%+v %v", cfg, err)
	}
	c.BGP.AnnounceAddresses = nil
	if _, err := UpstreamConfig(c); err == nil {
		t.Fatal("upstream peers without an announce address accepted")
	}
	c.BGP.AnnounceAddresses = []string{"203.0.113.0/24"}
	if _, err := UpstreamConfig(c); err == nil {
		t.Fatal("a /24 accepted as an announce address")
	}
}

type fakeDrainer struct{ calls int }

func (f *fakeDrainer) Drain(context.Context) error { f.calls++; return nil }

// TestDrainWithoutGate: when the SYN gate cannot be closed, the addresses
// are withdrawn at once, as without one.
func TestDrainWithoutGate(t *testing.T) {
	up, err := bgp.NewUpstream(bgp.UpstreamConfig{LocalAS: 64601, RouterID: netip.MustParseAddr("127.0.0.1"),
		Addresses: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(up, &fakeHAProxy{running: true}, &atomic.Bool{}, func() bool { return true }, &config.Config{}, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	g.closeSYN = func([]netip.Addr) ([]string, error) { return nil, errors.New("no clsact") }
	g.connections = func([]netip.Addr) ([]syngate.Conn, error) {
		t.Fatal("connections waited for without a gate")
		return nil, nil
	}
	d := &fakeDrainer{}
	g.drain(time.Millisecond, d, discardLog())
	if st := up.Status(); st.Announced || st.Reason != bgp.ReasonDraining || d.calls != 0 {
		t.Fatalf("status %+v, %d HAProxy drains", st, d.calls)
	}
	// --shutdown-drain=0: no gate, no wait.
	g.closeSYN = func([]netip.Addr) ([]string, error) {
		t.Fatal("the SYN gate closed with --shutdown-drain=0")
		return nil, nil
	}
	g.drain(0, d, discardLog())
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
