package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/osrg/gobgp/v3/pkg/server"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/perimeter-ingress/perimeter/internal/routes"
)

// Routes is the kernel side the speaker drives; *routes.Manager implements
// it.
type Routes interface {
	Adopt() (int, error)
	Set(dst netip.Prefix, nextHop netip.Addr)
	Delete(dst netip.Prefix)
	Sweep() int
	Run(ctx context.Context) error
	Flush() (int, error)
	Routes() []routes.Status
}

// Speaker is the embedded BGP speaker.
type Speaker struct {
	cfg    Config
	routes Routes
	log    *slog.Logger
	m      *metrics
	sel    labels.Selector

	mu       sync.Mutex
	srv      *server.BgpServer
	stopping bool
	policy   *Policy
	// lastPolicy is what GoBGP has; nil before the first SetPolicies.
	lastPolicy *api.SetPoliciesRequest
	state      ClusterState
	peers      map[netip.Addr]peerSpec
	problems   map[netip.Addr]string
	passive    []string // peer-group names configured in GoBGP
	sessions   map[netip.Addr]*session
	adjIn      map[netip.Addr]map[netip.Prefix]received
	best       map[netip.Prefix]bestPath
	// expectEOR lists the peers whose End-of-RIB ends the wait before
	// stale routes are swept; nil until peers are first configured.
	expectEOR map[netip.Addr]bool
	swept     bool
	eorDone   chan struct{}
	// tripped holds peers that exceeded MaxPrefixes: zero until their
	// session is dropped, then the time they may return.
	tripped map[netip.Addr]time.Time
	// kick asks the run loop to look at tripped peers again.
	kick chan struct{}
	// explained are the peers and reasons whose expected rejections were
	// explained in the log once.
	explained map[expectedKey]bool
	// unreachable are the Services with IPv6 endpoints no route reaches,
	// with what was reported about them.
	unreachable map[ServiceRef]string
	// keepRoutes starts as cfg.KeepRoutesOnExit; KeepRoutesOnExit sets it
	// for one exit (a hand-over restart).
	keepRoutes atomic.Bool
}

type session struct {
	state api.PeerState_SessionState
	since time.Time
	eor   bool
	as    uint32
}

type received struct {
	nextHop netip.Addr
	verdict Verdict
}

type bestPath struct {
	nextHop netip.Addr
	peer    netip.Addr
}

// New checks cfg (filling in defaults) and returns a speaker that installs
// routes through rt. Metrics are registered on reg when it is not nil.
func New(cfg Config, rt Routes, log *slog.Logger, reg prometheus.Registerer) (*Speaker, error) {
	if rt == nil {
		return nil, errors.New("bgp: no route manager")
	}
	if log == nil {
		log = slog.Default()
	}
	cfg.Peers = slices.Clone(cfg.Peers)
	cfg.PodCIDRs = slices.Clone(cfg.PodCIDRs)
	cfg.PassivePeers = slices.Clone(cfg.PassivePeers)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bgp config: %w", err)
	}
	sel, err := labels.Parse(cfg.NodeSelector)
	if err != nil {
		return nil, fmt.Errorf("bgp node selector: %w", err)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &Speaker{
		cfg:      cfg,
		routes:   rt,
		log:      log.With("component", "bgp"),
		m:        m,
		sel:      sel,
		policy:   NewPolicy(nil, []Affinity{}, nil),
		peers:    map[netip.Addr]peerSpec{},
		problems: map[netip.Addr]string{},
		sessions: map[netip.Addr]*session{},
		adjIn:    map[netip.Addr]map[netip.Prefix]received{},
		best:     map[netip.Prefix]bestPath{},
		eorDone:  make(chan struct{}, 1),
		tripped:  map[netip.Addr]time.Time{},
		kick:     make(chan struct{}, 1),

		explained: map[expectedKey]bool{},
	}
	s.keepRoutes.Store(cfg.KeepRoutesOnExit)
	return s, nil
}

// KeepRoutesOnExit makes the coming stop leave the kernel routes in place
// for the next start to adopt, whatever the configuration says: the daemon
// calls it when it hands over to its successor.
func (s *Speaker) KeepRoutesOnExit() { s.keepRoutes.Store(true) }

// Run speaks BGP until ctx ends, then sends Cease to every peer and, unless
// KeepRoutesOnExit, deletes the routes it installed.
func (s *Speaker) Run(ctx context.Context) error {
	if s.cfg.OnExit != nil {
		defer s.cfg.OnExit()
	}
	// GoBGP v3's Serve loop has no way out: after StopBgp it idles. One
	// goroutine per speaker, for the life of the process.
	srv := server.NewBgpServer(server.LoggerOption(newGoBGPLogger(s.log)))
	go srv.Serve()

	global := &api.Global{Asn: s.cfg.LocalAS, RouterId: s.cfg.RouterID.String(), ListenPort: int32(s.cfg.ListenPort)}
	switch {
	case s.cfg.ListenAddress.IsValid():
		global.ListenAddresses = []string{s.cfg.ListenAddress.String()}
		if s.cfg.ListenAddress6.IsValid() {
			global.ListenAddresses = append(global.ListenAddresses, s.cfg.ListenAddress6.String())
		}
	case s.cfg.ListenPort > 0:
		// IPv6 (Calico's bird6 dials the IPv6 address of its peers) on
		// hosts that have it: listening on :: fails where IPv6 is off.
		global.ListenAddresses = []string{"0.0.0.0"}
		if s.cfg.ListenAddress6.IsValid() {
			global.ListenAddresses = append(global.ListenAddresses, s.cfg.ListenAddress6.String())
		} else if ipv6Available() {
			global.ListenAddresses = append(global.ListenAddresses, "::")
		}
		if s.cfg.PeerWithNodes && s.cfg.NodePassword == nil {
			// A pod's connection, NATed to its node's address, could take
			// that node's session while the node's own is down.
			s.log.Warn("BGP listens on every address and node sessions have no password: set --bgp-listen-address and --bgp-node-password-secret")
		}
	}
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: global}); err != nil {
		return fmt.Errorf("start BGP on port %d: %w", s.cfg.ListenPort, err)
	}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	s.log.Info("BGP speaker started", "routerID", s.cfg.RouterID, "as", s.cfg.LocalAS, "port", s.cfg.ListenPort,
		"holdTime", s.cfg.HoldTime, "gracefulRestartHelper", !s.cfg.DisableGracefulRestart)

	// Until the policy is assigned GoBGP accepts everything: assign it
	// (rejecting all) before the first peer exists.
	if err := s.setPolicy(ctx, NewPolicy(nil, []Affinity{}, nil)); err != nil {
		s.stopServer(srv)
		return err
	}
	if err := srv.AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name: "global", Direction: api.PolicyDirection_IMPORT,
		Policies: []*api.Policy{{Name: importPolicyName}}, DefaultAction: api.RouteAction_REJECT,
	}}); err != nil {
		s.stopServer(srv)
		return fmt.Errorf("assign BGP import policy: %w", err)
	}

	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	// Session events, best paths and End-of-RIB share one stream, so an
	// End-of-RIB is seen after the best paths its UPDATEs produced.
	if err := srv.WatchEvent(watchCtx, &api.WatchEventRequest{
		Peer: &api.WatchEventRequest_Peer{},
		Table: &api.WatchEventRequest_Table{Filters: []*api.WatchEventRequest_Table_Filter{
			{Type: api.WatchEventRequest_Table_Filter_BEST, Init: true},
			{Type: api.WatchEventRequest_Table_Filter_EOR},
		}}}, s.onEvent); err != nil {
		s.stopServer(srv)
		return fmt.Errorf("watch BGP best paths: %w", err)
	}
	// Received paths before policy, with their own copy of session events,
	// only for counting and explaining rejections.
	if err := srv.WatchEvent(watchCtx, &api.WatchEventRequest{
		Peer: &api.WatchEventRequest_Peer{},
		Table: &api.WatchEventRequest_Table{Filters: []*api.WatchEventRequest_Table_Filter{
			{Type: api.WatchEventRequest_Table_Filter_ADJIN},
		}}}, s.onReceivedEvent); err != nil {
		s.stopServer(srv)
		return fmt.Errorf("watch BGP received paths: %w", err)
	}

	if _, err := s.routes.Adopt(); err != nil {
		s.stopServer(srv)
		return err
	}
	routesCtx, stopRoutes := context.WithCancel(context.Background())
	routesDone := make(chan struct{})
	go func() {
		defer close(routesDone)
		if err := s.routes.Run(routesCtx); err != nil {
			s.log.Error("route manager stopped", "err", err)
		}
	}()
	var wg sync.WaitGroup

	src := s.cfg.Source
	if src == nil {
		src = staticSource{}
	}
	states := make(chan ClusterState, 1)
	srcCtx, stopSrc := context.WithCancel(ctx)
	srcErr := make(chan error, 1)
	wg.Go(func() {
		srcErr <- src.Run(srcCtx, func(st ClusterState) {
			// Only the newest snapshot matters.
			for {
				select {
				case states <- st:
					return
				default:
				}
				select {
				case <-states:
				default:
				}
			}
		})
	})

	sweep := time.NewTimer(s.cfg.StaleTimeout)
	defer sweep.Stop()
	readmit := time.NewTimer(time.Hour)
	readmit.Stop()
	defer readmit.Stop()
	// Routes come and go with the peers' announcements: IPv6 endpoints are
	// looked at on every cluster change and every few seconds.
	check6 := time.NewTicker(endpointCheckInterval)
	defer check6.Stop()
	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-srcErr:
			if ctx.Err() == nil {
				if err == nil {
					err = errors.New("stopped")
				}
				runErr = fmt.Errorf("cluster source: %w", err)
			}
			break loop
		case st := <-states:
			first := s.expectEOR == nil
			s.apply(ctx, st)
			if first {
				sweep.Reset(s.cfg.StaleTimeout)
				s.startEORWait()
			}
			s.checkIPv6Endpoints()
		case <-check6.C:
			s.checkIPv6Endpoints()
		case <-s.kick:
			s.maxPrefixes(ctx, readmit)
		case <-readmit.C:
			s.maxPrefixes(ctx, readmit)
		case <-s.eorDone:
			s.sweep("all peers sent End-of-RIB")
			s.checkIPv6Endpoints()
		case <-sweep.C:
			s.sweep("timed out waiting for End-of-RIB")
			s.checkIPv6Endpoints()
		}
	}
	stopSrc()
	wg.Wait()
	// Order matters: no session teardown may reach the kernel, and the
	// route manager's loop must not re-install what the flush removes.
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.stopServer(srv)
	stopWatch()
	stopRoutes()
	<-routesDone
	s.releaseRoutes()
	return runErr
}

// endpointCheckInterval is how often IPv6 endpoints are checked for a route.
var endpointCheckInterval = 10 * time.Second

func (s *Speaker) maxPrefixes(ctx context.Context, readmit *time.Timer) {
	again, next := s.enforceMaxPrefixes(ctx)
	if again {
		s.mu.Lock()
		st := s.state
		s.mu.Unlock()
		s.apply(ctx, st)
	}
	if !next.IsZero() {
		readmit.Reset(time.Until(next))
	}
}

// releaseRoutes leaves the kernel routes for the next start to adopt
// (KeepRoutesOnExit) or deletes them.
func (s *Speaker) releaseRoutes() {
	if s.keepRoutes.Load() {
		s.log.Info("BGP stopped; routes kept for the next start", "routes", len(s.routes.Routes()))
		return
	}
	n, err := s.routes.Flush()
	if err != nil {
		s.log.Error("flush routes on exit", "err", err)
	}
	s.log.Info("BGP stopped; routes removed", "routes", n)
}

func (s *Speaker) stopServer(srv *server.BgpServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Sends Cease (peer de-configured) to every established peer.
	if err := srv.StopBgp(ctx, &api.StopBgpRequest{}); err != nil {
		s.log.Warn("stop BGP", "err", err)
	}
}

func (s *Speaker) startEORWait() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expectEOR = map[netip.Addr]bool{}
	for a := range s.peers {
		s.expectEOR[a] = true
	}
	s.checkEORLocked()
}

// checkEORLocked signals the run loop once every expected peer has sent
// End-of-RIB (or is no longer configured).
func (s *Speaker) checkEORLocked() {
	if s.expectEOR == nil || s.swept || len(s.expectEOR) == 0 {
		return
	}
	for a := range s.expectEOR {
		if _, still := s.peers[a]; !still {
			continue
		}
		if ss := s.sessions[a]; ss == nil || !ss.eor {
			return
		}
	}
	select {
	case s.eorDone <- struct{}{}:
	default:
	}
}

func (s *Speaker) sweep(why string) {
	s.mu.Lock()
	if s.swept {
		s.mu.Unlock()
		return
	}
	s.swept = true
	s.mu.Unlock()
	n := s.routes.Sweep()
	s.log.Info("startup route sweep done", "why", why, "deleted", n)
}

// apply takes a new cluster snapshot: import policy first (so paths from new
// peers meet the right policy), then the peer set.
func (s *Speaker) apply(ctx context.Context, st ClusterState) {
	pools := slices.Clone(st.Pools)
	for _, p := range s.cfg.PodCIDRs {
		pools = append(pools, Pool{Name: "config", CIDR: p, BlockSize: s.cfg.blockSize(p.Addr())})
	}
	pol := NewPolicy(pools, st.Affinities, st.Nodes).WithTrusted(s.cfg.trustedPeers()).WithHosts(st.Hosts)
	if err := s.setPolicy(ctx, pol); err != nil {
		s.log.Error("update BGP import policy", "err", err)
	}

	s.mu.Lock()
	s.state = st
	desired, problems := desiredPeers(&s.cfg, st, s.sel)
	for a, p := range problems {
		if s.problems[a] != p {
			s.log.Warn("BGP peer not configured", "peer", a, "problem", p)
		}
	}
	s.problems = problems
	current := s.peers
	srv := s.srv
	s.mu.Unlock()

	for a, old := range current {
		if nw, ok := desired[a]; ok && nw == old {
			continue
		}
		if err := srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: a.String()}); err != nil {
			s.log.Error("remove BGP peer", "peer", a, "err", err)
			continue
		}
		s.mu.Lock()
		delete(s.peers, a)
		delete(s.sessions, a)
		delete(s.adjIn, a)
		s.mu.Unlock()
		s.m.forget(a.String())
		if _, ok := desired[a]; !ok {
			s.log.Info("removed BGP peer", "peer", a, "kind", old.Kind, "node", old.Node)
		}
	}
	for a, p := range desired {
		s.mu.Lock()
		_, have := s.peers[a]
		_, tripped := s.tripped[a]
		s.mu.Unlock()
		if have || tripped {
			continue
		}
		if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: s.cfg.apiPeer(p)}); err != nil {
			s.log.Error("add BGP peer", "peer", a, "err", err)
			continue
		}
		s.mu.Lock()
		s.peers[a] = p
		s.sessions[a] = &session{since: time.Now(), as: p.AS}
		s.mu.Unlock()
		s.m.peerState.WithLabelValues(a.String()).Set(1)
		s.m.peerUp.WithLabelValues(a.String()).Set(0)
		s.log.Info("added BGP peer", "peer", a, "as", p.AS, "kind", p.Kind, "node", p.Node, "md5", p.Password != "",
			"family", familyName(a))
		if !onLocalSubnet(a) {
			s.log.Warn("BGP peer is not on a subnet of this host: the next hops it announces must be reachable through "+
				"an existing route, or its routes are refused (put the edge host on the nodes' subnet, or peer with a route reflector there)",
				"peer", a, "node", p.Node)
		}
	}
	s.applyPassive(ctx, st)
	s.mu.Lock()
	s.checkEORLocked()
	s.mu.Unlock()
}

// applyPassive configures the dynamic-neighbour groups once their passwords
// are known. Later password changes need a restart (GoBGP cannot change a
// group's password in place).
func (s *Speaker) applyPassive(ctx context.Context, st ClusterState) {
	if len(s.passive) == len(s.cfg.PassivePeers) {
		return
	}
	for i, p := range s.cfg.PassivePeers {
		name := passiveGroupName(i)
		if slices.Contains(s.passive, name) {
			continue
		}
		pw := ""
		if p.PasswordSecret != nil {
			v, ok := st.Secrets[*p.PasswordSecret]
			if !ok || v == "" {
				s.log.Warn("passive BGP peers not configured yet", "prefix", p.Prefix, "problem", "waiting for password secret "+p.PasswordSecret.String())
				continue
			}
			pw = v
		}
		if err := s.srv.AddPeerGroup(ctx, &api.AddPeerGroupRequest{PeerGroup: s.cfg.apiPeerGroup(name, p, pw)}); err != nil {
			s.log.Error("add passive BGP peer group", "prefix", p.Prefix, "err", err)
			continue
		}
		if err := s.srv.AddDynamicNeighbor(ctx, &api.AddDynamicNeighborRequest{DynamicNeighbor: &api.DynamicNeighbor{
			Prefix: p.Prefix.String(), PeerGroup: name}}); err != nil {
			s.log.Error("add passive BGP peers", "prefix", p.Prefix, "err", err)
			continue
		}
		s.passive = append(s.passive, name)
		s.log.Info("accepting BGP sessions", "from", p.Prefix, "as", p.AS, "md5", pw != "")
	}
}

// setPolicy swaps the import policy in GoBGP when it changed and has GoBGP
// re-evaluate what it already received (soft reset in). Our copy changes
// first: a path checked against the new rules while GoBGP still has the old
// ones is at worst skipped and then withdrawn by the soft reset, never
// installed wrongly.
func (s *Speaker) setPolicy(ctx context.Context, pol *Policy) error {
	req := pol.gobgp()
	s.mu.Lock()
	if s.lastPolicy != nil && proto.Equal(req, s.lastPolicy) {
		s.policy = pol
		s.mu.Unlock()
		return nil
	}
	first := s.lastPolicy == nil
	s.policy = pol
	s.reevaluateLocked()
	srv := s.srv
	s.mu.Unlock()

	if err := srv.SetPolicies(ctx, req); err != nil {
		return fmt.Errorf("set BGP policies: %w", err)
	}
	s.mu.Lock()
	s.lastPolicy = req
	s.mu.Unlock()
	if first {
		return nil
	}
	s.m.policyUpdates.Inc()
	s.log.Info("BGP import policy updated", "pools", len(pol.pools), "ownershipChecked", pol.OwnershipKnown(),
		"ownedBlocks", len(pol.owners))
	if err := srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: "all", Soft: true,
		Direction: api.ResetPeerRequest_IN}); err != nil {
		return fmt.Errorf("re-evaluate received routes: %w", err)
	}
	return nil
}

// reevaluateLocked recounts received paths under the current policy.
func (s *Speaker) reevaluateLocked() {
	for peer, rib := range s.adjIn {
		for p, r := range rib {
			r.verdict = s.policy.DecideFrom(peer, p, r.nextHop)
			rib[p] = r
		}
		s.updateCountsLocked(peer)
	}
}

func (s *Speaker) updateCountsLocked(peer netip.Addr) {
	acc := 0
	rib := s.adjIn[peer]
	for _, r := range rib {
		if r.verdict.Accept {
			acc++
		}
	}
	l := peer.String()
	s.m.received.WithLabelValues(l).Set(float64(len(rib)))
	s.m.accepted.WithLabelValues(l).Set(float64(acc))
	s.m.rejected.WithLabelValues(l).Set(float64(len(rib) - acc))
}

// onEvent handles session changes, best paths and End-of-RIB markers.
func (s *Speaker) onEvent(r *api.WatchEventResponse) {
	if pe := r.GetPeer(); pe != nil {
		s.onPeerEvent(pe)
		return
	}
	for _, p := range r.GetTable().GetPaths() {
		s.onBestPath(p)
	}
}

func (s *Speaker) onPeerEvent(pe *api.WatchEventResponse_PeerEvent) {
	if pe.GetType() != api.WatchEventResponse_PeerEvent_STATE {
		return
	}
	st := pe.GetPeer().GetState()
	addr, err := netip.ParseAddr(st.GetNeighborAddress())
	if err != nil {
		return
	}
	addr = addr.Unmap()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping || !s.knownPeerLocked(addr) {
		return
	}
	ss := s.sessions[addr]
	if ss == nil {
		ss = &session{}
		s.sessions[addr] = ss
	}
	state := st.GetSessionState()
	if state == ss.state {
		return
	}
	prev := ss.state
	ss.state, ss.since = state, time.Now()
	if as := st.GetPeerAsn(); as != 0 {
		ss.as = as
	}
	l := addr.String()
	s.m.peerState.WithLabelValues(l).Set(float64(state))
	switch {
	case state == api.PeerState_ESTABLISHED:
		s.m.peerUp.WithLabelValues(l).Set(1)
		s.log.Info("BGP session established", "peer", addr, "as", ss.as, "node", s.peers[addr].Node)
	case prev == api.PeerState_ESTABLISHED:
		s.m.peerUp.WithLabelValues(l).Set(0)
		ss.eor = false
		s.log.Warn("BGP session down", "peer", addr, "node", s.peers[addr].Node, "state", stateName(state),
			"gracefulRestart", !s.cfg.DisableGracefulRestart)
	}
}

// knownPeerLocked filters out late events about peers already removed.
func (s *Speaker) knownPeerLocked(a netip.Addr) bool {
	if _, ok := s.peers[a]; ok {
		return true
	}
	for _, p := range s.cfg.PassivePeers {
		if p.Prefix.Contains(a) {
			return true
		}
	}
	return false
}

func (s *Speaker) onBestPath(p *api.Path) {
	peer, _ := netip.ParseAddr(p.GetNeighborIp())
	peer = peer.Unmap()
	if p.GetNlri() == nil {
		// A session carries one family (see familyOf): its End-of-RIB is
		// that family's.
		if f := p.GetFamily(); (f.GetAfi() == api.Family_AFI_IP || f.GetAfi() == api.Family_AFI_IP6) &&
			f.GetSafi() == api.Family_SAFI_UNICAST {
			s.onEndOfRIB(peer)
		}
		return
	}
	if !peer.IsValid() {
		return // a local path; we originate none
	}
	prefix, nextHop, err := pathPrefixNextHop(p)
	if err != nil {
		s.log.Warn("ignoring unreadable BGP path", "peer", peer, "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return
	}
	if p.GetIsWithdraw() {
		if _, ok := s.best[prefix]; ok {
			delete(s.best, prefix)
			s.routes.Delete(prefix)
		}
		s.countBestLocked()
		return
	}
	if v := s.policy.DecideFrom(peer, prefix, nextHop); !v.Accept {
		// Only during a policy change (see setPolicy); the soft reset
		// that follows withdraws it in GoBGP too.
		s.log.Debug("best path not installed: rejected by the current policy", "prefix", prefix, "nextHop", nextHop, "reason", v.Reason)
		if _, ok := s.best[prefix]; ok {
			delete(s.best, prefix)
			s.routes.Delete(prefix)
		}
		s.countBestLocked()
		return
	}
	s.best[prefix] = bestPath{nextHop: nextHop, peer: peer}
	s.routes.Set(prefix, nextHop)
	s.countBestLocked()
}

// countBestLocked updates the best-path gauges.
func (s *Speaker) countBestLocked() {
	n6 := 0
	for p := range s.best {
		if p.Addr().Is6() {
			n6++
		}
	}
	s.m.bestPaths.Set(float64(len(s.best)))
	s.m.bestFamily.WithLabelValues("ipv4").Set(float64(len(s.best) - n6))
	s.m.bestFamily.WithLabelValues("ipv6").Set(float64(n6))
}

func (s *Speaker) onEndOfRIB(peer netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[peer]; ss != nil {
		ss.eor = true
	}
	s.log.Debug("End-of-RIB received", "peer", peer)
	s.checkEORLocked()
}

// onReceivedEvent tracks each peer's announcements before policy.
func (s *Speaker) onReceivedEvent(r *api.WatchEventResponse) {
	if pe := r.GetPeer(); pe != nil {
		if pe.GetType() != api.WatchEventResponse_PeerEvent_STATE ||
			pe.GetPeer().GetState().GetSessionState() == api.PeerState_ESTABLISHED {
			return
		}
		addr, err := netip.ParseAddr(pe.GetPeer().GetState().GetNeighborAddress())
		if err != nil {
			return
		}
		addr = addr.Unmap()
		s.mu.Lock()
		if _, ok := s.adjIn[addr]; ok {
			// A session that is not up has nothing current to count
			// (with graceful restart GoBGP keeps the routes; they are
			// re-announced and counted again on reconnection).
			delete(s.adjIn, addr)
			if s.knownPeerLocked(addr) {
				s.updateCountsLocked(addr)
			}
		}
		s.mu.Unlock()
		return
	}
	paths := r.GetTable().GetPaths()
	if len(paths) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	touched := map[netip.Addr]bool{}
	for _, p := range paths {
		if p.GetNlri() == nil {
			continue
		}
		peer, err := netip.ParseAddr(p.GetNeighborIp())
		if err != nil {
			continue
		}
		peer = peer.Unmap()
		prefix, nextHop, err := pathPrefixNextHop(p)
		if err != nil {
			continue
		}
		rib := s.adjIn[peer]
		if rib == nil {
			rib = map[netip.Prefix]received{}
			s.adjIn[peer] = rib
		}
		touched[peer] = true
		if p.GetIsWithdraw() {
			delete(rib, prefix)
			continue
		}
		v := s.policy.DecideFrom(peer, prefix, nextHop)
		prev, had := rib[prefix]
		rib[prefix] = received{nextHop: nextHop, verdict: v}
		if !v.Accept && (!had || prev.verdict != v || prev.nextHop != nextHop) {
			s.m.rejectedTotal.WithLabelValues(peer.String(), string(v.Reason)).Inc()
			s.logRejectionLocked(peer, prefix, nextHop, v)
		}
	}
	for peer := range touched {
		if s.knownPeerLocked(peer) {
			s.updateCountsLocked(peer)
		}
		if max := s.cfg.MaxPrefixes; max > 0 && acceptedCount(s.adjIn[peer]) > max {
			if _, done := s.tripped[peer]; !done {
				s.tripped[peer] = time.Time{}
				s.kickLocked()
			}
		}
	}
}

// acceptedCount is what the limit of --bgp-max-prefixes applies to: the
// routes the policy accepts. Over eBGP every node re-announces every other
// node's blocks, all rejected; counting those would disconnect healthy
// nodes of large clusters.
func acceptedCount(rib map[netip.Prefix]received) int {
	n := 0
	for _, r := range rib {
		if r.verdict.Accept {
			n++
		}
	}
	return n
}

// expectedRejection tells rejections that a healthy Calico cluster causes
// from those that point at a problem: a node re-announcing another node's
// block with itself as next hop (eBGP, route reflectors with next hop self),
// and node routes outside the pod CIDRs (service addresses).
func (s *Speaker) expectedRejection(nextHop netip.Addr, v Verdict) bool {
	switch v.Reason {
	case RejectNotOwner, RejectOutsidePools, RejectNoAffinity:
		return s.policy.isNodeAddr(nextHop)
	}
	return false
}

// logRejectionLocked logs a rejection at Warn unless it is expected (see
// expectedRejection): those are counted, logged at Debug, and explained
// once per peer and reason at Info.
func (s *Speaker) logRejectionLocked(peer netip.Addr, prefix netip.Prefix, nextHop netip.Addr, v Verdict) {
	if !s.expectedRejection(nextHop, v) {
		s.log.Warn("rejected BGP route", "peer", peer, "prefix", prefix, "nextHop", nextHop,
			"reason", v.Reason, "owner", v.Owner)
		return
	}
	s.log.Debug("rejected BGP route", "peer", peer, "prefix", prefix, "nextHop", nextHop,
		"reason", v.Reason, "owner", v.Owner)
	key := expectedKey{peer, v.Reason}
	if s.explained[key] {
		return
	}
	s.explained[key] = true
	why := "a node announces another node's block with itself as next hop (eBGP to the nodes without nextHopMode: Keep, " +
		"or a route reflector with next hop self): the owner's own announcement is used"
	switch v.Reason {
	case RejectOutsidePools:
		why = "a node announces addresses outside the pod CIDRs (service addresses from BGPConfiguration, other pools' uses)"
	case RejectNoAffinity:
		why = "a node announces a block that has no BlockAffinity (being released, or not yet confirmed)"
	}
	s.log.Info("rejecting BGP routes as expected; further ones are counted in perimeter_bgp_prefixes_rejected_total "+
		"and shown by `perimeter bgp status`, logged at debug level", "peer", peer, "reason", v.Reason, "why", why,
		"example", prefix, "nextHop", nextHop)
}

type expectedKey struct {
	peer   netip.Addr
	reason Reason
}

func (s *Speaker) kickLocked() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// enforceMaxPrefixes drops the sessions of peers that announced too much and
// re-admits those whose penalty is over; it returns whether any was
// re-admitted and when the next one is due. Deleting the peer is the one
// GoBGP operation that always drops its routes (a notification races with
// the peer closing the connection, and a closed connection counts as a
// graceful restart, keeping the routes).
func (s *Speaker) enforceMaxPrefixes(ctx context.Context) (readmit bool, next time.Time) {
	now := time.Now()
	s.mu.Lock()
	var drop []netip.Addr
	for a, until := range s.tripped {
		switch {
		case until.IsZero():
			drop = append(drop, a)
			until = now.Add(s.cfg.MaxPrefixesRestart)
			s.tripped[a] = until
		case !now.Before(until):
			delete(s.tripped, a)
			readmit = true
			s.log.Info("re-admitting BGP peer after its maximum-prefix penalty", "peer", a)
			continue
		}
		if next.IsZero() || until.Before(next) {
			next = until
		}
	}
	srv := s.srv
	s.mu.Unlock()
	for _, a := range drop {
		s.log.Error("BGP peer announced more than the maximum number of prefixes: session and routes dropped",
			"peer", a, "max", s.cfg.MaxPrefixes, "retryIn", s.cfg.MaxPrefixesRestart)
		s.m.maxPrefixes.WithLabelValues(a.String()).Inc()
		if err := srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: a.String()}); err != nil {
			s.log.Error("drop BGP peer", "peer", a, "err", err)
		}
		s.mu.Lock()
		delete(s.peers, a)
		delete(s.adjIn, a)
		if ss := s.sessions[a]; ss != nil {
			ss.state, ss.since, ss.eor = api.PeerState_IDLE, now, false
		}
		s.updateCountsLocked(a)
		s.mu.Unlock()
	}
	return readmit, next
}

// pathPrefixNextHop reads an IPv4 or IPv6 unicast path. Of an IPv6 path's
// next hops (global, and link-local when the peer shares a link) the global
// one is used: it names the node, and the kernel takes it as a gateway on
// the link that reaches it.
func pathPrefixNextHop(p *api.Path) (netip.Prefix, netip.Addr, error) {
	nlri, err := apiutil.GetNativeNlri(p)
	if err != nil {
		return netip.Prefix{}, netip.Addr{}, fmt.Errorf("NLRI: %w", err)
	}
	var ipp *bgp.IPAddrPrefix
	v4 := false
	switch n := nlri.(type) {
	case *bgp.IPAddrPrefix:
		ipp, v4 = n, true
	case *bgp.IPv6AddrPrefix:
		ipp = &n.IPAddrPrefix
	default:
		return netip.Prefix{}, netip.Addr{}, fmt.Errorf("NLRI %s is not IPv4 or IPv6 unicast", nlri)
	}
	a, ok := netip.AddrFromSlice(ipp.Prefix)
	if !ok {
		return netip.Prefix{}, netip.Addr{}, fmt.Errorf("NLRI %s: bad address", nlri)
	}
	if v4 {
		// Held in 16 bytes, with an IPv4 prefix length.
		a = a.Unmap()
	}
	prefix := netip.PrefixFrom(a, int(ipp.Length)).Masked()
	if p.GetIsWithdraw() {
		return prefix, netip.Addr{}, nil
	}
	attrs, err := apiutil.GetNativePathAttributes(p)
	if err != nil {
		return netip.Prefix{}, netip.Addr{}, fmt.Errorf("path attributes of %s: %w", prefix, err)
	}
	for _, at := range attrs {
		switch at := at.(type) {
		case *bgp.PathAttributeNextHop:
			if nh, ok := netip.AddrFromSlice(at.Value); ok {
				return prefix, nh.Unmap(), nil
			}
		case *bgp.PathAttributeMpReachNLRI:
			if nh, ok := netip.AddrFromSlice(at.Nexthop); ok {
				return prefix, nh.Unmap(), nil
			}
		}
	}
	return netip.Prefix{}, netip.Addr{}, fmt.Errorf("path to %s has no next hop", prefix)
}

// familyName names the family of a session with peer.
func familyName(peer netip.Addr) string {
	if peer.Is6() {
		return "ipv6"
	}
	return "ipv4"
}

// ipv6Available reports whether the host can open IPv6 sockets.
func ipv6Available() bool {
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_STREAM, 0)
	if err != nil {
		return false
	}
	_ = syscall.Close(fd)
	return true
}

func stateName(s api.PeerState_SessionState) string {
	switch s {
	case api.PeerState_IDLE:
		return "Idle"
	case api.PeerState_CONNECT:
		return "Connect"
	case api.PeerState_ACTIVE:
		return "Active"
	case api.PeerState_OPENSENT:
		return "OpenSent"
	case api.PeerState_OPENCONFIRM:
		return "OpenConfirm"
	case api.PeerState_ESTABLISHED:
		return "Established"
	}
	return "Unknown"
}
