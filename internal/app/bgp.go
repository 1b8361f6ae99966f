package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/perimeter-ingress/perimeter/internal/bgp"
	"github.com/perimeter-ingress/perimeter/internal/config"
	"github.com/perimeter-ingress/perimeter/internal/routes"
)

// BGPConfig turns the flags into the speaker's configuration.
func BGPConfig(c *config.Config) (bgp.Config, error) {
	b := c.BGP
	cfg := bgp.Config{
		LocalAS:          b.LocalAS,
		ListenPort:       b.ListenPort,
		ClusterAS:        b.ClusterAS,
		PeerWithNodes:    b.PeersFromNodes,
		HoldTime:         b.HoldTime,
		KeepRoutesOnExit: b.KeepRoutesOnExit,
		MaxPrefixes:      int(b.MaxPrefixes),
	}
	var err error
	if b.ListenAddress != "" {
		if cfg.ListenAddress, err = netip.ParseAddr(b.ListenAddress); err != nil {
			return cfg, fmt.Errorf("--bgp-listen-address: %w", err)
		}
	}
	if b.ListenAddress6 != "" {
		if cfg.ListenAddress6, err = netip.ParseAddr(b.ListenAddress6); err != nil {
			return cfg, fmt.Errorf("--bgp-listen-address-ipv6: %w", err)
		}
	}
	if b.RouterID != "" {
		if cfg.RouterID, err = netip.ParseAddr(b.RouterID); err != nil {
			return cfg, fmt.Errorf("--bgp-router-id: %w", err)
		}
	}
	if b.NodePassword != "" {
		ref, err := bgp.ParseSecretRef(b.NodePassword)
		if err != nil {
			return cfg, fmt.Errorf("--bgp-node-password-secret: %w", err)
		}
		cfg.NodePassword = &ref
	}
	for _, p := range b.Peers {
		peer, err := bgp.ParsePeerFlag(p)
		if err != nil {
			return cfg, fmt.Errorf("--bgp-peer: %w", err)
		}
		cfg.Peers = append(cfg.Peers, peer)
	}
	for _, p := range b.PassivePrefixes {
		pp, err := bgp.ParsePassivePeerFlag(p)
		if err != nil {
			return cfg, fmt.Errorf("--bgp-passive-prefix: %w", err)
		}
		cfg.PassivePeers = append(cfg.PassivePeers, pp)
	}
	cfg.NodeSelector = b.NodeSelector
	if b.NodePort < 0 || b.NodePort > 65535 {
		return cfg, fmt.Errorf("--bgp-node-port %d: not a port", b.NodePort)
	}
	cfg.NodePort = uint16(b.NodePort)
	if b.NodeTTLSecurity != 0 {
		if cfg.NodeTTLSecurity, err = bgp.ParseTTLSecurity(strconv.Itoa(b.NodeTTLSecurity)); err != nil {
			return cfg, fmt.Errorf("--bgp-node-ttl-security: %w", err)
		}
	}
	if b.EBGPMultihop < 0 || b.EBGPMultihop > 255 {
		return cfg, fmt.Errorf("--bgp-ebgp-multihop %d: want a TTL from 1 to 255", b.EBGPMultihop)
	}
	cfg.EBGPMultihopTTL = uint8(b.EBGPMultihop)
	cfg.BlockSize = b.BlockSize
	for _, s := range b.PodCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return cfg, fmt.Errorf("--pod-cidr: %w", err)
		}
		cfg.PodCIDRs = append(cfg.PodCIDRs, p.Masked())
	}
	return cfg, nil
}

// startBGP builds the route manager and the speaker; the caller runs it.
func startBGP(c *config.Config, rc *rest.Config, cs kubernetes.Interface, reg prometheus.Registerer, log *slog.Logger) (*bgp.Speaker, error) {
	cfg, err := BGPConfig(c)
	if err != nil {
		return nil, err
	}
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	rm, err := routes.New(routes.Config{Table: c.BGP.RouteTable}, h, log.With("component", "routes"), reg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	cfg.Source = bgp.NewKubeSource(cs, dyn, cfg.SecretRefs(), log.With("component", "bgp-source"))
	cfg.ServiceEvent, cfg.OnExit = serviceEvents(cs)
	cfg.ServiceServed = func(svc bgp.ServiceRef) bool {
		if len(c.NamespaceWhitelist) > 0 && !slices.Contains(c.NamespaceWhitelist, svc.Namespace) {
			return false
		}
		return !slices.Contains(c.NamespaceBlacklist, svc.Namespace)
	}
	sp, err := bgp.New(cfg, rm, log, reg)
	if err != nil {
		return nil, err
	}
	return sp, nil
}

// serviceEvents records the speaker's Warning Events on Services.
func serviceEvents(cs kubernetes.Interface) (func(bgp.ServiceRef, string, string), func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	host, _ := os.Hostname()
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "perimeter", Host: host})
	return func(svc bgp.ServiceRef, reason, message string) {
		rec.Event(&corev1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: svc.Namespace, Name: svc.Name},
			corev1.EventTypeWarning, reason, message)
	}, b.Shutdown
}

// FlushRoutes removes every route the daemon installed (`perimeter routes
// flush`), e.g. after a stop with --bgp-keep-routes-on-exit.
func FlushRoutes(c *config.Config, out io.Writer) error {
	h, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	table := c.BGP.RouteTable
	if table == 0 {
		table = 254
	}
	n, err := routes.Flush(h, table, routes.DefaultProtocol)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "removed %d routes (protocol %d, table %d)\n", n, routes.DefaultProtocol, table)
	return nil
}

// runBGP runs the speaker until ctx ends; an error ends the daemon.
func runBGP(ctx context.Context, sp *bgp.Speaker) error {
	if err := sp.Run(ctx); err != nil {
		return fmt.Errorf("bgp: %w", err)
	}
	return nil
}
