package app

// High availability across edge hosts (docs/ha.md): every edge announces
// the ingress addresses to the upstream routers while it can serve, and the
// routers spread flows over the edges that announce (ECMP).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/perimeter-ingress/perimeter/internal/bgp"
	"github.com/perimeter-ingress/perimeter/internal/config"
	"github.com/perimeter-ingress/perimeter/internal/haproxy"
	"github.com/perimeter-ingress/perimeter/internal/syngate"
)

// AnnounceAddresses parses --announce-address.
func AnnounceAddresses(c *config.Config) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range c.BGP.AnnounceAddresses {
		p, err := bgp.ParseAnnounceAddress(s)
		if err != nil {
			return nil, fmt.Errorf("--announce-address: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// UpstreamConfig turns the flags into the upstream speaker's configuration
// (without Password and Restarting, which the daemon fills in).
func UpstreamConfig(c *config.Config) (bgp.UpstreamConfig, error) {
	b := c.BGP
	cfg := bgp.UpstreamConfig{LocalAS: b.LocalAS, HoldTime: b.UpstreamHoldTime, RestartTime: b.UpstreamRestartTime}
	if b.UpstreamRestartTime == 0 {
		cfg.RestartTime = -1
	}
	var err error
	if cfg.Addresses, err = AnnounceAddresses(c); err != nil {
		return cfg, err
	}
	if b.RouterID != "" {
		if cfg.RouterID, err = netip.ParseAddr(b.RouterID); err != nil {
			return cfg, fmt.Errorf("--bgp-router-id: %w", err)
		}
	}
	if b.ListenAddress != "" {
		if cfg.LocalAddress, err = netip.ParseAddr(b.ListenAddress); err != nil {
			return cfg, fmt.Errorf("--bgp-listen-address: %w", err)
		}
		if !cfg.RouterID.IsValid() && cfg.LocalAddress.Is4() {
			cfg.RouterID = cfg.LocalAddress
		}
	}
	for _, s := range b.UpstreamPeers {
		p, err := bgp.ParseUpstreamPeerFlag(s)
		if err != nil {
			return cfg, fmt.Errorf("--bgp-upstream-peer: %w", err)
		}
		cfg.Peers = append(cfg.Peers, p)
	}
	for _, s := range b.UpstreamCommunities {
		v, err := bgp.ParseCommunity(s)
		if err != nil {
			return cfg, fmt.Errorf("--bgp-upstream-community: %w", err)
		}
		cfg.Communities = append(cfg.Communities, v)
	}
	if b.UpstreamMED != "" {
		v, err := strconv.ParseUint(b.UpstreamMED, 10, 32)
		if err != nil {
			return cfg, fmt.Errorf("--bgp-upstream-med %q: %w", b.UpstreamMED, err)
		}
		m := uint32(v)
		cfg.MED = &m
	}
	if len(cfg.Peers) > 0 && b.LocalAS == 0 {
		return cfg, errors.New("--bgp-upstream-peer needs --bgp-local-as")
	}
	if len(cfg.Peers) > 0 && len(cfg.Addresses) == 0 {
		return cfg, errors.New("--bgp-upstream-peer needs at least one --announce-address")
	}
	return cfg, nil
}

// secretPassword reads a password secret once per call.
func secretPassword(cs kubernetes.Interface) func(context.Context, bgp.SecretRef) (string, error) {
	return func(ctx context.Context, ref bgp.SecretRef) (string, error) {
		s, err := cs.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			return "", fmt.Errorf("no key %q", ref.Key)
		}
		return string(v), nil
	}
}

// loLabel marks the IPv4 announce addresses we put on lo, so that a stop
// removes those and leaves any an operator configured.
const loLabel = "lo:perimeter"

// addLoopback puts the announce addresses on lo. On lo, not through
// ip_nonlocal_bind: the kernel must also take packets to the address as
// local, which only a local address (a local route) does; HAProxy then binds
// it like any other address. lo does not answer ARP on other links in a
// routed setup, and the routers reach it through the announced route.
func addLoopback(addrs []netip.Prefix, log *slog.Logger) error {
	h, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	for _, a := range addrs {
		na := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}}
		if a.Addr().Is4() {
			na.Label = loLabel
		} else {
			na.Flags = 0x80 // IFA_F_PERMANENT
		}
		if err := h.AddrReplace(lo, na); err != nil {
			return fmt.Errorf("add %s to lo: %w", a, err)
		}
		log.Info("announce address on lo", "address", a)
	}
	return nil
}

// removeLoopback removes the announce addresses we put on lo.
func removeLoopback(addrs []netip.Prefix, log *slog.Logger) {
	h, err := netlink.NewHandle()
	if err != nil {
		return
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return
	}
	have, err := h.AddrList(lo, netlink.FAMILY_ALL)
	if err != nil {
		return
	}
	for _, a := range addrs {
		for _, x := range have {
			p, ok := netip.AddrFromSlice(x.IP)
			if !ok || p.Unmap() != a.Addr() {
				continue
			}
			if a.Addr().Is4() && x.Label != loLabel {
				continue
			}
			if err := h.AddrDel(lo, &x); err != nil {
				log.Warn("remove announce address from lo", "address", a, "err", err)
			} else {
				log.Info("announce address removed from lo", "address", a)
			}
		}
	}
}

// haproxyState is what the gate reads of the driver.
type haproxyState interface {
	Running() bool
	Adopted() bool
	Changed() <-chan struct{}
}

var _ haproxyState = (*haproxy.Driver)(nil)

// gate decides whether this edge may announce: caches synced and the first
// configuration served (or a HAProxy handed over that serves the previous
// one), HAProxy running, its binds answering, the sync loop not stuck, and
// no stop in progress.
type gate struct {
	up       *bgp.Upstream
	drv      haproxyState
	ready    *atomic.Bool
	alive    func() bool
	probes   []string // address:port to connect to
	addrs    []netip.Addr
	draining atomic.Bool
	// The SYN gate and the kernel's connection list (syngate), replaced
	// in unit tests, which must not gate the host's interfaces.
	closeSYN    func([]netip.Addr) ([]string, error)
	connections func([]netip.Addr) ([]syngate.Conn, error)
}

func newGate(up *bgp.Upstream, drv haproxyState, ready *atomic.Bool, alive func() bool, c *config.Config, addrs []netip.Prefix) *gate {
	port := c.HTTPBindPort
	if c.DisableHTTP {
		port = httpsPort(c)
	}
	g := &gate{up: up, drv: drv, ready: ready, alive: alive, closeSYN: syngate.Close, connections: syngate.Connections}
	for _, a := range addrs {
		g.addrs = append(g.addrs, a.Addr())
		g.probes = append(g.probes, net.JoinHostPort(a.Addr().String(), strconv.Itoa(port)))
	}
	return g
}

// check returns whether to announce and, if not, why.
func (g *gate) check() (bool, string, string) {
	switch {
	case g.draining.Load():
		return false, bgp.ReasonDraining, "stopping: HAProxy serves the flows still arriving until --shutdown-drain ends"
	case !g.drv.Running():
		return false, bgp.ReasonHAProxyDown, "HAProxy is not running"
	case !g.ready.Load() && !g.drv.Adopted():
		return false, bgp.ReasonNotReady, "caches syncing or the first configuration not served yet"
	case !g.alive():
		return false, bgp.ReasonSyncStalled, "the sync loop is stuck (/healthz fails)"
	}
	for _, p := range g.probes {
		c, err := net.DialTimeout("tcp", p, 500*time.Millisecond)
		if err != nil {
			return false, bgp.ReasonBindsSilent, fmt.Sprintf("HAProxy does not answer on %s: %v", p, err)
		}
		c.Close()
	}
	return true, "", ""
}

func (g *gate) update() {
	ok, reason, detail := g.check()
	if g.draining.Load() {
		// A check that started before the drain must not announce again.
		ok, reason, detail = false, bgp.ReasonDraining, "stopping"
	}
	g.up.Set(ok, reason, detail)
}

// run re-evaluates the gate until ctx ends.
func (g *gate) run(ctx context.Context) {
	t := time.NewTicker(gateInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.update()
		case <-g.drv.Changed():
			g.update()
		}
	}
}

// gateInterval bounds how long a HAProxy that died stays announced (on top
// of the routers' own reaction).
const gateInterval = 100 * time.Millisecond

// drainer is what the drain needs of the driver.
type drainer interface {
	Drain(context.Context) error
}

var _ drainer = (*haproxy.Driver)(nil)

// drain takes this edge out of the ingress for good, losing no request
// (docs/ha.md, "Stop, drain, hand-over"): the SYN gate drops new
// connections to the addresses, so none starts here that the routers
// could move mid-exchange; HAProxy winds its connections down; the
// addresses are withdrawn once none is left (or after d); then HAProxy
// keeps running for d while the routers move the flows, and the client
// kernels' retransmitted SYNs reach the other edges. Without the gate it
// withdraws at once and serves for d, as the routers' rehash allows.
func (g *gate) drain(d time.Duration, drv drainer, log *slog.Logger) {
	g.draining.Store(true)
	start := time.Now()
	// --shutdown-drain=0 asks for the stop at once.
	if d > 0 {
		if links, err := g.closeSYN(g.addrs); err != nil {
			log.Warn("SYN gate not closed: connections opened while the routers move the flows may be reset", "err", err)
		} else {
			log.Info("SYN gate closed: new connections to the ingress addresses wait for another edge", "links", links)
			g.waitConnections(d, drv, log)
		}
	}
	g.up.Set(false, bgp.ReasonDraining, "stopping: HAProxy serves the flows still arriving until --shutdown-drain ends")
	log.Info("draining: addresses withdrawn, HAProxy keeps serving", "for", d, "since_stop", time.Since(start).Round(time.Millisecond))
	if d > 0 {
		time.Sleep(d)
	}
}

// waitConnections has HAProxy wind its connections down and waits, at
// most limit, until the kernel has none in progress to the addresses.
func (g *gate) waitConnections(limit time.Duration, drv drainer, log *slog.Logger) {
	deadline := time.Now().Add(limit)
	last := -1
	conns := func() []syngate.Conn {
		c, err := g.connections(g.addrs)
		if err != nil {
			log.Warn("listing connections", "err", err)
		}
		if len(c) != last {
			last = len(c)
			log.Debug("draining: connections in progress", "count", len(c), "first", c[:min(len(c), 5)])
		}
		return c
	}
	// A handshake that passed before the gate closed completes within a
	// round trip; let it, so that the new worker does not inherit it.
	for end := time.Now().Add(handshakeWait); time.Now().Before(end); time.Sleep(drainPoll) {
		if !slices.ContainsFunc(conns(), func(c syngate.Conn) bool { return c.State == "syn-recv" }) {
			break
		}
	}
	windDown := func() {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if err := drv.Drain(ctx); err != nil {
			log.Warn("HAProxy did not reload to close its connections", "err", err)
		}
	}
	windDown()
	again := time.Now().Add(limit / 4)
	for {
		left := conns()
		if len(left) == 0 {
			log.Info("no connection left on this edge")
			return
		}
		now := time.Now()
		if now.After(deadline) {
			log.Warn("withdrawing with connections still open: --shutdown-drain ran out", "count", len(left), "first", left[:min(len(left), 5)])
			return
		}
		if !again.IsZero() && now.After(again) {
			// A connection accepted by the new worker from the listen
			// queue: one more reload closes it too.
			again = time.Time{}
			log.Info("connections left after the first reload, reloading again", "count", len(left))
			windDown()
		}
		time.Sleep(drainPoll)
	}
}

const (
	handshakeWait = 100 * time.Millisecond
	drainPoll     = 10 * time.Millisecond
)
