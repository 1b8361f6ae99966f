package bgp

// The upstream speaker announces the ingress addresses to the routers in
// front of the edge hosts, so that several edges are one ingress (ECMP). It
// is a GoBGP instance of its own, separate from the speaker that learns pod
// routes from Calico: its RIB holds the announce addresses and nothing else,
// it never listens (it dials the routers), and it imports nothing. No pod
// route can leak upstream, whatever the Calico side learns, because the two
// RIBs never meet.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/anypb"
)

// UpstreamConfig configures the upstream speaker.
type UpstreamConfig struct {
	LocalAS  uint32
	RouterID netip.Addr
	// LocalAddress is the source of the sessions; invalid: the kernel
	// chooses.
	LocalAddress netip.Addr
	Peers        []UpstreamPeer
	// Addresses are host prefixes (/32, /128).
	Addresses []netip.Prefix
	// Communities (AS<<16|N) and MED are attached to every announcement.
	Communities []uint32
	MED         *uint32
	// HoldTime is proposed in OPEN (default 9s): a frozen edge keeps its
	// flows at most this long.
	HoldTime time.Duration
	// RestartTime is the graceful-restart time announced: how long the
	// routers keep the addresses routed to this edge after its session
	// closed without a NOTIFICATION. 0 means 60s; negative disables
	// graceful restart.
	RestartTime time.Duration
	// Restarting announces the restart state and forwarding bits: this run
	// took over a HAProxy that kept serving, so the routers keep the
	// addresses until our End-of-RIB.
	Restarting bool
	// OnChange, if set, is told of every announce and withdraw (the
	// daemon records Events).
	OnChange func(announced bool, reason, detail string)
	// Password resolves a password secret; nil refuses peers that need
	// one.
	Password func(ctx context.Context, ref SecretRef) (string, error)
}

// UpstreamPeer is one upstream router.
type UpstreamPeer struct {
	Address        netip.Addr
	AS             uint32
	Port           uint16
	PasswordSecret *SecretRef
}

// ParseUpstreamPeerFlag parses ADDRESS,as=N[,port=N][,password-secret=NS/NAME[/KEY]].
func ParseUpstreamPeerFlag(s string) (UpstreamPeer, error) {
	fields := strings.Split(s, ",")
	a, err := netip.ParseAddr(strings.TrimSpace(fields[0]))
	if err != nil {
		return UpstreamPeer{}, fmt.Errorf("upstream peer %q: address: %w", s, err)
	}
	p := UpstreamPeer{Address: a.Unmap()}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok {
			return UpstreamPeer{}, fmt.Errorf("upstream peer %q: option %q is not key=value", s, f)
		}
		switch k {
		case "as":
			if p.AS, err = parseAS(v); err != nil {
				return UpstreamPeer{}, fmt.Errorf("upstream peer %q: %w", s, err)
			}
		case "port":
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil || n == 0 {
				return UpstreamPeer{}, fmt.Errorf("upstream peer %q: port %q", s, v)
			}
			p.Port = uint16(n)
		case "password-secret":
			r, err := ParseSecretRef(v)
			if err != nil {
				return UpstreamPeer{}, fmt.Errorf("upstream peer %q: %w", s, err)
			}
			p.PasswordSecret = &r
		default:
			return UpstreamPeer{}, fmt.Errorf("upstream peer %q: unknown option %q (want as, port, password-secret)", s, k)
		}
	}
	if p.AS == 0 {
		return UpstreamPeer{}, fmt.Errorf("upstream peer %q: as=N is required", s)
	}
	return p, nil
}

// ParseAnnounceAddress parses IP, IP/32 or IP/128.
func ParseAnnounceAddress(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("announce address %q: %w", s, err)
		}
		if !p.IsSingleIP() {
			return netip.Prefix{}, fmt.Errorf("announce address %q: want one address (/32 or /128)", s)
		}
		return netip.PrefixFrom(p.Addr().Unmap(), p.Addr().Unmap().BitLen()), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("announce address %q: %w", s, err)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ParseCommunity parses AS:N (both 16 bits).
func ParseCommunity(s string) (uint32, error) {
	hi, lo, ok := strings.Cut(strings.TrimSpace(s), ":")
	h, err1 := strconv.ParseUint(hi, 10, 16)
	l, err2 := strconv.ParseUint(lo, 10, 16)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("community %q: want AS:N, both 0-65535", s)
	}
	return uint32(h<<16 | l), nil
}

// Validate fills in defaults and reports every problem at once.
func (c *UpstreamConfig) Validate() error {
	var errs []error
	if c.LocalAS == 0 {
		errs = append(errs, errors.New("local AS is required"))
	}
	if !c.RouterID.Is4() || c.RouterID.IsUnspecified() {
		errs = append(errs, errors.New("router ID (an IPv4 address) is required"))
	}
	if c.HoldTime == 0 {
		c.HoldTime = 9 * time.Second
	}
	if c.HoldTime < 3*time.Second || c.HoldTime%time.Second != 0 {
		errs = append(errs, fmt.Errorf("upstream hold time %s: want whole seconds, at least 3s", c.HoldTime))
	}
	if c.RestartTime == 0 {
		c.RestartTime = 60 * time.Second
	}
	if c.RestartTime > 4095*time.Second || (c.RestartTime > 0 && c.RestartTime%time.Second != 0) {
		errs = append(errs, fmt.Errorf("upstream restart time %s: whole seconds, at most 4095s", c.RestartTime))
	}
	seen := map[netip.Addr]bool{}
	for _, p := range c.Peers {
		if seen[p.Address] {
			errs = append(errs, fmt.Errorf("upstream peer %s configured twice", p.Address))
		}
		seen[p.Address] = true
		if p.AS == 0 {
			errs = append(errs, fmt.Errorf("upstream peer %s: AS is required", p.Address))
		}
		if p.PasswordSecret != nil && c.Password == nil {
			errs = append(errs, fmt.Errorf("upstream peer %s: password secret %s needs a Kubernetes connection", p.Address, p.PasswordSecret))
		}
	}
	for _, a := range c.Addresses {
		if !a.IsSingleIP() {
			errs = append(errs, fmt.Errorf("announce address %s: want a /32 or /128", a))
		}
	}
	return errors.Join(errs...)
}

// Withdraw reasons, the label values of perimeter_bgp_withdrawals_total.
const (
	ReasonStarting     = "starting"
	ReasonNotReady     = "not-ready"
	ReasonHAProxyDown  = "haproxy-down"
	ReasonBindsSilent  = "binds-not-answering"
	ReasonSyncStalled  = "sync-stalled"
	ReasonDraining     = "draining"
	ReasonNoUpstream   = "no-upstream-peer"
	announcedByHealthy = "serving"
)

// WithdrawReasons lists every reason, for metrics initialisation.
var WithdrawReasons = []string{ReasonNotReady, ReasonHAProxyDown, ReasonBindsSilent, ReasonSyncStalled, ReasonDraining}

// Upstream is the speaker that announces the ingress addresses.
type Upstream struct {
	cfg UpstreamConfig
	log *slog.Logger
	m   *upstreamMetrics

	mu        sync.Mutex
	srv       *server.BgpServer
	announced bool
	reason    string // why withdrawn, or announcedByHealthy
	detail    string
	since     time.Time
	uuids     map[netip.Prefix][]byte
	sessions  map[netip.Addr]*session
	problems  map[netip.Addr]string
	// transitions counts announce and withdraw changes, for tests and
	// status.
	transitions int

	handOver atomic.Bool
}

// NewUpstream checks cfg and returns a speaker that has announced nothing.
func NewUpstream(cfg UpstreamConfig, log *slog.Logger, reg prometheus.Registerer) (*Upstream, error) {
	if log == nil {
		log = slog.Default()
	}
	cfg.Peers = slices.Clone(cfg.Peers)
	cfg.Addresses = slices.Clone(cfg.Addresses)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bgp upstream config: %w", err)
	}
	m, err := newUpstreamMetrics(reg, cfg.Addresses)
	if err != nil {
		return nil, err
	}
	return &Upstream{cfg: cfg, log: log.With("component", "bgp-upstream"), m: m,
		reason: ReasonStarting, detail: "the daemon is starting", since: time.Now(),
		uuids: map[netip.Prefix][]byte{}, sessions: map[netip.Addr]*session{}, problems: map[netip.Addr]string{}}, nil
}

// HandOver makes the coming stop leave the sessions to close with the
// process, without a NOTIFICATION: the routers' graceful-restart helper
// keeps the addresses routed here while the next daemon takes over.
func (u *Upstream) HandOver() { u.handOver.Store(true) }

// SetRestarting sets UpstreamConfig.Restarting; call it before Run.
func (u *Upstream) SetRestarting(on bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.cfg.Restarting = on
}

// Announced reports whether the addresses are announced.
func (u *Upstream) Announced() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.announced
}

// Set announces the addresses (ok) or withdraws them for reason, explained
// by detail. Repeating the current state changes nothing.
func (u *Upstream) Set(ok bool, reason, detail string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if ok {
		reason, detail = announcedByHealthy, "this edge serves"
	}
	if ok == u.announced && reason == u.reason {
		return
	}
	changed := ok != u.announced
	u.announced, u.reason, u.detail, u.since = ok, reason, detail, time.Now()
	if !changed {
		return
	}
	u.transitions++
	if u.cfg.OnChange != nil {
		u.cfg.OnChange(ok, reason, detail)
	}
	if ok {
		u.log.Info("announcing the ingress addresses", "addresses", u.cfg.Addresses)
		for _, a := range u.cfg.Addresses {
			u.m.announced.WithLabelValues(a.String()).Set(1)
		}
	} else {
		u.log.Warn("withdrawing the ingress addresses", "reason", reason, "why", detail, "addresses", u.cfg.Addresses)
		u.m.withdrawals.WithLabelValues(reason).Inc()
		for _, a := range u.cfg.Addresses {
			u.m.announced.WithLabelValues(a.String()).Set(0)
		}
	}
	if u.srv != nil {
		u.applyLocked(context.Background())
	}
}

// applyLocked makes the RIB hold the addresses exactly when announced.
func (u *Upstream) applyLocked(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, a := range u.cfg.Addresses {
		id, have := u.uuids[a]
		switch {
		case u.announced && !have:
			resp, err := u.srv.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: u.path(a)})
			if err != nil {
				u.log.Error("announce", "address", a, "err", err)
				continue
			}
			u.uuids[a] = resp.Uuid
		case !u.announced && have:
			if err := u.srv.DeletePath(ctx, &api.DeletePathRequest{TableType: api.TableType_GLOBAL, Uuid: id}); err != nil {
				u.log.Error("withdraw", "address", a, "err", err)
				continue
			}
			delete(u.uuids, a)
		}
	}
}

var ipv6Unicast = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}

func (u *Upstream) path(a netip.Prefix) *api.Path {
	nlri, _ := anypb.New(&api.IPAddressPrefix{Prefix: a.Addr().String(), PrefixLen: uint32(a.Bits())})
	origin, _ := anypb.New(&api.OriginAttribute{Origin: 0})
	attrs := []*anypb.Any{origin}
	family := ipv4Unicast
	if a.Addr().Is4() {
		nh, _ := anypb.New(&api.NextHopAttribute{NextHop: "0.0.0.0"})
		attrs = append(attrs, nh)
	} else {
		family = ipv6Unicast
		mp, _ := anypb.New(&api.MpReachNLRIAttribute{Family: family, NextHops: []string{"::"}, Nlris: []*anypb.Any{nlri}})
		attrs = append(attrs, mp)
	}
	if len(u.cfg.Communities) > 0 {
		c, _ := anypb.New(&api.CommunitiesAttribute{Communities: u.cfg.Communities})
		attrs = append(attrs, c)
	}
	if u.cfg.MED != nil {
		m, _ := anypb.New(&api.MultiExitDiscAttribute{Med: *u.cfg.MED})
		attrs = append(attrs, m)
	}
	return &api.Path{Family: family, Nlri: nlri, Pattrs: attrs}
}

// Run speaks to the upstream peers until ctx ends. A plain stop withdraws
// the addresses and sends Cease; after HandOver the sessions close with the
// process instead.
func (u *Upstream) Run(ctx context.Context) error {
	// One goroutine per server for the life of the process (GoBGP v3's
	// Serve never returns).
	srv := server.NewBgpServer(server.LoggerOption(newGoBGPLogger(u.log)))
	go srv.Serve()
	global := &api.Global{Asn: u.cfg.LocalAS, RouterId: u.cfg.RouterID.String(), ListenPort: -1}
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: global}); err != nil {
		return fmt.Errorf("start upstream BGP: %w", err)
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.StopBgp(sctx, &api.StopBgpRequest{}); err != nil {
			u.log.Warn("stop upstream BGP", "err", err)
		}
	}
	// Import nothing; export only the announce addresses (the RIB holds
	// nothing else, the policy says so anyway).
	if err := u.setPolicies(ctx, srv); err != nil {
		stop()
		return err
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	if err := srv.WatchEvent(watchCtx, &api.WatchEventRequest{Peer: &api.WatchEventRequest_Peer{}}, u.onEvent); err != nil {
		stop()
		return fmt.Errorf("watch upstream sessions: %w", err)
	}
	// Paths before peers: a restarting speaker's first UPDATEs after the
	// routers' End-of-RIB must already carry them, or the routers drop
	// what they kept for us.
	u.mu.Lock()
	u.srv = srv
	u.applyLocked(ctx)
	u.mu.Unlock()
	u.log.Info("upstream BGP speaker started", "as", u.cfg.LocalAS, "routerID", u.cfg.RouterID,
		"holdTime", u.cfg.HoldTime, "restartTime", u.cfg.RestartTime, "restarting", u.cfg.Restarting,
		"addresses", u.cfg.Addresses)

	pending := slices.Clone(u.cfg.Peers)
	retry := time.NewTicker(3 * time.Second)
	defer retry.Stop()
	for {
		pending = append(u.addPeers(ctx, srv, pending), u.stuckPeers(ctx, srv)...)
		select {
		case <-ctx.Done():
			u.mu.Lock()
			if u.handOver.Load() {
				u.srv = nil
				u.mu.Unlock()
				u.log.Info("hand-over: the upstream sessions close with the process; graceful restart keeps the addresses routed here")
				return nil
			}
			u.announced = false
			u.applyLocked(context.Background())
			u.srv = nil
			u.mu.Unlock()
			stop()
			return nil
		case <-retry.C:
		}
	}
}

func (u *Upstream) setPolicies(ctx context.Context, srv *server.BgpServer) error {
	// One prefix set per family: GoBGP refuses a mixed one.
	sets := map[string][]*api.Prefix{}
	for _, a := range u.cfg.Addresses {
		name := "announce4"
		if a.Addr().Is6() {
			name = "announce6"
		}
		sets[name] = append(sets[name], &api.Prefix{IpPrefix: a.String(), MaskLengthMin: uint32(a.Bits()), MaskLengthMax: uint32(a.Bits())})
	}
	var accept []*api.Statement
	for _, name := range []string{"announce4", "announce6"} {
		if len(sets[name]) == 0 {
			continue
		}
		if err := srv.AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: &api.DefinedSet{
			DefinedType: api.DefinedType_PREFIX, Name: name, Prefixes: sets[name]}}); err != nil {
			return fmt.Errorf("upstream prefix set: %w", err)
		}
		accept = append(accept, &api.Statement{Name: name,
			Conditions: &api.Conditions{PrefixSet: &api.MatchSet{Name: name, Type: api.MatchSet_ANY}},
			Actions:    &api.Actions{RouteAction: api.RouteAction_ACCEPT}})
	}
	var export, imp []*api.Policy
	if len(accept) > 0 {
		if err := srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: "export-announce", Statements: accept}}); err != nil {
			return fmt.Errorf("upstream export policy: %w", err)
		}
		export = []*api.Policy{{Name: "export-announce"}}
		// GoBGP's import policy also sees our own paths: take those
		// (the announce addresses) and refuse everything the peers send.
		var peers []string
		for _, p := range u.cfg.Peers {
			peers = append(peers, netip.PrefixFrom(p.Address, p.Address.BitLen()).String())
		}
		var st []*api.Statement
		if len(peers) > 0 {
			if err := srv.AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: &api.DefinedSet{
				DefinedType: api.DefinedType_NEIGHBOR, Name: "upstream-peers", List: peers}}); err != nil {
				return fmt.Errorf("upstream neighbor set: %w", err)
			}
			st = append(st, &api.Statement{Name: "from-peers",
				Conditions: &api.Conditions{NeighborSet: &api.MatchSet{Name: "upstream-peers", Type: api.MatchSet_ANY}},
				Actions:    &api.Actions{RouteAction: api.RouteAction_REJECT}})
		}
		for _, a := range accept {
			st = append(st, &api.Statement{Name: "own-" + a.Name, Conditions: a.Conditions, Actions: a.Actions})
		}
		if err := srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: "import-own", Statements: st}}); err != nil {
			return fmt.Errorf("upstream import policy: %w", err)
		}
		imp = []*api.Policy{{Name: "import-own"}}
	}
	for _, a := range []*api.PolicyAssignment{
		{Name: "global", Direction: api.PolicyDirection_IMPORT, Policies: imp, DefaultAction: api.RouteAction_REJECT},
		{Name: "global", Direction: api.PolicyDirection_EXPORT, Policies: export, DefaultAction: api.RouteAction_REJECT},
	} {
		if err := srv.AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: a}); err != nil {
			return fmt.Errorf("assign upstream policy: %w", err)
		}
	}
	return nil
}

// addPeers configures peers and returns those that must wait (a password
// secret not readable yet).
// stuckIdle is how long a session may stay Idle: GoBGP leaves Idle after
// its idle hold time (5 s at most with our timers) to dial again.
const stuckIdle = 12 * time.Second

// stuckPeers deletes the peers whose session has stayed Idle longer than
// stuckIdle and returns them, to be added again. GoBGP can leave a session
// Idle for good after a hold-timer expiry seen from both sides at once (an
// edge thawed after a freeze), and an edge that never dials again never
// serves again.
func (u *Upstream) stuckPeers(ctx context.Context, srv *server.BgpServer) []UpstreamPeer {
	u.mu.Lock()
	var stuck []UpstreamPeer
	for _, p := range u.cfg.Peers {
		if s := u.sessions[p.Address]; s != nil && s.state == api.PeerState_IDLE && time.Since(s.since) > stuckIdle {
			stuck = append(stuck, p)
			delete(u.sessions, p.Address)
		}
	}
	u.mu.Unlock()
	var readd []UpstreamPeer
	for _, p := range stuck {
		u.log.Warn("upstream session stuck in Idle: adding the peer again", "peer", p.Address, "after", stuckIdle)
		if err := srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: p.Address.String()}); err != nil {
			u.setProblem(p.Address, err.Error())
			continue
		}
		readd = append(readd, p)
	}
	return readd
}

func (u *Upstream) addPeers(ctx context.Context, srv *server.BgpServer, peers []UpstreamPeer) []UpstreamPeer {
	var wait []UpstreamPeer
	for _, p := range peers {
		var pw string
		if p.PasswordSecret != nil {
			var err error
			if pw, err = u.cfg.Password(ctx, *p.PasswordSecret); err != nil || pw == "" {
				u.setProblem(p.Address, fmt.Sprintf("waiting for password secret %s: %v", p.PasswordSecret, err))
				wait = append(wait, p)
				continue
			}
		}
		if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: u.apiPeer(p, pw)}); err != nil {
			u.setProblem(p.Address, err.Error())
			wait = append(wait, p)
			continue
		}
		u.setProblem(p.Address, "")
	}
	return wait
}

func (u *Upstream) setProblem(a netip.Addr, msg string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if msg == "" {
		delete(u.problems, a)
	} else {
		if u.problems[a] != msg {
			u.log.Warn("upstream peer not configured", "peer", a, "why", msg)
		}
		u.problems[a] = msg
	}
}

func (u *Upstream) apiPeer(p UpstreamPeer, password string) *api.Peer {
	port := uint32(p.Port)
	if port == 0 {
		port = 179
	}
	family := ipv4Unicast
	if p.Address.Is6() {
		family = ipv6Unicast
	}
	gr := u.cfg.RestartTime > 0
	peer := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Address.String(), PeerAsn: p.AS, AuthPassword: password, Description: "upstream"},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime: uint64(u.cfg.HoldTime.Seconds()), KeepaliveInterval: uint64(max(1, u.cfg.HoldTime.Seconds()/3)),
			ConnectRetry: 2, IdleHoldTimeAfterReset: 1,
		}},
		Transport: &api.Transport{RemotePort: port, PassiveMode: false},
		AfiSafis: []*api.AfiSafi{{
			Config:            &api.AfiSafiConfig{Family: family, Enabled: true},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: gr}},
		}},
	}
	if gr {
		peer.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: uint32(u.cfg.RestartTime.Seconds()),
			LocalRestarting: u.cfg.Restarting, DeferralTime: 10}
	}
	if u.cfg.LocalAddress.IsValid() && u.cfg.LocalAddress.Is4() == p.Address.Is4() {
		peer.Transport.LocalAddress = u.cfg.LocalAddress.String()
	}
	return peer
}

func (u *Upstream) onEvent(r *api.WatchEventResponse) {
	pe := r.GetPeer()
	if pe == nil || pe.Type != api.WatchEventResponse_PeerEvent_STATE || pe.Peer == nil || pe.Peer.State == nil {
		return
	}
	a, err := netip.ParseAddr(pe.Peer.State.NeighborAddress)
	if err != nil {
		return
	}
	a = a.Unmap()
	st := pe.Peer.State.SessionState
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.sessions[a]
	if s == nil {
		s = &session{}
		u.sessions[a] = s
	}
	if s.state != st {
		if st == api.PeerState_ESTABLISHED || s.state == api.PeerState_ESTABLISHED {
			u.log.Info("upstream session", "peer", a, "state", stateName(st))
		}
		s.state, s.since = st, time.Now()
	}
	up := 0.0
	if st == api.PeerState_ESTABLISHED {
		up = 1
	}
	u.m.peerUp.WithLabelValues(a.String()).Set(up)
}

type upstreamMetrics struct {
	announced   *prometheus.GaugeVec
	withdrawals *prometheus.CounterVec
	peerUp      *prometheus.GaugeVec
}

func newUpstreamMetrics(reg prometheus.Registerer, addrs []netip.Prefix) (*upstreamMetrics, error) {
	m := &upstreamMetrics{
		announced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "perimeter_bgp_announced",
			Help: "1 while the ingress address is announced to the upstream peers.",
		}, []string{"address"}),
		withdrawals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "perimeter_bgp_withdrawals_total",
			Help: "Withdrawals of the ingress addresses by reason.",
		}, []string{"reason"}),
		peerUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "perimeter_bgp_upstream_peer_up",
			Help: "1 when the session with the upstream peer is established.",
		}, []string{"peer"}),
	}
	for _, a := range addrs {
		m.announced.WithLabelValues(a.String())
	}
	for _, r := range WithdrawReasons {
		m.withdrawals.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.announced, m.withdrawals, m.peerUp} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register upstream BGP metrics: %w", err)
			}
		}
	}
	return m, nil
}
