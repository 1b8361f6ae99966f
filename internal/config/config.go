// Package config holds the daemon's options: parsed from flags and the
// configuration file (file.go), validated, then read-only; a reload builds a
// new Config (reload.go). Flag names follow the HAProxy Kubernetes Ingress
// Controller where it has the same option, and are the file's keys.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is everything `perimeter run` needs.
type Config struct {
	// ConfigFile is --config, the YAML file whose keys are flag names.
	ConfigFile string

	External   bool
	Kubeconfig string
	Program    string
	ConfigDir  string
	RuntimeDir string

	ConfigMap             string
	ConfigMapErrorFiles   string
	ConfigMapTCPServices  string
	ConfigMapPatternFiles string
	DefaultBackendService string
	IngressClass          string
	EmptyIngressClass     bool
	NamespaceWhitelist    []string
	NamespaceBlacklist    []string
	ConfigSnippets        []string
	// DisableConfigSnippets is the peer's inverse of ConfigSnippets: kinds
	// taken out of it ("all", "global", "backend", "frontend").
	DisableConfigSnippets []string
	// GatewayController is the GatewayClass controllerName served.
	GatewayController string
	// GatewayListenerPorts (ports and FROM-TO ranges) may be opened by
	// Gateway HTTP listeners; GatewayAddresses (addresses, FROM-TO ranges
	// and CIDRs) are given to Gateways, one each (docs/gateway-api.md).
	GatewayListenerPorts []string
	GatewayAddresses     []string
	// AllowCrossNamespaceHosts lets several namespaces route one host;
	// TrustForwardedFor keeps a client's X-Forwarded-For (docs/security.md).
	AllowCrossNamespaceHosts bool
	TrustForwardedFor        bool
	// ExternalName Services: refused, or resolved by the daemon
	// (docs/features.md).
	DisableServiceExternalName bool
	ExternalNameResolver       string
	ExternalNameInterval       time.Duration

	HTTPBindPort    int
	HTTPSBindPort   int
	IPv4BindAddress string
	IPv6BindAddress string
	DisableHTTP     bool
	DisableHTTPS    bool
	DisableIPv4     bool
	DisableIPv6     bool

	StatsBindAddress      string
	StatsBindPort         int
	HealthzBindPort       int
	ControllerBindAddress string
	ControllerPort        int

	// TLS and Ingress status (docs/tls.md, docs/observability.md).
	DefaultSSLCertificate      string
	PublishAddresses           []string
	PublishService             string
	ElectionID                 string
	ElectionNamespace          string
	UpdateStatusOnShutdown     bool
	DisableIngressStatusUpdate bool

	SyncPeriod        time.Duration
	CacheResyncPeriod time.Duration
	Pprof             bool

	// Limits on what tenants can make the daemon hold (docs/security.md).
	MaxWatchedSecrets             int
	MaxWatchedSecretsPerNamespace int
	MaxConfigSize                 int
	Log                           string
	Version                       bool

	BGP BGP

	compat compatFlags

	// values is every flag's value as text once parsed, to tell what a
	// reload changes.
	values map[string]string
}

// BGP holds the embedded speaker's options; the speaker is off unless
// LocalAS is set.
type BGP struct {
	LocalAS          uint32
	RouterID         string
	ListenAddress    string
	ListenAddress6   string
	ListenPort       int
	Peers            []string
	PeersFromNodes   bool
	NodePassword     string
	ClusterAS        uint32
	PassivePrefixes  []string
	NodeSelector     string
	NodePort         int
	NodeTTLSecurity  int
	EBGPMultihop     int
	BlockSize        int
	PodCIDRs         []string
	RouteTable       int
	HoldTime         time.Duration
	KeepRoutesOnExit bool
	MaxPrefixes      uint32

	// Upstream peers receive the announce addresses (ha.md).
	UpstreamPeers       []string
	AnnounceAddresses   []string
	UpstreamCommunities []string
	UpstreamMED         string
	UpstreamHoldTime    time.Duration
	UpstreamRestartTime time.Duration
	ShutdownDrain       time.Duration
}

// Enabled reports whether the BGP speaker should run.
func (b BGP) Enabled() bool { return b.LocalAS != 0 }

type listFlag struct{ v *[]string }

func (l listFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, ",")
}

// Set accepts repeated flags and comma-separated lists alike, as the peer
// controller's users write both.
func (l listFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l.v = append(*l.v, p)
		}
	}
	return nil
}

type repeatFlag struct{ v *[]string }

func (r repeatFlag) String() string {
	if r.v == nil {
		return ""
	}
	return strings.Join(*r.v, " ")
}
func (r repeatFlag) Set(s string) error { *r.v = append(*r.v, s); return nil }

// uint32Flag is an AS number or a count: 1 to 2^32-1, or unset (0).
type uint32Flag struct{ v *uint32 }

func (u uint32Flag) String() string {
	if u.v == nil || *u.v == 0 {
		return ""
	}
	return strconv.FormatUint(uint64(*u.v), 10)
}
func (u uint32Flag) Set(s string) error { return parseAS(s, u.v) }
func (u uint32Flag) Get() any           { return *u.v }

// FlagSet registers every option on a new flag set bound to c.
func (c *Config) FlagSet(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.ConfigFile, "config", DefaultPath, "YAML configuration file whose keys are these flags' names; flags given here win (a missing file is an error only when named)")
	fs.BoolVar(&c.External, "external", true, "run outside the cluster against --kubeconfig (always on; accepted for compatibility)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "/etc/perimeter/kubeconfig", "kubeconfig of the cluster to serve")
	fs.StringVar(&c.Program, "program", "/usr/sbin/haproxy", "HAProxy binary")
	fs.StringVar(&c.ConfigDir, "config-dir", "/var/lib/perimeter", "directory for the generated haproxy.cfg, maps and certificates")
	fs.StringVar(&c.RuntimeDir, "runtime-dir", "/run/perimeter", "directory for HAProxy's sockets and pid file")
	fs.StringVar(&c.ConfigMap, "configmap", "", "controller ConfigMap, NAMESPACE/NAME")
	fs.StringVar(&c.ConfigMapErrorFiles, "configmap-errorfiles", "", "ConfigMap of custom error pages (keys are status codes), NAMESPACE/NAME")
	fs.StringVar(&c.ConfigMapErrorFiles, "configmap-errorfile", "", "alias of --configmap-errorfiles")
	fs.StringVar(&c.ConfigMapTCPServices, "configmap-tcp-services", "", "ConfigMap of TCP services (\"PORT\": \"NS/SERVICE:PORT\"), NAMESPACE/NAME")
	fs.StringVar(&c.ConfigMapPatternFiles, "configmap-patternfiles", "", "ConfigMap of pattern files (keys are file names, values one address or CIDR per line) that allow-list, deny-list and rate-limit-whitelist name as patterns/<file>, NAMESPACE/NAME")
	fs.StringVar(&c.DefaultBackendService, "default-backend-service", "", "Service answering requests no rule matches, NAMESPACE/NAME (default: a built-in 404)")
	fs.StringVar(&c.IngressClass, "ingress.class", "", "serve Ingresses of this class (IngressClass controller haproxy.org/ingress-controller/CLASS); empty: Ingresses without a class")
	fs.BoolVar(&c.EmptyIngressClass, "empty-ingress-class", false, "with --ingress.class, also serve Ingresses without a class")
	fs.Var(listFlag{&c.NamespaceWhitelist}, "namespace-whitelist", "only watch these namespaces (repeatable or comma-separated)")
	fs.Var(listFlag{&c.NamespaceBlacklist}, "namespace-blacklist", "ignore these namespaces (repeatable or comma-separated)")
	fs.Var(listFlag{&c.ConfigSnippets}, "config-snippets", "enable config snippets of these kinds: global, backend, frontend, stats (default: none)")
	fs.Var(listFlag{&c.DisableConfigSnippets}, "disable-config-snippets", "disable config snippets of these kinds even when --config-snippets enables them: all, global, backend, frontend")
	fs.StringVar(&c.GatewayController, "gateway-controller", "perimeter.io/gateway-controller", "serve the Gateways of the GatewayClasses with this spec.controllerName")
	fs.Var(listFlag{&c.GatewayListenerPorts}, "gateway-listener-ports", "ports (PORT or FROM-TO) Gateway HTTP, HTTPS and TLS listeners may open beyond the http and https ports (default: none)")
	fs.Var(listFlag{&c.GatewayAddresses}, "gateway-addresses", "addresses (IP, FROM-TO or CIDR) the edge gives Gateways, one each, for HTTP, HTTPS and TLS listeners bound on them (default: every Gateway is served on the edge's addresses)")
	fs.BoolVar(&c.AllowCrossNamespaceHosts, "allow-cross-namespace-hosts", false, "let Ingresses of different namespaces share a host (default: a host belongs to the namespace of its oldest Ingress)")
	fs.BoolVar(&c.DisableServiceExternalName, "disable-service-external-name", false, "refuse ExternalName Services (their backends get no servers, with an Event) instead of routing to the addresses their DNS name resolves to")
	fs.StringVar(&c.ExternalNameResolver, "external-name-resolver", "", "DNS server, HOST:PORT, that resolves the names of ExternalName Services (default: the host's resolver configuration)")
	fs.DurationVar(&c.ExternalNameInterval, "external-name-interval", 30*time.Second, "longest time between two lookups of an ExternalName Service's name; a shorter TTL in the answer brings the next one forward, not below 5s; a changed address is a server change, without a reload")
	fs.BoolVar(&c.TrustForwardedFor, "trust-forwarded-for", false, "keep the X-Forwarded-For header clients send, for an edge behind trusted proxies (default: a forwarded-for backend sees only the address HAProxy saw)")
	fs.IntVar(&c.HTTPBindPort, "http-bind-port", 80, "HTTP port")
	fs.IntVar(&c.HTTPSBindPort, "https-bind-port", 443, "HTTPS port")
	fs.StringVar(&c.IPv4BindAddress, "ipv4-bind-address", "0.0.0.0", "IPv4 address HAProxy binds")
	fs.StringVar(&c.IPv6BindAddress, "ipv6-bind-address", "::", "IPv6 address HAProxy binds")
	fs.BoolVar(&c.DisableHTTP, "disable-http", false, "do not serve HTTP")
	fs.BoolVar(&c.DisableHTTPS, "disable-https", false, "do not serve HTTPS")
	fs.BoolVar(&c.DisableIPv4, "disable-ipv4", false, "do not bind IPv4")
	fs.BoolVar(&c.DisableIPv6, "disable-ipv6", false, "do not bind IPv6")
	fs.StringVar(&c.StatsBindAddress, "stats-bind-address", "127.0.0.1", "address of HAProxy's stats page and exporter")
	fs.IntVar(&c.StatsBindPort, "stats-bind-port", 1024, "port of HAProxy's stats page (/stats) and Prometheus exporter (/metrics); 0 disables")
	fs.IntVar(&c.HealthzBindPort, "healthz-bind-port", 1042, "port of HAProxy's /healthz (on the stats address); 0 disables")
	fs.StringVar(&c.ControllerBindAddress, "controller-bind-address", "127.0.0.1", "address of the daemon's /healthz, /readyz, /metrics")
	fs.IntVar(&c.ControllerPort, "controller-port", 6060, "port of the daemon's /healthz, /readyz, /metrics; 0 disables")
	fs.StringVar(&c.DefaultSSLCertificate, "default-ssl-certificate", "", "Secret (kubernetes.io/tls) served to HTTPS clients whose SNI matches no Ingress, NAMESPACE/NAME (default: a self-signed certificate generated at start)")
	fs.StringVar(&c.PublishService, "publish-service", "", "Service whose load-balancer addresses (else external IPs) are written into the status of served Ingresses, NAMESPACE/NAME")
	fs.Var(repeatFlag{&c.PublishAddresses}, "publish-address", "IP or host name written into the status of served Ingresses (repeatable; default: the address HAProxy binds, else the one of the default route)")
	fs.StringVar(&c.ElectionID, "election-id", "perimeter-leader", "name of the Lease that elects the one daemon writing Ingress status")
	fs.StringVar(&c.ElectionNamespace, "election-namespace", "default", "namespace of the --election-id Lease")
	fs.BoolVar(&c.UpdateStatusOnShutdown, "update-status-on-shutdown", false, "clear the status of served Ingresses when the daemon stops")
	fs.BoolVar(&c.DisableIngressStatusUpdate, "disable-ingress-status-update", false, "never write Ingress status")
	fs.DurationVar(&c.SyncPeriod, "sync-period", time.Second, "least time between two HAProxy reloads; runtime changes are never delayed")
	fs.DurationVar(&c.CacheResyncPeriod, "cache-resync-period", 10*time.Minute, "period at which the informers replay their caches, which also re-checks every object")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve Go's /debug/pprof/ on the controller port")
	fs.IntVar(&c.MaxWatchedSecrets, "max-watched-secrets", 4000, "most Secrets watched at once; further references are refused with an Event (0: no cap)")
	fs.IntVar(&c.MaxWatchedSecretsPerNamespace, "max-watched-secrets-per-namespace", 500, "most Secrets of one namespace watched at once; further references are refused with an Event (0: no cap)")
	fs.IntVar(&c.MaxConfigSize, "max-config-size", 64<<20, "largest haproxy.cfg in bytes; the backends of a change that would exceed it keep their last good version, with an Event (0: no cap)")
	fs.StringVar(&c.Log, "log", "info", "log level: debug, info, warn, error")
	fs.BoolVar(&c.Version, "version", false, "print the version and exit")

	c.BGP.LocalAS, c.BGP.ClusterAS, c.BGP.MaxPrefixes = 0, 0, 0
	fs.Var(uint32Flag{&c.BGP.LocalAS}, "bgp-local-as", "AS number of the embedded BGP speaker (enables it)")
	fs.StringVar(&c.BGP.RouterID, "bgp-router-id", "", "BGP router ID (default: the listen address)")
	fs.StringVar(&c.BGP.ListenAddress, "bgp-listen-address", "", "address the BGP speaker listens on")
	fs.StringVar(&c.BGP.ListenAddress6, "bgp-listen-address-ipv6", "", "IPv6 address the BGP speaker listens on and sources IPv6 sessions from, beside an IPv4 --bgp-listen-address (default: every IPv6 address)")
	fs.IntVar(&c.BGP.ListenPort, "bgp-listen-port", 179, "BGP port")
	fs.Var(repeatFlag{&c.BGP.Peers}, "bgp-peer", "static BGP peer ADDRESS[,OPTION...] (repeatable); options: as=N, port=N, password-secret=NS/NAME[/KEY], ttl-security=HOPS, trust-next-hop")
	fs.BoolVar(&c.BGP.PeersFromNodes, "bgp-peers-from-nodes", false, "peer with every Node (Calico's projectcalico.org/IPv4Address, else InternalIP; and over IPv6, its projectcalico.org/IPv6Address, else IPv6 InternalIP)")
	fs.StringVar(&c.BGP.NodePassword, "bgp-node-password-secret", "", "TCP MD5 password of the sessions with Node peers, from a Secret NAMESPACE/NAME[/KEY] (Calico's BGPPeer password.secretKeyRef)")
	fs.Var(uint32Flag{&c.BGP.ClusterAS}, "bgp-cluster-as", "AS of nodes without projectcalico.org/ASNumber (default: Calico's BGPConfiguration asNumber, else --bgp-local-as)")
	fs.Var(repeatFlag{&c.BGP.PassivePrefixes}, "bgp-passive-prefix", "accept BGP sessions from peers in PREFIX[,OPTION...] (repeatable); options: as=N, password-secret=NS/NAME[/KEY], ttl-security=HOPS, trust-next-hop")
	fs.StringVar(&c.BGP.NodeSelector, "bgp-node-selector", "", "label selector of the Nodes --bgp-peers-from-nodes peers with (the BGPPeer's nodeSelector)")
	fs.IntVar(&c.BGP.NodePort, "bgp-node-port", 0, "port of the Node peers (default: Calico's BGPConfiguration listenPort, else 179)")
	fs.IntVar(&c.BGP.NodeTTLSecurity, "bgp-node-ttl-security", 0, "TTL security (hops) of the sessions with Node peers: the BGPPeer's ttlSecurity (default: off)")
	fs.IntVar(&c.BGP.EBGPMultihop, "bgp-ebgp-multihop", 0, "TTL of eBGP sessions, for peers more than one hop away (default: 1, directly connected)")
	fs.IntVar(&c.BGP.BlockSize, "bgp-block-size", 26, "block size of --pod-cidr (Calico's IPPool blockSize)")
	fs.Var(listFlag{&c.BGP.PodCIDRs}, "pod-cidr", "pod CIDRs whose blocks are accepted (repeatable; also read from Calico IPPools)")
	fs.IntVar(&c.BGP.RouteTable, "route-table", 0, "kernel routing table for learned routes (default: main)")
	fs.DurationVar(&c.BGP.HoldTime, "bgp-hold-time", 30*time.Second, "BGP hold time")
	fs.BoolVar(&c.BGP.KeepRoutesOnExit, "bgp-keep-routes-on-exit", false, "keep learned routes when the daemon stops")
	fs.Var(uint32Flag{&c.BGP.MaxPrefixes}, "bgp-max-prefixes", "most prefixes accepted from one peer (default 10000)")
	fs.Var(repeatFlag{&c.BGP.UpstreamPeers}, "bgp-upstream-peer", "upstream router that receives the announce addresses: ADDRESS,as=N[,port=N][,password-secret=NS/NAME[/KEY]] (repeatable)")
	fs.Var(repeatFlag{&c.BGP.AnnounceAddresses}, "announce-address", "ingress address (IP, IP/32 or IP/128) put on lo, bound by HAProxy and announced to the upstream peers while this edge can serve (repeatable)")
	fs.Var(repeatFlag{&c.BGP.UpstreamCommunities}, "bgp-upstream-community", "BGP community AS:N attached to the announce addresses (repeatable)")
	fs.StringVar(&c.BGP.UpstreamMED, "bgp-upstream-med", "", "MED attached to the announce addresses (default: none)")
	fs.DurationVar(&c.BGP.UpstreamHoldTime, "bgp-upstream-hold-time", 9*time.Second, "hold time proposed to upstream peers: how long a frozen edge keeps its flows")
	fs.DurationVar(&c.BGP.UpstreamRestartTime, "bgp-upstream-restart-time", 15*time.Second, "graceful-restart time announced to upstream peers (a hand-over restart keeps the address routed); 0 disables graceful restart")
	fs.DurationVar(&c.BGP.ShutdownDrain, "shutdown-drain", 5*time.Second, "on stop, how long to wait at most for the connections to the announce addresses to close before they are withdrawn, and then how long HAProxy keeps serving while the routers move the flows")
	c.compatFlagSet(fs)
	return fs
}

func parseAS(s string, out *uint32) error {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil || n == 0 {
		return fmt.Errorf("not a number from 1 to 4294967295: %q", s)
	}
	*out = uint32(n)
	return nil
}

// KeyError is an invalid value of one flag (one key of the configuration
// file), so that the file loader can point at the line that set it.
type KeyError struct {
	Key string
	// Got is the offending value as the message shows it; Item, when the
	// key is a list, is the raw item at fault.
	Got, Item string
	Reason    string
}

func (e *KeyError) Error() string {
	if e.Got != "" {
		return fmt.Sprintf("--%s=%s: %s", e.Key, e.Got, e.Reason)
	}
	return fmt.Sprintf("--%s: %s", e.Key, e.Reason)
}

// inFile is the message without the flag syntax, after FILE:LINE:.
func (e *KeyError) inFile() string {
	if e.Got != "" {
		return fmt.Sprintf("%s: %s, got %s", e.Key, e.Reason, e.Got)
	}
	return fmt.Sprintf("%s: %s", e.Key, e.Reason)
}

// Validate checks what flag parsing cannot, so the daemon fails at start
// with one line instead of later with a confusing one. Every error is a
// *KeyError.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, got, item, reason string) {
		errs = append(errs, &KeyError{Key: key, Got: got, Item: item, Reason: reason})
	}
	for _, f := range []struct{ flag, v string }{
		{"configmap", c.ConfigMap}, {"configmap-errorfiles", c.ConfigMapErrorFiles},
		{"configmap-tcp-services", c.ConfigMapTCPServices}, {"configmap-patternfiles", c.ConfigMapPatternFiles},
		{"default-backend-service", c.DefaultBackendService},
		{"default-ssl-certificate", c.DefaultSSLCertificate}, {"publish-service", c.PublishService},
	} {
		if f.v == "" {
			continue
		}
		ns, name, ok := strings.Cut(f.v, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			bad(f.flag, strconv.Quote(f.v), "", "want NAMESPACE/NAME")
		}
	}
	for _, f := range []struct{ flag, v string }{{"election-id", c.ElectionID}, {"election-namespace", c.ElectionNamespace}} {
		if f.v == "" || strings.Contains(f.v, "/") {
			bad(f.flag, strconv.Quote(f.v), "", "want a name")
		}
	}
	for _, p := range []struct {
		flag string
		v    int
	}{{"http-bind-port", c.HTTPBindPort}, {"https-bind-port", c.HTTPSBindPort}, {"stats-bind-port", c.StatsBindPort},
		{"healthz-bind-port", c.HealthzBindPort}, {"controller-port", c.ControllerPort}, {"bgp-listen-port", c.BGP.ListenPort}} {
		if p.v < 0 || p.v > 65535 {
			bad(p.flag, strconv.Itoa(p.v), "", "not a port")
		}
	}
	for _, a := range []struct{ flag, v string }{{"ipv4-bind-address", c.IPv4BindAddress}, {"ipv6-bind-address", c.IPv6BindAddress},
		{"stats-bind-address", c.StatsBindAddress}, {"controller-bind-address", c.ControllerBindAddress}} {
		if _, err := netip.ParseAddr(a.v); err != nil {
			bad(a.flag, strconv.Quote(a.v), "", "not an IP address")
		}
	}
	if ip, err := netip.ParseAddr(c.IPv4BindAddress); err == nil && !ip.Is4() {
		bad("ipv4-bind-address", strconv.Quote(c.IPv4BindAddress), "", "not IPv4")
	}
	if ip, err := netip.ParseAddr(c.IPv6BindAddress); err == nil && !ip.Is6() {
		bad("ipv6-bind-address", strconv.Quote(c.IPv6BindAddress), "", "not IPv6")
	}
	for _, a := range c.PublishAddresses {
		if a == "" || strings.ContainsAny(a, " /,") {
			bad("publish-address", strconv.Quote(a), a, "want an IP address or a host name")
		}
	}
	if _, err := PortRanges(c.GatewayListenerPorts); err != nil {
		bad("gateway-listener-ports", strconv.Quote(strings.Join(c.GatewayListenerPorts, ",")), "", err.Error())
	}
	if pool, err := AddressPool(c.GatewayAddresses); err != nil {
		bad("gateway-addresses", strconv.Quote(strings.Join(c.GatewayAddresses, ",")), "", err.Error())
	} else {
		// The edge's own binds (its bind and announce addresses) would
		// share the Gateway's socket.
		own := []string{c.IPv4BindAddress, c.IPv6BindAddress}
		for _, a := range c.BGP.AnnounceAddresses {
			own = append(own, strings.Split(a, "/")[0])
		}
		for _, a := range own {
			if ip, err := netip.ParseAddr(a); err == nil && slices.Contains(pool, ip.Unmap()) {
				bad("gateway-addresses", strconv.Quote(strings.Join(c.GatewayAddresses, ",")), ip.String(), "the edge binds it itself")
			}
		}
	}
	if c.DisableIPv4 && c.DisableIPv6 {
		bad("disable-ipv6", "", "", "with disable-ipv4 too, nothing is left to bind")
	}
	for _, s := range c.ConfigSnippets {
		if s != "global" && s != "backend" && s != "frontend" && s != "stats" {
			bad("config-snippets", strconv.Quote(s), s, "unknown kind (want global, backend, frontend, stats)")
		}
	}
	for _, s := range c.DisableConfigSnippets {
		if s != "all" && s != "global" && s != "backend" && s != "frontend" {
			bad("disable-config-snippets", strconv.Quote(s), s, "unknown kind (want all, global, backend, frontend)")
		}
	}
	if c.CacheResyncPeriod < 0 {
		bad("cache-resync-period", c.CacheResyncPeriod.String(), "", "negative")
	}
	if _, err := c.LogLevel(); err != nil {
		errs = append(errs, err)
	}
	for _, f := range []struct {
		flag string
		v    int
	}{{"max-watched-secrets", c.MaxWatchedSecrets}, {"max-watched-secrets-per-namespace", c.MaxWatchedSecretsPerNamespace}, {"max-config-size", c.MaxConfigSize}} {
		if f.v < 0 {
			bad(f.flag, strconv.Itoa(f.v), "", "negative")
		}
	}
	if c.SyncPeriod < 0 {
		bad("sync-period", c.SyncPeriod.String(), "", "negative")
	}
	if h := c.BGP.HoldTime; h != 0 && (h < 3*time.Second || h%time.Second != 0) {
		bad("bgp-hold-time", h.String(), "", "want whole seconds, at least 3s")
	}
	for _, p := range c.BGP.PodCIDRs {
		if _, err := netip.ParsePrefix(p); err != nil {
			bad("pod-cidr", strconv.Quote(p), p, "not a prefix such as 198.18.0.0/16")
		}
	}
	if c.BGP.RouteTable < 0 {
		bad("route-table", strconv.Itoa(c.BGP.RouteTable), "", "not a routing table number")
	}
	return errors.Join(errs...)
}

// LogLevel maps --log to a slog level.
func (c *Config) LogLevel() (slog.Level, error) {
	switch strings.ToLower(c.Log) {
	case "debug", "trace":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, &KeyError{Key: "log", Got: strconv.Quote(c.Log), Reason: "want debug, info, warn or error"}
}
