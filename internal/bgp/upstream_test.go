package bgp

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/osrg/gobgp/v3/pkg/server"
)

func TestParseUpstreamFlags(t *testing.T) {
	p, err := ParseUpstreamPeerFlag("198.51.100.1,as=64500,port=1179,password-secret=ns/s")
	if err != nil || p.Address.String() != "198.51.100.1" || p.AS != 64500 || p.Port != 1179 || p.PasswordSecret.String() != "ns/s/password" {
		t.Fatalf("%+v %v", p, err)
	}
	if p, err := ParseUpstreamPeerFlag("2001:db8::1,as=64500"); err != nil || !p.Address.Is6() {
		t.Fatalf("IPv6 peer: %+v %v", p, err)
	}
	for _, bad := range []string{"198.51.100.1", "198.51.100.1,as=0", "x,as=1", "198.51.100.1,as=1,foo=2"} {
		if _, err := ParseUpstreamPeerFlag(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for in, want := range map[string]string{"203.0.113.10": "203.0.113.10/32", "203.0.113.10/32": "203.0.113.10/32", "2001:db8::10": "2001:db8::10/128"} {
		if got, err := ParseAnnounceAddress(in); err != nil || got.String() != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	if _, err := ParseAnnounceAddress("203.0.113.0/24"); err == nil {
		t.Error("a /24 accepted as an announce address")
	}
	if c, err := ParseCommunity("64500:100"); err != nil || c != 64500<<16|100 {
		t.Errorf("community: %d %v", c, err)
	}
	if _, err := ParseCommunity("70000:1"); err == nil {
		t.Error("community 70000:1 accepted")
	}
}

// fakeRouter is a GoBGP standing in for the upstream router: it listens,
// accepts the edge, and announces a route of its own towards it.
func fakeRouter(tb testing.TB, port int, edge string) *server.BgpServer {
	return fakeRouterOn(tb, "127.0.0.1", port, edge)
}

func fakeRouterOn(tb testing.TB, listen string, port int, edge string) *server.BgpServer {
	tb.Helper()
	srv := server.NewBgpServer(server.LoggerOption(newGoBGPLogger(testLog(tb).With("router", port))))
	go srv.Serve()
	ctx := context.Background()
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: 64500, RouterId: "127.0.0.1",
		ListenPort: int32(port), ListenAddresses: []string{listen}}}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.StopBgp(context.Background(), &api.StopBgpRequest{}) })
	family := ipv4Unicast
	if netip.MustParseAddr(edge).Is6() {
		family = ipv6Unicast
	}
	if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: edge, PeerAsn: 64601},
		Transport: &api.Transport{PassiveMode: true},
		AfiSafis:  []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: family, Enabled: true}}},
	}}); err != nil {
		tb.Fatal(err)
	}
	nlri := bgp.NewIPAddrPrefix(24, "198.51.100.0")
	p, err := apiutil.NewPath(nlri, false, []bgp.PathAttributeInterface{
		bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP), bgp.NewPathAttributeNextHop("127.0.0.1")}, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := srv.AddPath(ctx, &api.AddPathRequest{Path: p}); err != nil {
		tb.Fatal(err)
	}
	return srv
}

// routerLearned lists the prefixes the router learned from its peers, with
// their communities and MED.
func routerLearned(srv *server.BgpServer) []string {
	return routerLearnedFamily(srv, ipv4Unicast)
}

func routerLearnedFamily(srv *server.BgpServer, family *api.Family) []string {
	var out []string
	_ = srv.ListPath(context.Background(), &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: family},
		func(d *api.Destination) {
			for _, p := range d.Paths {
				if p.NeighborIp == "<nil>" || p.NeighborIp == "" {
					continue // its own
				}
				s := d.Prefix
				for _, a := range p.Pattrs {
					var c api.CommunitiesAttribute
					var m api.MultiExitDiscAttribute
					if a.UnmarshalTo(&c) == nil {
						for _, v := range c.Communities {
							s += " " + strings.Join([]string{itoa(v >> 16), itoa(v & 0xffff)}, ":")
						}
					} else if a.UnmarshalTo(&m) == nil {
						s += " med=" + itoa(m.Med)
					}
				}
				out = append(out, s)
			}
		})
	slices.Sort(out)
	return out
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// TestUpstreamAnnouncesOnlyTheAddresses: the router receives the announce
// address (with community and MED) while announced, nothing once withdrawn,
// and the edge imports nothing of what the router sends.
func TestUpstreamAnnouncesOnlyTheAddresses(t *testing.T) {
	port := freePort(t, "127.0.0.1")
	router := fakeRouter(t, port, "127.0.0.2")
	med := uint32(10)
	u, err := NewUpstream(UpstreamConfig{
		LocalAS: 64601, RouterID: netip.MustParseAddr("127.0.0.2"), LocalAddress: netip.MustParseAddr("127.0.0.2"),
		Peers:       []UpstreamPeer{{Address: netip.MustParseAddr("127.0.0.1"), AS: 64500, Port: uint16(port)}},
		Addresses:   []netip.Prefix{netip.MustParsePrefix("198.19.130.10/32")},
		Communities: []uint32{64601<<16 | 10}, MED: &med, HoldTime: 3 * time.Second,
	}, testLog(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	eventually(t, 20*time.Second, func() string {
		st := u.Status()
		if len(st.Peers) != 1 || st.Peers[0].State != "Established" {
			return "session not established: " + st.Peers[0].State
		}
		return ""
	})
	if got := routerLearned(router); len(got) != 0 {
		t.Fatalf("router received %v before the edge announced", got)
	}
	u.Set(true, "", "")
	want := []string{"198.19.130.10/32 med=10 64601:10"}
	eventually(t, 10*time.Second, func() string {
		if got := routerLearned(router); !slices.Equal(got, want) {
			return "router has " + strings.Join(got, ",")
		}
		return ""
	})
	// Nothing imported from the router.
	u.mu.Lock()
	srv := u.srv
	u.mu.Unlock()
	var learned []string
	_ = srv.ListPath(context.Background(), &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: ipv4Unicast},
		func(d *api.Destination) { learned = append(learned, d.Prefix) })
	if !slices.Equal(learned, []string{"198.19.130.10/32"}) {
		t.Fatalf("edge RIB %v: imported from the router", learned)
	}
	u.Set(false, ReasonHAProxyDown, "test")
	eventually(t, 10*time.Second, func() string {
		if got := routerLearned(router); len(got) != 0 {
			return "router still has " + strings.Join(got, ",")
		}
		return ""
	})
	if st := u.Status(); st.Announced || st.Reason != ReasonHAProxyDown || st.Transitions != 2 {
		t.Fatalf("status %+v", st)
	}
}

// TestUpstreamIPv6: an IPv6 announce address goes to an IPv6 peer, with the
// session's address as next hop; the IPv4 one does not.
func TestUpstreamIPv6(t *testing.T) {
	port := freePort(t, "::1")
	router := fakeRouterOn(t, "::1", port, "::1")
	u, err := NewUpstream(UpstreamConfig{
		LocalAS: 64601, RouterID: netip.MustParseAddr("127.0.0.2"), LocalAddress: netip.MustParseAddr("::1"),
		Peers:     []UpstreamPeer{{Address: netip.MustParseAddr("::1"), AS: 64500, Port: uint16(port)}},
		Addresses: []netip.Prefix{netip.MustParsePrefix("2001:db8::10/128"), netip.MustParsePrefix("198.19.130.10/32")},
		HoldTime:  3 * time.Second,
	}, testLog(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	u.Set(true, "", "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	eventually(t, 20*time.Second, func() string {
		if got := routerLearnedFamily(router, ipv6Unicast); !slices.Equal(got, []string{"2001:db8::10/128"}) {
			return "router has " + strings.Join(got, ",")
		}
		return ""
	})
	if got := routerLearnedFamily(router, ipv4Unicast); len(got) != 0 {
		t.Fatalf("IPv4 address sent over the IPv6 session: %v", got)
	}
}
