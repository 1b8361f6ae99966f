package bgp

import (
	"fmt"
	"net/netip"

	api "github.com/osrg/gobgp/v3/api"
	"k8s.io/apimachinery/pkg/labels"
)

// Peer kinds, as shown in status.
const (
	kindStatic  = "static"
	kindNode    = "node"
	kindPassive = "passive"
)

// peerSpec is one neighbour as configured in GoBGP.
type peerSpec struct {
	Address  netip.Addr
	AS       uint32
	Port     uint16
	Password string
	Kind     string
	Node     string
	// TTLSecurity is GTSM over this many hops; 0: off.
	TTLSecurity uint8
}

// desiredPeers computes the active neighbours from the configuration and
// the cluster: static peers, plus one per selected Node when PeerWithNodes.
// A peer whose password Secret is missing is left out (a session without the
// password would be refused by the other side anyway) and reported in
// problems.
func desiredPeers(cfg *Config, st ClusterState, sel labels.Selector) (map[netip.Addr]peerSpec, map[netip.Addr]string) {
	peers := map[netip.Addr]peerSpec{}
	problems := map[netip.Addr]string{}
	password := func(addr netip.Addr, ref *SecretRef) (string, bool) {
		if ref == nil {
			return "", true
		}
		v, ok := st.Secrets[*ref]
		if !ok || v == "" {
			problems[addr] = fmt.Sprintf("waiting for password secret %s", ref)
			return "", false
		}
		return v, true
	}
	clusterAS := cfg.clusterAS(st)
	for _, p := range cfg.Peers {
		as := p.AS
		if as == 0 {
			as = clusterAS
		}
		pw, ok := password(p.Address, p.PasswordSecret)
		if !ok {
			continue
		}
		peers[p.Address] = peerSpec{Address: p.Address, AS: as, Port: p.Port, Password: pw, Kind: kindStatic, TTLSecurity: p.TTLSecurity}
	}
	if !cfg.PeerWithNodes {
		return peers, problems
	}
	for _, n := range st.Nodes {
		if sel != nil && !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		// Calico runs one BIRD per address family (bird and bird6), each
		// peering over the node's address of that family.
		for _, a := range []netip.Addr{n.PeerAddress, n.PeerAddress6} {
			if !a.IsValid() || a.IsUnspecified() || a == cfg.RouterID || a == cfg.ListenAddress || a == cfg.ListenAddress6 {
				// Perimeter running on a node must not peer with itself.
				continue
			}
			if _, static := peers[a]; static {
				continue
			}
			as := n.AS
			if as == 0 {
				as = clusterAS
			}
			pw, ok := password(a, cfg.NodePassword)
			if !ok {
				continue
			}
			port := cfg.NodePort
			if port == 0 {
				port = st.NodePort
			}
			peers[a] = peerSpec{Address: a, AS: as, Port: port, Password: pw, Kind: kindNode, Node: n.Name, TTLSecurity: cfg.NodeTTLSecurity}
		}
	}
	return peers, problems
}

// clusterAS is the nodes' AS: --bgp-cluster-as, else Calico's
// BGPConfiguration asNumber, else our own (iBGP).
func (c *Config) clusterAS(st ClusterState) uint32 {
	switch {
	case c.ClusterAS != 0:
		return c.ClusterAS
	case st.ASNumber != 0:
		return st.ASNumber
	}
	return c.LocalAS
}

// ttlSecurity is GoBGP's GTSM setting for hops (0: none): we send TTL 255
// and want at least 256-hops.
func ttlSecurity(hops uint8) *api.TtlSecurity {
	if hops == 0 {
		return nil
	}
	return &api.TtlSecurity{Enabled: true, TtlMin: 256 - uint32(hops)}
}

var ipv4Unicast = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}

// familyOf is the one address family a session carries: the family of the
// peer's address, as Calico's BIRDs do (bird for IPv4 over IPv4 sessions,
// bird6 for IPv6 over IPv6 sessions).
func familyOf(peer netip.Addr) *api.Family {
	if peer.Is6() {
		return ipv6Unicast
	}
	return ipv4Unicast
}

func (c *Config) afiSafis(family *api.Family) []*api.AfiSafi {
	af := &api.AfiSafi{
		Config: &api.AfiSafiConfig{Family: family, Enabled: true},
		MpGracefulRestart: &api.MpGracefulRestart{
			Config: &api.MpGracefulRestartConfig{Enabled: !c.DisableGracefulRestart}},
	}
	if c.MaxPrefixes > 0 {
		// The speaker enforces MaxPrefixes itself, on accepted routes (see
		// enforceMaxPrefixes): when GoBGP's own limit trips, a
		// graceful-restart helper may keep the peer's routes, even the
		// excess ones, as stale. GoBGP's limit, on everything received,
		// stays as a memory backstop, high enough for eBGP nodes that
		// re-announce the whole cluster's blocks.
		af.PrefixLimits = &api.PrefixLimit{Family: family, MaxPrefixes: uint32(min(20*c.MaxPrefixes+1000, 1<<31))}
	}
	return []*api.AfiSafi{af}
}

func (c *Config) timers() *api.Timers {
	return &api.Timers{Config: &api.TimersConfig{
		HoldTime:          uint64(c.HoldTime.Seconds()),
		KeepaliveInterval: uint64(c.KeepaliveInterval.Seconds()),
		ConnectRetry:      uint64(c.ConnectRetry.Seconds()),
		// After our own resets (none today) come back quickly.
		IdleHoldTimeAfterReset: 1,
	}}
}

func (c *Config) gracefulRestart() *api.GracefulRestart {
	if c.DisableGracefulRestart {
		return nil
	}
	// Helper only: we keep a restarting peer's routes; we never ask peers
	// to keep ours (we announce none).
	return &api.GracefulRestart{Enabled: true, HelperOnly: true,
		RestartTime: uint32(c.GracefulRestartTime.Seconds())}
}

func (c *Config) apiPeer(p peerSpec) *api.Peer {
	port := uint32(p.Port)
	if port == 0 {
		port = 179
	}
	desc := p.Kind
	if p.Node != "" {
		desc = "node " + p.Node
	}
	peer := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Address.String(), PeerAsn: p.AS,
			AuthPassword: p.Password, Description: desc},
		Timers:          c.timers(),
		Transport:       &api.Transport{RemotePort: port},
		AfiSafis:        c.afiSafis(familyOf(p.Address)),
		GracefulRestart: c.gracefulRestart(),
	}
	if la := c.localAddress(p.Address); la.IsValid() {
		peer.Transport.LocalAddress = la.String()
	}
	if c.EBGPMultihopTTL > 0 && p.AS != c.LocalAS {
		peer.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(c.EBGPMultihopTTL)}
	}
	peer.TtlSecurity = ttlSecurity(p.TTLSecurity)
	return peer
}

func passiveGroupName(i int) string { return fmt.Sprintf("passive-%d", i) }

func (c *Config) apiPeerGroup(name string, p PassivePeer, password string) *api.PeerGroup {
	g := &api.PeerGroup{
		Conf:            &api.PeerGroupConf{PeerGroupName: name, PeerAsn: p.AS, AuthPassword: password},
		Timers:          c.timers(),
		Transport:       &api.Transport{PassiveMode: true},
		AfiSafis:        c.afiSafis(familyOf(p.Prefix.Addr())),
		GracefulRestart: c.gracefulRestart(),
	}
	if c.EBGPMultihopTTL > 0 {
		g.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(c.EBGPMultihopTTL)}
	}
	g.TtlSecurity = ttlSecurity(p.TTLSecurity)
	return g
}
