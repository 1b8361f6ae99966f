// Package app wires the daemon together and owns its start-up and shutdown
// order: API server first (fail fast), HAProxy next, then the sync loop that
// feeds one into the other.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/perimeter-ingress/perimeter/internal/bgp"
	"github.com/perimeter-ingress/perimeter/internal/config"
	"github.com/perimeter-ingress/perimeter/internal/haproxy"
	"github.com/perimeter-ingress/perimeter/internal/kube"
	"github.com/perimeter-ingress/perimeter/internal/metrics"
	"github.com/perimeter-ingress/perimeter/internal/model"
	"github.com/perimeter-ingress/perimeter/internal/syngate"
	"github.com/perimeter-ingress/perimeter/internal/systemd"
)

// Version is set at build time.
var Version = "dev"

// ModelOptions derives the model's options from the daemon's.
func ModelOptions(c *config.Config) model.Options {
	return model.Options{
		IngressClass:          c.IngressClass,
		EmptyIngressClass:     c.EmptyIngressClass,
		DefaultBackendService: c.DefaultBackendService,
		NamespaceWhitelist:    c.NamespaceWhitelist,
		NamespaceBlacklist:    c.NamespaceBlacklist,
		ConfigSnippets:        c.SnippetKinds(),
		DefaultSSLCertificate: c.DefaultSSLCertificate,

		AllowCrossNamespaceHosts: c.AllowCrossNamespaceHosts,
		LocalAddresses:           localAddresses(),
		DisableExternalName:      c.DisableServiceExternalName,
		GatewayController:        c.GatewayController,
		GatewayHTTPPort:          gatewayHTTPPort(c),
		GatewayHTTPSPort:         gatewayHTTPSPort(c),
		GatewayListenerPorts:     gatewayListenerPorts(c),
		GatewayAddresses:         gatewayAddresses(c),
		ReservedPorts:            reservedPorts(c),
	}
}

// gatewayListenerPorts are --gateway-listener-ports, which Validate
// checked.
func gatewayListenerPorts(c *config.Config) []model.PortRange {
	rs, _ := config.PortRanges(c.GatewayListenerPorts)
	out := make([]model.PortRange, 0, len(rs))
	for _, r := range rs {
		out = append(out, model.PortRange{From: r[0], To: r[1]})
	}
	return out
}

// gatewayAddresses are --gateway-addresses, which Validate checked.
func gatewayAddresses(c *config.Config) []netip.Addr {
	pool, _ := config.AddressPool(c.GatewayAddresses)
	return pool
}

// reservedPorts are the ports HAProxy serves besides the http and https
// frontends: Gateway listeners may not take them.
func reservedPorts(c *config.Config) []int {
	var out []int
	for _, p := range []int{c.StatsBindPort, c.HealthzBindPort} {
		if p > 0 {
			out = append(out, p)
		}
	}
	return out
}

// gatewayHTTPPort is the port Gateway HTTP listeners must name: the http
// frontend's, 0 (any) when HTTP is disabled and nothing serves them.
func gatewayHTTPPort(c *config.Config) int {
	if c.DisableHTTP {
		return 0
	}
	return c.HTTPBindPort
}

// gatewayHTTPSPort is the port HTTPS and TLS listeners must name: the https
// frontend's, -1 when HTTPS is disabled and nothing serves them.
func gatewayHTTPSPort(c *config.Config) int {
	if c.DisableHTTPS {
		return -1
	}
	return c.HTTPSBindPort
}

// localAddresses are the edge host's own addresses, read when the options
// are (at start and on reload): no endpoint may point at them.
func localAddresses() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}

// WatchOptions derives what the informers watch from the daemon's options.
func WatchOptions(c *config.Config) kube.WatchOptions {
	return kube.WatchOptions{
		ConfigMap:          c.ConfigMap,
		ErrorFiles:         c.ConfigMapErrorFiles,
		TCPServices:        c.ConfigMapTCPServices,
		PatternFiles:       c.ConfigMapPatternFiles,
		NamespaceWhitelist: c.NamespaceWhitelist,
		NamespaceBlacklist: c.NamespaceBlacklist,

		DefaultSSLCertificate:  c.DefaultSSLCertificate,
		MaxSecrets:             c.MaxWatchedSecrets,
		MaxSecretsPerNamespace: c.MaxWatchedSecretsPerNamespace,
		CoalesceSecrets:        kube.DefaultCoalesceSecrets,
		Resync:                 c.CacheResyncPeriod,
		ExternalNames:          !c.DisableServiceExternalName,
		ExternalNameResolver:   c.ExternalNameResolver,
		ExternalNameInterval:   c.ExternalNameInterval,
	}
}

// HAProxyOptions derives the driver's options from the daemon's.
func HAProxyOptions(c *config.Config, log *slog.Logger) haproxy.Options {
	return haproxy.Options{
		Program:           c.Program,
		ConfigDir:         c.ConfigDir,
		RuntimeDir:        c.RuntimeDir,
		HTTPBindPort:      c.HTTPBindPort,
		HTTPSBindPort:     httpsPort(c),
		IPv4BindAddress:   c.IPv4BindAddress,
		IPv6BindAddress:   c.IPv6BindAddress,
		DisableHTTP:       c.DisableHTTP,
		DisableIPv4:       c.DisableIPv4,
		DisableIPv6:       c.DisableIPv6,
		StatsBindAddress:  c.StatsBindAddress,
		StatsBindPort:     c.StatsBindPort,
		HealthzBindPort:   c.HealthzBindPort,
		TrustForwardedFor: c.TrustForwardedFor,
		AnnounceAddresses: announceAddrs(c),
		MinReloadInterval: c.SyncPeriod,
		MaxConfigSize:     c.MaxConfigSize,
		Logger:            log.With("component", "haproxy"),
	}
}

// announceAddrs are the announce addresses without their prefix length.
func announceAddrs(c *config.Config) []string {
	ps, _ := AnnounceAddresses(c)
	var out []string
	for _, p := range ps {
		out = append(out, p.Addr().String())
	}
	return out
}

func httpsPort(c *config.Config) int {
	if c.DisableHTTPS {
		return 0
	}
	return c.HTTPSBindPort
}

// Run is the daemon. It returns nil after a clean shutdown (ctx cancelled)
// and an error with one clear line when it cannot start or keep serving. A
// value on handOver (nil: never) makes it exit in hand-over mode
// (handover.go).
func Run(ctx context.Context, c *config.Config, log *slog.Logger, handOver <-chan os.Signal) error {
	if err := c.Validate(); err != nil {
		return err
	}
	upCfg, err := UpstreamConfig(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var handingOver atomic.Bool
	if handOver != nil {
		go func() {
			select {
			case <-handOver:
				handingOver.Store(true)
				log.Info("hand-over restart: exiting with HAProxy serving and BGP routes in place for the next daemon")
				cancel(errHandOver)
			case <-ctx.Done():
			}
		}()
	}

	// Bind the controller port before anything slow, so a port in use is a
	// start-up error, not a silent missing /readyz.
	var ln net.Listener
	if c.ControllerPort != 0 {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(c.ControllerBindAddress, strconv.Itoa(c.ControllerPort)))
		if err != nil {
			return fmt.Errorf("controller port: %w", err)
		}
		defer ln.Close()
	}

	rc, cs, err := kube.Connect(ctx, c.Kubeconfig, "perimeter/"+Version)
	if err != nil {
		return err
	}
	// After the checks that can fail at start: their error is the one line
	// a failed start prints.
	tuneMemory(log)
	hopts := HAProxyOptions(c, log)
	if limit, err := haproxy.RaiseFDLimit(); err != nil {
		log.Warn("file descriptor limit", "limit", limit, "err", err)
	} else {
		hopts.FDLimit = limit
		conns, slots := haproxy.FDCapacity(limit)
		log.Info("file descriptor limit: HAProxy sizes maxconn and health checks to it", "limit", limit,
			"max_connections", conns, "max_checked_server_slots", slots)
	}
	drv, err := haproxy.New(hopts)
	if err != nil {
		return err
	}
	m := metrics.New()
	for _, result := range haproxy.Results {
		for _, reason := range haproxy.ReloadReasons {
			m.Reloads.WithLabelValues(reason, result)
		}
		for _, kind := range haproxy.RuntimeKinds {
			m.RuntimeOps.WithLabelValues(kind, result)
		}
	}
	w := kube.NewWatcher(cs, WatchOptions(c), log.With("component", "kube"))
	gwcs, err := gwclient.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("gateway API client: %w", err)
	}
	w.WatchGatewayAPI(gwcs, cs.Discovery(), kube.DefaultGatewayDiscovery)
	problems, stopEvents := kube.NewProblems(cs, w.Lookup, log.With("component", "events"))
	defer stopEvents()

	var ready atomic.Bool
	// busySince is when the sync loop started its current pass (0: idle). A
	// pass stuck for longer than stallAfter (an API or HAProxy call that
	// never returns) fails /healthz and stops the systemd watchdog pings,
	// so the daemon gets restarted.
	var busySince atomic.Int64
	alive := func() bool {
		t := busySince.Load()
		return t == 0 || time.Since(time.Unix(0, t)) < stallAfter
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel(nil)

	mux := controllerMux(m, &ready, alive)
	if c.Pprof {
		servePprof(mux)
	}
	// The speaker starts before HAProxy: routes to the pods should exist by
	// the time the first configuration is served. It stops last, after
	// HAProxy, so no request is sent towards a pod whose route is gone.
	if c.BGP.Enabled() {
		sp, err := startBGP(c, rc, cs, m.Registry, log)
		if err != nil {
			return err
		}
		mux.Handle("/debug/bgp", sp.Handler())
		bctx, bcancel := context.WithCancel(context.WithoutCancel(ctx))
		bdone := make(chan struct{})
		go func() {
			defer close(bdone)
			if err := runBGP(bctx, sp); err != nil {
				cancel(err)
			}
		}()
		defer func() {
			if handingOver.Load() {
				sp.KeepRoutesOnExit()
			}
			bcancel()
			<-bdone
		}()
	}

	// The ingress addresses (ha.md): on lo before HAProxy binds them; the
	// upstream speaker stops after HAProxy, the addresses go last.
	if len(upCfg.Addresses) > 0 {
		// A daemon that died while draining left its gate closed. The
		// qdiscs the gate needs go in now, while adding them costs no
		// flow (syngate.Prepare).
		if opened, err := syngate.Open(); err != nil {
			log.Warn("SYN gate left by an earlier run", "err", err)
		} else if len(opened) > 0 {
			log.Info("SYN gate left by an earlier run opened", "links", opened)
		}
		if added, err := syngate.Prepare(); err != nil {
			log.Warn("SYN gate: clsact qdisc not added; a stop will lose the connections opened while it drains", "err", err)
		} else if len(added) > 0 {
			log.Info("SYN gate: clsact qdisc added", "links", added)
		}
		if err := addLoopback(upCfg.Addresses, log); err != nil {
			return err
		}
		defer func() {
			if opened, err := syngate.Open(); err != nil {
				log.Error("SYN gate not opened", "err", err)
			} else if len(opened) > 0 {
				log.Info("SYN gate opened", "links", opened)
			}
			if !handingOver.Load() {
				removeLoopback(upCfg.Addresses, log)
			}
		}()
	}
	var up *bgp.Upstream
	var upDone chan struct{} // closed when up.Run returns; nil until it runs
	upCtx, upCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer upCancel()
	if len(upCfg.Peers) > 0 {
		upCfg.Password = secretPassword(cs)
		if c.ElectionID != "" {
			onChange, stopEvents := kube.AnnounceEvents(cs, c.ElectionNamespace, c.ElectionID)
			defer stopEvents()
			upCfg.OnChange = onChange
		}
		if up, err = bgp.NewUpstream(upCfg, log, m.Registry); err != nil {
			return err
		}
		mux.Handle("/debug/bgp/upstream", up.Handler())
		defer func() {
			if upDone == nil {
				return
			}
			if handingOver.Load() {
				up.HandOver()
			}
			upCancel()
			<-upDone
		}()
	}

	if ln != nil {
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				cancel(fmt.Errorf("controller server: %w", err))
			}
		}()
		go func() {
			<-ctx.Done()
			sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer scancel()
			_ = srv.Shutdown(sctx)
		}()
	}

	// HAProxy runs until the loop below ends; its own shutdown waits for the
	// processes to be gone so that no HAProxy outlives the daemon.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	started := make(chan struct{})
	hdone := make(chan error, 1)
	go func() { hdone <- drv.Run(hctx, started) }()
	defer func() {
		if handingOver.Load() {
			drv.HandOver()
		}
		hcancel()
		if err := <-hdone; err != nil && !errors.Is(err, context.Canceled) {
			log.Error("haproxy stop", "err", err)
		}
	}()
	// On a stop the edge stops taking new connections, the addresses are
	// withdrawn once the ones it has are closed, and HAProxy keeps serving
	// for --shutdown-drain while the routers move the flows (gate.drain).
	var g *gate
	gateDone := make(chan struct{})
	gctx, gateCancel := context.WithCancel(ctx)
	defer func() {
		gateCancel()
		if g == nil {
			return
		}
		<-gateDone
		if !handingOver.Load() {
			g.drain(c.BGP.ShutdownDrain, drv, log)
		}
	}()
	select {
	case <-started:
	case err := <-hdone:
		hdone <- err
		return fmt.Errorf("haproxy: %w", err)
	case <-ctx.Done():
		return nil
	}
	if up != nil {
		// A HAProxy handed over by the previous daemon serves: ask the
		// routers to keep the addresses until our End-of-RIB.
		up.SetRestarting(drv.Adopted() && upCfg.RestartTime > 0)
		g = newGate(up, drv, &ready, alive, c, upCfg.Addresses)
		g.update()
		upDone = make(chan struct{})
		go func() {
			defer close(upDone)
			if err := up.Run(upCtx); err != nil {
				cancel(fmt.Errorf("bgp upstream: %w", err))
			}
		}()
		go func() { defer close(gateDone); g.run(gctx) }()
	}
	go func() {
		select {
		case err := <-hdone:
			hdone <- err
			if err != nil && !errors.Is(err, context.Canceled) {
				cancel(fmt.Errorf("haproxy: %w", err))
			}
		case <-hctx.Done():
		}
	}()

	if err := w.Start(ctx); err != nil {
		if ctx.Err() != nil {
			return causeOrNil(ctx)
		}
		return err
	}
	log.Info("caches synced", "objects", w.Sizes())
	go systemd.Watchdog(ctx, alive)

	opts := ModelOptions(c)
	if opts.DefaultCertificate, err = selfSignedCertificate(time.Now()); err != nil {
		return err
	}
	if c.DefaultSSLCertificate == "" {
		log.Info("generated a self-signed default certificate", "subject", "CN="+defaultCertificateCN,
			"note", "served to HTTPS clients whose SNI matches no Ingress; set --default-ssl-certificate or the ConfigMap's ssl-certificate to replace it")
	}
	var status *kube.StatusWriter
	if !c.DisableIngressStatusUpdate {
		addrs := c.PublishAddresses
		if len(addrs) == 0 && c.PublishService != "" {
			if addrs, err = publishServiceAddresses(ctx, cs, c.PublishService); err != nil {
				log.Warn("Ingress status falls back to the default address", "err", err)
			}
		}
		if len(addrs) == 0 {
			// Several edges are one ingress: its addresses, not a host's.
			addrs = announceAddrs(c)
		}
		if len(addrs) == 0 {
			if a := kube.DefaultPublishAddress(c.IPv4BindAddress); a != "" {
				addrs = []string{a}
			}
		}
		scs, err := kube.StatusClient(rc)
		if err != nil {
			return err
		}
		status = kube.NewStatusWriter(scs, w, kube.StatusOptions{
			Addresses: addrs, ElectionID: c.ElectionID, ElectionNamespace: c.ElectionNamespace,
			ClearOnShutdown: c.UpdateStatusOnShutdown,
			Gateway:         gwcs,
			OnLeading: func(on bool) {
				if on {
					m.StatusLeader.Set(1)
				} else {
					m.StatusLeader.Set(0)
				}
			},
		}, log.With("component", "status"))
		statusDone := make(chan struct{})
		go func() {
			defer close(statusDone)
			if err := status.Run(ctx); err != nil {
				log.Error("ingress status", "err", err)
			}
		}()
		// Clearing status on shutdown must finish before the daemon exits.
		defer func() { cancel(nil); <-statusDone }()
	}

	l := &loop{c: c, log: log, w: w, drv: drv, m: m, problems: problems, opts: opts, status: status, busySince: &busySince}
	if r := reloadRequests(ctx); r != nil {
		l.reconf = make(chan model.Options, 1)
		go r.serve(ctx, c, &ready, l.reconf, log)
	}
	err = l.run(ctx, func() {
		if !ready.Swap(true) {
			m.Ready.Set(1)
			log.Info("ready: HAProxy serves the first full configuration")
			systemd.Ready("serving")
		}
	})
	systemd.Stopping()
	if err != nil {
		return err
	}
	return causeOrNil(ctx)
}

func causeOrNil(ctx context.Context) error {
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, errHandOver) {
		return err
	}
	return nil
}

// stallAfter is how long one sync pass may take before the daemon counts as
// stuck; a reload at 5,000 backends takes well under a second.
const stallAfter = 2 * time.Minute

func controllerMux(m *metrics.Daemon, ready *atomic.Bool, alive func() bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !alive() {
			http.Error(w, "sync loop stalled", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready: caches syncing or HAProxy not serving the first configuration", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	return mux
}

// loop is the one goroutine that turns cache changes into HAProxy state.
type loop struct {
	c        *config.Config
	log      *slog.Logger
	w        *kube.Watcher
	drv      *haproxy.Driver
	m        *metrics.Daemon
	problems *kube.Problems
	opts     model.Options
	status   *kube.StatusWriter // nil with --disable-ingress-status-update
	// busySince is set while a pass runs, for the liveness check.
	busySince *atomic.Int64
	// prev is the last model result, from which an EndpointSlice-only
	// change is computed without a full Build.
	prev *model.Desired
	// reconf brings the model options of a reloaded configuration file
	// (nil: no reloads).
	reconf chan model.Options
	// everServed: a full configuration was served once.
	everServed bool
	// reported is the model's problem list last reported, reportedExtra
	// whether the driver added to it.
	reported      []model.Problem
	reportedExtra bool
	// sizesStale: a pass ran since the cache size metrics were last set.
	sizesStale bool
	// secretRefs is the list last given to WatchSecrets.
	secretRefs []string
	// heavy: the last pass built the model afresh or reloaded HAProxy,
	// leaving much garbage behind (rel).
	heavy bool
	rel   *releaser
}

// sameSlice reports whether a and b are the very same slice.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// Failed passes are retried after minApplyRetry, doubling up to
// maxApplyRetry: a failure no single object explains (HAProxy out of file
// descriptors or memory, a port taken) does not go away by retrying every
// second, and each retry of a large configuration costs seconds of CPU and
// a reload attempt.
const (
	minApplyRetry = time.Second
	maxApplyRetry = 30 * time.Second
)

func applyRetry(failures int) time.Duration {
	d := minApplyRetry
	for i := 1; i < failures && d < maxApplyRetry; i++ {
		d *= 2
	}
	return min(d, maxApplyRetry)
}

func (l *loop) run(ctx context.Context, onServing func()) error {
	var retry <-chan time.Time
	failures := 0
	sizes := time.NewTicker(time.Second)
	defer sizes.Stop()
	if l.rel == nil {
		l.rel = newReleaser()
	}
	var counting atomic.Bool
	release := time.NewTimer(time.Hour)
	release.Stop()
	defer release.Stop()
	pending := true // the first pass applies the initial state
	prepare := false
	for {
		// While failing, changes wait for the retry: they rarely cure
		// what failed, and would make the retries as frequent as they are.
		if pending && (failures == 0 || retry == nil) {
			pending = false
			start := time.Now()
			l.busySince.Store(start.UnixNano())
			l.heavy = false
			res, err := l.sync(ctx)
			l.busySince.Store(0)
			if wait := l.rel.passed(l.heavy); wait > 0 {
				release.Reset(wait)
			}
			if err != nil {
				failures++
				wait := applyRetry(failures)
				l.m.ApplyFailures.Set(float64(failures))
				served := "the last good configuration keeps serving"
				if !l.drv.Serving() || !l.everServed {
					served = "nothing served yet; not ready"
				}
				l.log.Error("apply failed; "+served, "err", err, "failures", failures, "retry_in", wait)
				systemd.Status(fmt.Sprintf("apply failing (%d in a row, retry in %s; %s): %v", failures, wait, served, err))
				retry = time.After(wait)
			} else {
				if failures > 0 {
					l.log.Info("apply recovered", "after_failures", failures)
					systemd.Status("serving")
					failures = 0
					l.m.ApplyFailures.Set(0)
				}
				l.m.SyncSeconds.Observe(time.Since(start).Seconds())
				if res.RetryAfter > 0 {
					retry = time.After(res.RetryAfter)
				}
				if l.drv.Serving() && res.RetryAfter == 0 {
					l.everServed = true
					onServing()
				}
				prepare = true
			}
		}
		// Between changes, the copies the next new host would make while
		// it waits are made ahead (model.Prepare); a change that came
		// meanwhile goes first.
		if prepare {
			prepare = false
			select {
			case <-l.w.Changed():
				pending = true
				continue
			default:
				if l.prev != nil {
					model.Prepare(l.prev)
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-l.w.Changed():
			pending = true
		case <-retry:
			retry = nil
			pending = true
		case <-release.C:
			l.rel.due(func() {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				l.log.Info("memory returned to the system", "heap_live_bytes", ms.HeapAlloc, "heap_held_bytes", ms.HeapSys-ms.HeapReleased)
			})
		case <-sizes.C:
			// Counting lists every cached key, under the caches'
			// locks: apart from the loop, so that a change arriving
			// meanwhile does not wait for it.
			if l.sizesStale && counting.CompareAndSwap(false, true) {
				l.sizesStale = false
				go func() {
					defer counting.Store(false)
					for k, n := range l.w.Sizes() {
						l.m.CacheObjects.WithLabelValues(k).Set(float64(n))
					}
				}()
			}
		case o := <-l.reconf:
			// The certificate generated at start stays: a new one
			// would reload HAProxy for nothing.
			o.DefaultCertificate = l.opts.DefaultCertificate
			l.opts = o
			l.prev = nil // a full Build
			pending = true
		}
	}
}

func (l *loop) sync(ctx context.Context) (haproxy.Result, error) {
	delta := l.w.TakeDelta()
	var want *model.Desired
	start := time.Now()
	if !delta.Other && l.prev != nil {
		// Only Ingresses or endpoints moved: at thousands of Ingresses a
		// full Build, or even a copy of every cached object, would delay
		// a new host or new server addresses by tens of milliseconds. The
		// changed objects are all the model needs to see.
		ok := true
		want = l.prev
		if delta.Ingresses || len(delta.ServiceKeys) > 0 {
			c := model.Change{Services: delta.ServiceKeys, Lookup: l.w.EndpointsSnapshot}
			if delta.Ingresses {
				c.Ingresses = l.w.ChangedIngresses(delta.IngressKeys)
			}
			want, ok = model.TryUpdate(want, c, l.opts)
			if ok {
				l.log.Debug("ingresses updated", "ingresses", len(delta.IngressKeys), "services", len(delta.ServiceKeys),
					"backends", len(want.Backends)-len(l.prev.Backends), "took", time.Since(start))
			}
		}
		if ok && len(delta.Services) > 0 {
			want, ok = model.TryRefreshEndpoints(want, l.w.EndpointsSnapshot(delta.Services), l.opts, delta.Services)
			if ok {
				l.log.Debug("endpoints refreshed", "services", len(delta.Services), "took", time.Since(start))
			}
		}
		if !ok {
			want = nil
		}
	}
	if want == nil {
		snap, more := l.w.SnapshotDelta()
		delta.Other = delta.Other || more.Other
		delta.Ingresses = delta.Ingresses || more.Ingresses
		for k := range more.Services {
			if delta.Services == nil {
				delta.Services = map[model.ServiceKey]bool{}
			}
			delta.Services[k] = true
		}
		for k := range more.ServiceKeys {
			if delta.ServiceKeys == nil {
				delta.ServiceKeys = map[model.ServiceKey]bool{}
			}
			delta.ServiceKeys[k] = true
		}
		switch {
		case delta.Other || l.prev == nil:
			want = model.Build(snap, l.opts)
			l.heavy = true
			l.log.Debug("model built", "took", time.Since(start))
		default:
			want = l.prev
			if delta.Ingresses || len(delta.ServiceKeys) > 0 {
				want = model.UpdateIngresses(want, snap, l.opts)
			}
			if len(delta.Services) > 0 {
				want = model.RefreshEndpoints(want, snap, l.opts, delta.Services)
			}
			l.log.Debug("model updated from a snapshot", "ingresses", delta.Ingresses, "services", len(delta.ServiceKeys), "endpoints", len(delta.Services), "took", time.Since(start))
		}
	}
	// Incremental passes keep the very same list when no reference
	// changed: nothing to look at then, however many Secrets there are.
	if !sameSlice(want.SecretRefs, l.secretRefs) && l.w.WatchSecrets(want.SecretRefs) {
		// Newly referenced Secrets are now listed as loading: build
		// again so their absence is not reported as a problem.
		want = model.Build(l.w.Snapshot(), l.opts)
		l.heavy = true
	}
	l.secretRefs = want.SecretRefs
	l.prev = want
	res, err := l.drv.Apply(ctx, want)
	// An unchanged list of problems (the same slice, as incremental
	// updates keep it) has nothing new to report.
	if !sameSlice(want.Problems, l.reported) || len(res.Dropped)+len(res.Quarantined) > 0 || l.reportedExtra {
		l.problems.Report(slices.Concat(want.Problems, res.Dropped, res.Quarantined))
		l.reported, l.reportedExtra = want.Problems, len(res.Dropped)+len(res.Quarantined) > 0
	}
	// Values the driver dropped were rejected by validation too, only
	// later; quarantine is what HAProxy itself refused.
	l.m.Problems.Set(float64(len(want.Problems) + len(res.Dropped)))
	l.m.Quarantined.Set(float64(len(res.Quarantined)))
	// Counting the caches lists every key: at most once a second (run).
	l.sizesStale = true
	for kind, n := range res.RuntimeOpsByKind {
		l.m.RuntimeOps.WithLabelValues(kind, res.RuntimeResult).Add(float64(n))
	}
	l.heavy = l.heavy || res.Reloaded
	switch {
	case res.Reloaded:
		l.m.Reloads.WithLabelValues(res.ReloadReason, haproxy.ResultOK).Inc()
	case err != nil && res.ReloadReason != "":
		l.m.Reloads.WithLabelValues(res.ReloadReason, haproxy.ResultFailed).Inc()
	}
	if err != nil {
		return res, err
	}
	l.m.Generation.Inc()
	certificateMetrics(l.m, want.TLS, slices.Concat(res.Dropped, res.Quarantined))
	if res.Reloaded {
		l.log.Info("haproxy reloaded", "why", res.Reason)
	}
	if l.status != nil {
		l.status.Serve(want.Served)
		l.status.ServeGatewayAPI(want.GatewayAPI)
	}
	return res, nil
}
