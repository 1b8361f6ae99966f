// Package bgp runs Perimeter's embedded BGP speaker (GoBGP): it peers with the
// cluster's nodes (Calico's BIRD), accepts only pod-CIDR blocks announced for
// the node that owns them, and hands the best paths to the route manager,
// which installs them in the kernel. The speaker advertises nothing.
package bgp

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Config is the speaker's configuration, validated by Validate.
type Config struct {
	// LocalAS is Perimeter's AS number.
	LocalAS uint32
	// RouterID is the BGP identifier; defaults to ListenAddress.
	RouterID netip.Addr
	// ListenAddress restricts the listening socket (and outgoing
	// connections) to one address; the zero value listens everywhere.
	ListenAddress netip.Addr
	// ListenAddress6 is the IPv6 address to listen on and to source IPv6
	// sessions from, beside an IPv4 ListenAddress; zero: IPv6 sessions
	// are not restricted when ListenAddress is IPv4 (they listen on every
	// IPv6 address).
	ListenAddress6 netip.Addr
	// ListenPort is the TCP port; 0 means 179, -1 disables listening
	// (outgoing sessions only).
	ListenPort int
	// ClusterAS is the AS of nodes without a projectcalico.org/ASNumber
	// annotation and of static peers without as=; 0 means Calico's
	// BGPConfiguration asNumber when there is one, else LocalAS (iBGP,
	// Calico's default 64512 on both sides).
	ClusterAS uint32

	// Peers are configured statically (--bgp-peer).
	Peers []Peer
	// PeerWithNodes adds a peer for every Node (matching NodeSelector),
	// as Calico's node-to-node mesh would; nodes joining and leaving add
	// and remove peers.
	PeerWithNodes bool
	// NodeSelector is a label selector restricting PeerWithNodes.
	NodeSelector string
	// NodePassword is the TCP MD5 password of node peers.
	NodePassword *SecretRef
	// NodePort is the port node peers listen on; 0 means Calico's
	// BGPConfiguration listenPort, else 179.
	NodePort uint16
	// NodeTTLSecurity is the BGPPeer's ttlSecurity (hops) for node peers:
	// packets are sent with TTL 255 and must arrive with at least 256-N.
	NodeTTLSecurity uint8
	// PassivePeers accepts sessions from any address in a prefix.
	PassivePeers []PassivePeer

	// PodCIDRs are accepted in addition to Calico's IPPools, split in
	// blocks of BlockSize (0 means 26, Calico's IPv4 default) for IPv4
	// and BlockSize6 (0 means 122, Calico's IPv6 default) for IPv6.
	PodCIDRs   []netip.Prefix
	BlockSize  int
	BlockSize6 int

	// HoldTime and KeepaliveInterval are proposed in OPEN; the session
	// uses the smaller hold time of the two sides. Defaults 30s and 10s.
	HoldTime          time.Duration
	KeepaliveInterval time.Duration
	// ConnectRetry is the wait between outgoing connection attempts
	// (default 5s).
	ConnectRetry time.Duration
	// GracefulRestartTime is announced in the graceful-restart capability.
	// Perimeter is a helper only: a restarting node keeps its routes for
	// the restart time it announces. Default 120s.
	GracefulRestartTime time.Duration
	// DisableGracefulRestart turns the helper mode off: a node's routes go
	// the moment its session drops.
	DisableGracefulRestart bool
	// MaxPrefixes per peer; a peer announcing more is disconnected and
	// its routes dropped, then re-admitted after MaxPrefixesRestart. 0
	// means 10000; -1 means no limit.
	MaxPrefixes        int
	MaxPrefixesRestart time.Duration
	// EBGPMultihopTTL allows eBGP peers that are not directly connected.
	EBGPMultihopTTL uint8

	// StaleTimeout bounds how long routes kept from a previous run wait
	// for the peers' End-of-RIB before unconfirmed ones are deleted.
	// Default 90s.
	StaleTimeout time.Duration
	// KeepRoutesOnExit leaves the kernel routes in place when the speaker
	// stops (for restarts without a forwarding gap); the next start adopts
	// them.
	KeepRoutesOnExit bool

	// Source supplies Nodes, IPPools, BlockAffinities and Secrets; nil
	// means static configuration only.
	Source Source

	// ServiceEvent, when set, records a Warning Event on a Service (IPv6
	// endpoints without a route); OnExit runs when Run returns (to stop
	// what delivers them).
	ServiceEvent func(svc ServiceRef, reason, message string)
	OnExit       func()
	// ServiceServed, when set, limits that check to the Services the
	// daemon serves (its namespace filters).
	ServiceServed func(ServiceRef) bool
}

// Peer is a statically configured neighbour.
type Peer struct {
	Address netip.Addr
	// AS is the neighbour's AS; 0 means Config.ClusterAS.
	AS uint32
	// Port is the neighbour's BGP port; 0 means 179.
	Port uint16
	// PasswordSecret names the Secret key holding the TCP MD5 password.
	PasswordSecret *SecretRef
	// TrustNextHop accepts the peer's routes by prefix alone (inside a
	// pool, at least a block long), whatever their next hop: for a switch
	// that is the next hop of what it announces.
	TrustNextHop bool
	// TTLSecurity is GTSM over this many hops (Calico's ttlSecurity).
	TTLSecurity uint8
}

// PassivePeer accepts incoming sessions from any address inside Prefix
// (GoBGP dynamic neighbours).
type PassivePeer struct {
	Prefix netip.Prefix
	// AS is required of the neighbours; 0 accepts any AS.
	AS             uint32
	PasswordSecret *SecretRef
	TrustNextHop   bool
	TTLSecurity    uint8
}

// SecretRef names one key of a Secret.
type SecretRef struct {
	Namespace, Name, Key string
}

func (r SecretRef) String() string { return r.Namespace + "/" + r.Name + "/" + r.Key }

// DefaultSecretKey is the key read when password-secret names no key.
const DefaultSecretKey = "password"

// ParseSecretRef parses NAMESPACE/NAME[/KEY].
func ParseSecretRef(s string) (SecretRef, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return SecretRef{}, fmt.Errorf("secret %q: want NAMESPACE/NAME[/KEY]", s)
	}
	r := SecretRef{Namespace: parts[0], Name: parts[1], Key: DefaultSecretKey}
	if len(parts) == 3 {
		r.Key = parts[2]
	}
	if r.Namespace == "" || r.Name == "" || r.Key == "" {
		return SecretRef{}, fmt.Errorf("secret %q: empty namespace, name or key", s)
	}
	return r, nil
}

// ParsePeerFlag parses ADDRESS[,as=N][,port=N][,password-secret=NS/NAME[/KEY]]
// [,ttl-security=HOPS][,trust-next-hop].
func ParsePeerFlag(s string) (Peer, error) {
	fields := strings.Split(s, ",")
	a, err := netip.ParseAddr(strings.TrimSpace(fields[0]))
	if err != nil {
		return Peer{}, fmt.Errorf("peer %q: address: %w", s, err)
	}
	if a.Zone() != "" || a.Is4In6() {
		return Peer{}, fmt.Errorf("peer %q: want an IPv4 or a global IPv6 address", s)
	}
	p := Peer{Address: a}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		if k == "trust-next-hop" && !ok {
			p.TrustNextHop = true
			continue
		}
		if !ok {
			return Peer{}, fmt.Errorf("peer %q: option %q is not key=value", s, f)
		}
		switch k {
		case "ttl-security":
			if p.TTLSecurity, err = ParseTTLSecurity(v); err != nil {
				return Peer{}, fmt.Errorf("peer %q: %w", s, err)
			}
		case "as":
			if p.AS, err = parseAS(v); err != nil {
				return Peer{}, fmt.Errorf("peer %q: %w", s, err)
			}
		case "port":
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil || n == 0 {
				return Peer{}, fmt.Errorf("peer %q: port %q", s, v)
			}
			p.Port = uint16(n)
		case "password-secret":
			r, err := ParseSecretRef(v)
			if err != nil {
				return Peer{}, fmt.Errorf("peer %q: %w", s, err)
			}
			p.PasswordSecret = &r
		default:
			return Peer{}, fmt.Errorf("peer %q: unknown option %q (want as, port, password-secret, ttl-security, trust-next-hop)", s, k)
		}
	}
	return p, nil
}

// ParsePassivePeerFlag parses PREFIX[,as=N][,password-secret=NS/NAME[/KEY]]
// [,ttl-security=HOPS][,trust-next-hop].
func ParsePassivePeerFlag(s string) (PassivePeer, error) {
	fields := strings.Split(s, ",")
	pfx, err := netip.ParsePrefix(strings.TrimSpace(fields[0]))
	if err != nil {
		return PassivePeer{}, fmt.Errorf("passive peer %q: prefix: %w", s, err)
	}
	p := PassivePeer{Prefix: pfx.Masked()}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		if k == "trust-next-hop" && !ok {
			p.TrustNextHop = true
			continue
		}
		if !ok {
			return PassivePeer{}, fmt.Errorf("passive peer %q: option %q is not key=value", s, f)
		}
		switch k {
		case "ttl-security":
			if p.TTLSecurity, err = ParseTTLSecurity(v); err != nil {
				return PassivePeer{}, fmt.Errorf("passive peer %q: %w", s, err)
			}
		case "as":
			if p.AS, err = parseAS(v); err != nil {
				return PassivePeer{}, fmt.Errorf("passive peer %q: %w", s, err)
			}
		case "password-secret":
			r, err := ParseSecretRef(v)
			if err != nil {
				return PassivePeer{}, fmt.Errorf("passive peer %q: %w", s, err)
			}
			p.PasswordSecret = &r
		default:
			return PassivePeer{}, fmt.Errorf("passive peer %q: unknown option %q (want as, password-secret, ttl-security, trust-next-hop)", s, k)
		}
	}
	return p, nil
}

// ParseTTLSecurity parses a hop count for TTL security (1-254), as Calico's
// BGPPeer ttlSecurity.
func ParseTTLSecurity(v string) (uint8, error) {
	n, err := strconv.ParseUint(v, 10, 8)
	if err != nil || n == 0 || n > 254 {
		return 0, fmt.Errorf("ttl-security %q: want a hop count from 1 to 254", v)
	}
	return uint8(n), nil
}

// blockSize is the block size of configured pod CIDRs of a's family.
func (c *Config) blockSize(a netip.Addr) int {
	if a.Is6() {
		return c.BlockSize6
	}
	return c.BlockSize
}

// localAddress is the address sessions with peer go out from (invalid: the
// kernel chooses).
func (c *Config) localAddress(peer netip.Addr) netip.Addr {
	a := c.ListenAddress
	if peer.Is6() {
		a = c.ListenAddress6
	}
	if !a.IsValid() || a.IsUnspecified() || a.Is4() != peer.Is4() {
		return netip.Addr{}
	}
	return a
}

// trustedPeers are the peers whose next hops the policy does not check.
func (c *Config) trustedPeers() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range c.Peers {
		if p.TrustNextHop {
			out = append(out, netip.PrefixFrom(p.Address, p.Address.BitLen()))
		}
	}
	for _, p := range c.PassivePeers {
		if p.TrustNextHop {
			out = append(out, p.Prefix)
		}
	}
	return out
}

// parseAS accepts plain (asplain) and dotted (asdot, "1.10") AS numbers.
func parseAS(v string) (uint32, error) {
	if hi, lo, ok := strings.Cut(v, "."); ok {
		h, err1 := strconv.ParseUint(hi, 10, 16)
		l, err2 := strconv.ParseUint(lo, 10, 16)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("AS number %q", v)
		}
		return uint32(h<<16 | l), nil
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("AS number %q", v)
	}
	return uint32(n), nil
}

// SecretRefs lists every Secret key the configuration refers to, for the
// source to watch.
func (c *Config) SecretRefs() []SecretRef {
	var out []SecretRef
	seen := map[SecretRef]bool{}
	add := func(r *SecretRef) {
		if r != nil && !seen[*r] {
			seen[*r] = true
			out = append(out, *r)
		}
	}
	for i := range c.Peers {
		add(c.Peers[i].PasswordSecret)
	}
	add(c.NodePassword)
	for i := range c.PassivePeers {
		add(c.PassivePeers[i].PasswordSecret)
	}
	return out
}

// Validate fills in defaults and reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if c.LocalAS == 0 {
		errs = append(errs, errors.New("local AS is required"))
	}
	if c.ListenAddress.IsValid() && !c.ListenAddress.Is4() {
		errs = append(errs, fmt.Errorf("listen address %s: want IPv4 (the IPv6 one is ListenAddress6)", c.ListenAddress))
	}
	if c.ListenAddress6.IsValid() && (!c.ListenAddress6.Is6() || c.ListenAddress6.Is4In6() || c.ListenAddress6.Zone() != "") {
		errs = append(errs, fmt.Errorf("IPv6 listen address %s: want a global IPv6 address", c.ListenAddress6))
	}
	if !c.RouterID.IsValid() && c.ListenAddress.Is4() && !c.ListenAddress.IsUnspecified() {
		c.RouterID = c.ListenAddress
	}
	if !c.RouterID.Is4() || c.RouterID.IsUnspecified() {
		errs = append(errs, errors.New("router ID (an IPv4 address) is required when no specific listen address is set"))
	}
	if c.ListenPort == 0 {
		c.ListenPort = 179
	}
	if c.ListenPort < -1 || c.ListenPort > 65535 {
		errs = append(errs, fmt.Errorf("listen port %d out of range", c.ListenPort))
	}
	if c.BlockSize == 0 {
		c.BlockSize = 26
	}
	if c.BlockSize < 1 || c.BlockSize > 32 {
		errs = append(errs, fmt.Errorf("block size /%d out of range", c.BlockSize))
	}
	if c.BlockSize6 == 0 {
		c.BlockSize6 = 122
	}
	if c.BlockSize6 < 1 || c.BlockSize6 > 128 {
		errs = append(errs, fmt.Errorf("IPv6 block size /%d out of range", c.BlockSize6))
	}
	for i, p := range c.PodCIDRs {
		if p.Addr().Is4In6() || p.Addr().Zone() != "" {
			errs = append(errs, fmt.Errorf("pod CIDR %s: want an IPv4 or IPv6 prefix", p))
		}
		if p.Bits() > c.blockSize(p.Addr()) {
			errs = append(errs, fmt.Errorf("pod CIDR %s is smaller than a /%d block", p, c.blockSize(p.Addr())))
		}
		c.PodCIDRs[i] = p.Masked()
	}
	if c.HoldTime == 0 {
		c.HoldTime = 30 * time.Second
	}
	if c.KeepaliveInterval == 0 {
		c.KeepaliveInterval = c.HoldTime / 3
	}
	if c.HoldTime < 3*time.Second || c.HoldTime%time.Second != 0 {
		errs = append(errs, fmt.Errorf("hold time %s: want whole seconds, at least 3s", c.HoldTime))
	}
	if c.KeepaliveInterval < time.Second || c.KeepaliveInterval >= c.HoldTime || c.KeepaliveInterval%time.Second != 0 {
		errs = append(errs, fmt.Errorf("keepalive interval %s: want whole seconds, at least 1s and below the hold time", c.KeepaliveInterval))
	}
	if c.ConnectRetry == 0 {
		c.ConnectRetry = 5 * time.Second
	}
	if c.ConnectRetry < time.Second {
		errs = append(errs, fmt.Errorf("connect retry %s: at least 1s", c.ConnectRetry))
	}
	if c.GracefulRestartTime == 0 {
		c.GracefulRestartTime = 120 * time.Second
	}
	if c.GracefulRestartTime > 4095*time.Second {
		errs = append(errs, fmt.Errorf("graceful restart time %s exceeds 4095s", c.GracefulRestartTime))
	}
	if c.MaxPrefixes == 0 {
		c.MaxPrefixes = 10000
	}
	if c.MaxPrefixesRestart == 0 {
		c.MaxPrefixesRestart = time.Minute
	}
	if c.StaleTimeout == 0 {
		c.StaleTimeout = 90 * time.Second
	}
	if _, err := labels.Parse(c.NodeSelector); err != nil {
		errs = append(errs, fmt.Errorf("node selector %q: %w", c.NodeSelector, err))
	}
	seen := map[netip.Addr]bool{}
	for _, p := range c.Peers {
		if !p.Address.IsValid() || p.Address.Is4In6() || p.Address.Zone() != "" {
			errs = append(errs, fmt.Errorf("peer %s: want an IPv4 or a global IPv6 address", p.Address))
		}
		if seen[p.Address] {
			errs = append(errs, fmt.Errorf("peer %s configured twice", p.Address))
		}
		seen[p.Address] = true
	}
	for _, p := range c.PassivePeers {
		if !p.Prefix.IsValid() || p.Prefix.Addr().Is4In6() {
			errs = append(errs, fmt.Errorf("passive peer %s: want an IPv4 or IPv6 prefix", p.Prefix))
		}
		if c.ListenPort == -1 {
			errs = append(errs, fmt.Errorf("passive peer %s needs a listening port", p.Prefix))
		}
	}
	if c.Source == nil {
		if refs := c.SecretRefs(); len(refs) > 0 {
			errs = append(errs, fmt.Errorf("password secret %s needs a Kubernetes connection", refs[0]))
		}
		if c.PeerWithNodes {
			errs = append(errs, errors.New("peering with nodes needs a Kubernetes connection"))
		}
	}
	return errors.Join(errs...)
}
