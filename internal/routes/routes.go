// Package routes keeps the kernel's routes to pod blocks equal to what the
// BGP speaker has learned. Every route it writes carries Perimeter's own
// rtm_protocol number, and only routes with that number are ever changed or
// deleted, so routes written by the administrator, DHCP or other daemons in
// the same table are left alone.
package routes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DefaultProtocol is the rtm_protocol number Perimeter marks its routes with
// (shipped as "201 perimeter" in /etc/iproute2/rt_protos.d/perimeter.conf).
const DefaultProtocol = 201

// Netlink is the part of the kernel's routing API the manager uses;
// *netlink.Handle implements it (a handle opened in another network namespace
// works from any goroutine).
type Netlink interface {
	RouteListFiltered(family int, filter *netlink.Route, filterMask uint64) ([]netlink.Route, error)
	RouteAdd(route *netlink.Route) error
	RouteReplace(route *netlink.Route) error
	RouteDel(route *netlink.Route) error
	RouteGetWithOptions(destination net.IP, options *netlink.RouteGetOptions) ([]netlink.Route, error)
}

// Config chooses where routes go and how they are marked.
type Config struct {
	// Table is the routing table; 0 means main (254).
	Table int
	// Protocol is the rtm_protocol number; 0 means DefaultProtocol.
	Protocol int
	// Metric is the route priority. Routes with another metric to the same
	// destination coexist with ours instead of clashing.
	Metric int
	// ResyncInterval is how often the whole table is compared with the
	// desired set (repairs routes deleted or changed behind our back);
	// 0 means 30s.
	ResyncInterval time.Duration
}

func (c Config) withDefaults() Config {
	if c.Table == 0 {
		c.Table = unix.RT_TABLE_MAIN
	}
	if c.Protocol == 0 {
		c.Protocol = DefaultProtocol
	}
	if c.ResyncInterval <= 0 {
		c.ResyncInterval = 30 * time.Second
	}
	return c
}

// State says what became of one desired route.
type State string

const (
	// StateInstalled: the route is in the kernel as wanted.
	StateInstalled State = "installed"
	// StateStale: a route left by a previous run, kept until the peers
	// have re-announced what they have (mark and sweep).
	StateStale State = "stale"
	// StateRefused: the next hop cannot be reached (no route to it, or
	// only through one of our own routes).
	StateRefused State = "refused"
	// StateConflict: a route not ours already holds the destination with
	// the same metric; it is left alone.
	StateConflict State = "conflict"
	// StatePending: not yet written (a netlink error will be retried).
	StatePending State = "pending"
)

// Status describes one route for `perimeter bgp status`.
type Status struct {
	Dst netip.Prefix `json:"dst"`
	// NextHop is the next hop BGP gave (invalid for stale routes).
	NextHop netip.Addr `json:"nextHop,omitzero"`
	// Gateway is the on-link gateway written to the kernel; it differs
	// from NextHop when the next hop was resolved recursively.
	Gateway   netip.Addr `json:"gateway,omitzero"`
	LinkIndex int        `json:"linkIndex,omitempty"`
	State     State      `json:"state"`
	Error     string     `json:"error,omitempty"`
}

// kernelRoute is what we wrote (or found) in the kernel for a destination.
type kernelRoute struct {
	gw   netip.Addr
	link int
}

type desiredRoute struct {
	nextHop netip.Addr
	state   State
	err     string
}

// Manager owns the set of routes with our protocol in one table.
type Manager struct {
	cfg Config
	nl  Netlink
	log *slog.Logger
	m   *metrics

	mu sync.Mutex
	// desired is what BGP wants, by destination.
	desired map[netip.Prefix]*desiredRoute
	// installed mirrors our routes in the kernel, as of the last dump plus
	// our own writes since.
	installed map[netip.Prefix]kernelRoute
	// stale holds routes adopted at start that BGP has not re-announced yet.
	stale map[netip.Prefix]struct{}
	// nextHops caches next-hop resolution between full resyncs.
	nextHops map[netip.Addr]resolved

	kick chan struct{}
}

// New returns a manager writing through nl. Metrics are registered on reg
// when it is not nil.
func New(cfg Config, nl Netlink, log *slog.Logger, reg prometheus.Registerer) (*Manager, error) {
	if nl == nil {
		return nil, errors.New("routes: no netlink handle")
	}
	if log == nil {
		log = slog.Default()
	}
	cfg = cfg.withDefaults()
	if cfg.Protocol < 1 || cfg.Protocol > 255 {
		return nil, fmt.Errorf("routes: protocol %d out of range 1-255", cfg.Protocol)
	}
	if cfg.Protocol <= unix.RTPROT_STATIC {
		// The kernel and iproute2 own these; deleting "our" routes would
		// then delete theirs.
		return nil, fmt.Errorf("routes: protocol %d is reserved for the kernel and static routes", cfg.Protocol)
	}
	m := &Manager{
		cfg:       cfg,
		nl:        nl,
		log:       log.With("table", cfg.Table, "proto", cfg.Protocol),
		desired:   map[netip.Prefix]*desiredRoute{},
		installed: map[netip.Prefix]kernelRoute{},
		stale:     map[netip.Prefix]struct{}{},
		nextHops:  map[netip.Addr]resolved{},
		kick:      make(chan struct{}, 1),
	}
	mt, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	m.m = mt
	return m, nil
}

// Table returns the routing table the manager writes to.
func (m *Manager) Table() int { return m.cfg.Table }

// Protocol returns the rtm_protocol number of the manager's routes.
func (m *Manager) Protocol() int { return m.cfg.Protocol }

// Adopt takes the routes with our protocol that are already in the table
// (left by a previous run that kept its routes on exit, or crashed) and keeps
// them as stale: traffic keeps flowing while BGP re-learns, and Sweep removes
// those not re-announced. Call it once, before the first Set.
func (m *Manager) Adopt() (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ours, err := m.listOurs()
	if err != nil {
		return 0, fmt.Errorf("adopt routes: %w", err)
	}
	for dst, kr := range ours {
		m.installed[dst] = kr
		if _, want := m.desired[dst]; !want {
			m.stale[dst] = struct{}{}
		}
	}
	m.updateGauges()
	if len(m.stale) > 0 {
		m.log.Info("kept routes from a previous run until BGP has re-announced", "routes", len(m.stale))
	}
	return len(m.stale), nil
}

// Sweep deletes the adopted routes that BGP has not re-announced.
func (m *Manager) Sweep() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for dst := range m.stale {
		delete(m.stale, dst)
		if _, want := m.desired[dst]; want {
			continue
		}
		if kr, ok := m.installed[dst]; ok {
			if err := m.del(dst, kr); err != nil {
				m.log.Warn("delete stale route failed, will retry", "dst", dst, "err", err)
				m.kickLocked()
				continue
			}
			m.log.Info("deleted route not re-announced after restart", "dst", dst, "via", kr.gw)
			n++
		}
	}
	m.updateGauges()
	return n
}

// Set makes the kernel route to dst go through nextHop. It is applied at
// once; a failure is logged and retried by the reconcile loop.
func (m *Manager) Set(dst netip.Prefix, nextHop netip.Addr) {
	dst = dst.Masked()
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.desired[dst]
	if !ok {
		d = &desiredRoute{}
		m.desired[dst] = d
	}
	d.nextHop = nextHop
	delete(m.stale, dst)
	if err := m.apply(dst, d); err != nil {
		m.kickLocked()
	}
	m.updateGauges()
}

// Delete removes the route to dst (if it is ours).
func (m *Manager) Delete(dst netip.Prefix) {
	dst = dst.Masked()
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.desired, dst)
	delete(m.stale, dst)
	if kr, ok := m.installed[dst]; ok {
		if err := m.del(dst, kr); err != nil {
			m.log.Warn("delete route failed, will retry", "dst", dst, "err", err)
			m.kickLocked()
		} else {
			m.log.Info("deleted route", "dst", dst, "via", kr.gw, "reason", "withdrawn")
		}
	}
	m.updateGauges()
}

// Run reconciles the whole table periodically and soon after any failed
// netlink call, until ctx ends. It does not delete routes on exit: the owner
// decides that (Flush, or keep them for the next start).
func (m *Manager) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.ResyncInterval)
	defer t.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	const firstBackoff = 500 * time.Millisecond
	backoff := firstBackoff
	armed := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-m.kick:
			// Let a burst of failures settle instead of hammering netlink.
			if !armed {
				retry.Reset(backoff)
				armed = true
			}
			continue
		case <-retry.C:
			armed = false
		}
		refused, err := m.reconcile()
		if err != nil {
			m.log.Warn("route reconcile failed, will retry", "err", err, "in", backoff)
		} else if !refused {
			backoff = firstBackoff
			continue
		}
		// Refused next hops are looked at again too: a link coming back
		// up makes them reachable.
		if !armed {
			retry.Reset(backoff)
			armed = true
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// Reconcile compares the kernel table with the desired set and repairs every
// difference, touching only routes with our protocol.
func (m *Manager) Reconcile() error {
	_, err := m.reconcile()
	return err
}

// reconcile also reports whether some route was refused for an unreachable
// next hop (worth another look soon, but not an error).
func (m *Manager) reconcile() (refused bool, _ error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ours, err := m.listOurs()
	if err != nil {
		return false, err
	}
	m.installed = ours
	// Links and addresses may have changed since the last full pass.
	clear(m.nextHops)
	var errs []error
	for dst, d := range m.desired {
		switch err := m.apply(dst, d); {
		case errors.Is(err, errRefused):
			refused = true
		case err != nil:
			errs = append(errs, err)
		}
	}
	for dst, kr := range m.installed {
		if _, want := m.desired[dst]; want {
			continue
		}
		if _, keep := m.stale[dst]; keep {
			continue
		}
		if err := m.del(dst, kr); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", dst, err))
			continue
		}
		m.log.Info("deleted route", "dst", dst, "via", kr.gw, "reason", "not wanted")
	}
	m.updateGauges()
	return refused, errors.Join(errs...)
}

// Flush deletes every route with our protocol in the table, whatever the
// desired set says (shutdown without KeepRoutesOnExit, `perimeter routes
// flush`).
func (m *Manager) Flush() (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := Flush(m.nl, m.cfg.Table, m.cfg.Protocol)
	clear(m.installed)
	clear(m.stale)
	for _, d := range m.desired {
		d.state, d.err = StatePending, ""
	}
	m.updateGauges()
	if n > 0 {
		m.log.Info("flushed routes", "routes", n)
	}
	return n, err
}

// Flush deletes every route with the given protocol from table (0 = main) and
// returns how many it deleted.
func Flush(nl Netlink, table, protocol int) (int, error) {
	if table == 0 {
		table = unix.RT_TABLE_MAIN
	}
	if protocol <= unix.RTPROT_STATIC {
		return 0, fmt.Errorf("refusing to flush routes of protocol %d", protocol)
	}
	rs, err := listProto(nl, table, protocol)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, r := range rs {
		del := &netlink.Route{Dst: r.Dst, Table: table, Protocol: netlink.RouteProtocol(protocol),
			Priority: r.Priority, Tos: r.Tos}
		if err := nl.RouteDel(del); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("delete %s: %w", r.Dst, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// Routes lists the desired routes and stale leftovers with their state.
func (m *Manager) Routes() []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Status, 0, len(m.desired)+len(m.stale))
	for dst, d := range m.desired {
		s := Status{Dst: dst, NextHop: d.nextHop, State: d.state, Error: d.err}
		if kr, ok := m.installed[dst]; ok && d.state == StateInstalled {
			s.Gateway, s.LinkIndex = kr.gw, kr.link
		}
		out = append(out, s)
	}
	for dst := range m.stale {
		kr := m.installed[dst]
		out = append(out, Status{Dst: dst, Gateway: kr.gw, LinkIndex: kr.link, State: StateStale})
	}
	slices.SortFunc(out, func(a, b Status) int { return comparePrefix(a.Dst, b.Dst) })
	return out
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// apply makes the kernel match one desired route. Called with mu held.
func (m *Manager) apply(dst netip.Prefix, d *desiredRoute) error {
	res, err := m.resolve(d.nextHop)
	if err != nil {
		if d.state != StateRefused || d.err != err.Error() {
			m.log.Warn("refused route: next hop not reachable on a link", "dst", dst, "nextHop", d.nextHop, "err", err)
		}
		d.state, d.err = StateRefused, err.Error()
		// A route we wrote earlier through a gateway that is now wrong
		// would blackhole traffic; remove it.
		if kr, ok := m.installed[dst]; ok {
			if derr := m.del(dst, kr); derr != nil {
				return derr
			}
			m.log.Info("deleted route", "dst", dst, "via", kr.gw, "reason", "next hop unreachable")
		}
		return fmt.Errorf("%s: %w", dst, errRefused)
	}
	want := kernelRoute{gw: res.gw, link: res.link}
	if kr, ok := m.installed[dst]; ok && kr == want {
		d.state, d.err = StateInstalled, ""
		return nil
	}
	r := m.route(dst, want)
	start := time.Now()
	if _, ours := m.installed[dst]; ours {
		err = m.nl.RouteReplace(r)
	} else {
		err = m.nl.RouteAdd(r)
		if errors.Is(err, syscall.EEXIST) {
			err = m.takeOverOrConflict(dst, r)
		}
	}
	m.m.netlinkSeconds.Observe(time.Since(start).Seconds())
	switch {
	case errors.Is(err, errConflict):
		if d.state != StateConflict {
			m.log.Warn("route not installed: a route not ours holds the destination", "dst", dst, "nextHop", d.nextHop)
		}
		d.state, d.err = StateConflict, "a route with another protocol holds this destination"
		return nil
	case err != nil:
		m.m.errors.WithLabelValues("replace").Inc()
		m.log.Warn("install route failed, will retry", "dst", dst, "via", want.gw, "err", err)
		d.state, d.err = StatePending, err.Error()
		return fmt.Errorf("install %s via %s: %w", dst, want.gw, err)
	}
	how := "on-link"
	if res.recursive {
		how = "resolved via " + res.gw.String()
	}
	m.log.Info("installed route", "dst", dst, "nextHop", d.nextHop, "gateway", want.gw, "link", want.link, "how", how)
	m.installed[dst] = want
	d.state, d.err = StateInstalled, ""
	return nil
}

var (
	errConflict = errors.New("destination held by a route not ours")
	// errRefused marks routes whose next hop is unreachable; they are
	// retried with backoff, quietly.
	errRefused = errors.New("next hop unreachable")
)

// takeOverOrConflict handles EEXIST on add: if what holds the key is ours (a
// leftover not adopted, e.g. written by a concurrent run) replace it,
// otherwise leave it and report a conflict.
func (m *Manager) takeOverOrConflict(dst netip.Prefix, r *netlink.Route) error {
	rs, err := listWithRetry(m.nl, &netlink.Route{Table: m.cfg.Table, Dst: prefixToIPNet(dst)},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
	if err != nil {
		return err
	}
	for _, x := range rs {
		if x.Priority == r.Priority && x.Tos == r.Tos && int(x.Protocol) != m.cfg.Protocol {
			return errConflict
		}
	}
	return m.nl.RouteReplace(r)
}

func (m *Manager) del(dst netip.Prefix, kr kernelRoute) error {
	err := m.nl.RouteDel(&netlink.Route{Dst: prefixToIPNet(dst), Table: m.cfg.Table,
		Protocol: netlink.RouteProtocol(m.cfg.Protocol), Priority: m.metric(dst)})
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		m.m.errors.WithLabelValues("delete").Inc()
		return err
	}
	delete(m.installed, dst)
	return nil
}

// ipv6DefaultMetric is what the kernel makes of an IPv6 route written
// with metric 0 (IP6_RT_PRIO_USER).
const ipv6DefaultMetric = 1024

// metric is the route priority of dst as the kernel stores it.
func (m *Manager) metric(dst netip.Prefix) int {
	if m.cfg.Metric == 0 && dst.Addr().Is6() {
		return ipv6DefaultMetric
	}
	return m.cfg.Metric
}

func (m *Manager) route(dst netip.Prefix, kr kernelRoute) *netlink.Route {
	return &netlink.Route{
		Dst:       prefixToIPNet(dst),
		Gw:        net.IP(kr.gw.AsSlice()),
		LinkIndex: kr.link,
		Table:     m.cfg.Table,
		Protocol:  netlink.RouteProtocol(m.cfg.Protocol),
		Priority:  m.metric(dst),
		Scope:     netlink.SCOPE_UNIVERSE,
		Type:      unix.RTN_UNICAST,
	}
}

// listOurs dumps the routes with our protocol in our table. Called with mu
// held.
func (m *Manager) listOurs() (map[netip.Prefix]kernelRoute, error) {
	rs, err := listProto(m.nl, m.cfg.Table, m.cfg.Protocol)
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Prefix]kernelRoute, len(rs))
	for _, r := range rs {
		dst, ok := ipNetToPrefix(r.Dst)
		if !ok || r.Priority != m.metric(dst) {
			continue
		}
		gw, _ := netip.AddrFromSlice(r.Gw)
		out[dst] = kernelRoute{gw: gw.Unmap(), link: r.LinkIndex}
	}
	return out, nil
}

func listProto(nl Netlink, table, protocol int) ([]netlink.Route, error) {
	return listWithRetry(nl, &netlink.Route{Table: table, Protocol: netlink.RouteProtocol(protocol)},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
}

// listWithRetry repeats a dump the kernel interrupted (the table changed
// while it was read), as kube-router does.
func listWithRetry(nl Netlink, filter *netlink.Route, mask uint64) ([]netlink.Route, error) {
	var err error
	for range 5 {
		var rs []netlink.Route
		rs, err = nl.RouteListFiltered(netlink.FAMILY_ALL, filter, mask)
		if err == nil {
			return rs, nil
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	return nil, fmt.Errorf("list routes in table %d: %w", filter.Table, err)
}

func (m *Manager) kickLocked() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *Manager) updateGauges() {
	n, n6 := 0, 0
	refused := 0
	for dst, d := range m.desired {
		switch d.state {
		case StateInstalled:
			n++
			if dst.Addr().Is6() {
				n6++
			}
		case StateRefused, StateConflict:
			refused++
		}
	}
	m.m.installed.Set(float64(n))
	m.m.installedFamily.WithLabelValues("ipv4").Set(float64(n - n6))
	m.m.installedFamily.WithLabelValues("ipv6").Set(float64(n6))
	m.m.stale.Set(float64(len(m.stale)))
	m.m.refused.Set(float64(refused))
}

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func ipNetToPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}
