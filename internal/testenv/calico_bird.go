package testenv

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"text/template"
)

// CalicoNode describes one calico-node for CalicoBirdConfig: the values
// Calico's confd feeds its BIRD templates (bird.cfg, bird_aggr.cfg,
// bird_ipam.cfg of v3.30/v3.31) for a node in BGP mode, taken from the
// node's Node, BlockAffinities, IPPools, BGPConfiguration and the BGPPeers
// that select it.
type CalicoNode struct {
	Address string // projectcalico.org/IPv4Address: router id, source address, next hop
	// RouterID is the router id when it is not Address: bird6's (IPv6
	// Address) is the node's IPv4 address, as confd renders it.
	RouterID string
	AS       uint32 // BGPConfiguration asNumber or the node's ASNumber (default 64512)
	// Pools are the IPPool CIDRs; NoExportPools those with
	// disableBGPExport.
	Pools, NoExportPools []string
	// Blocks are the node's affine blocks exported as blackholes and
	// aggregated (confirmed or "" affinities; with host-local IPAM the
	// Node's podCIDR). PendingDeletion blocks are still exported, but
	// nothing beneath them is filtered.
	Blocks, PendingDeletion []string
	// Mesh are all nodes' addresses when nodeToNodeMeshEnabled (the node's
	// own is skipped).
	Mesh []string
	// RRClusterID makes the node a route reflector
	// (projectcalico.org/RouteReflectorClusterID): its iBGP peers that are
	// not reflectors of the same cluster become its clients.
	RRClusterID string
	// NodePeers are BGPPeers to other Calico nodes (e.g. from every node to
	// the route reflectors, peerSelector): Node_ protocols.
	NodePeers []CalicoNodePeer
	// Peers are BGPPeers to what is not a Calico node (the edge): Global_
	// protocols.
	Peers []CalicoPeer
	// ListenPort is BGPConfiguration listenPort (0: 179).
	ListenPort int
	Log        string // log file; "" logs to stderr
}

// CalicoNodePeer is another Calico node this node peers with.
type CalicoNodePeer struct {
	Address     string
	AS          uint32 // 0: the node's
	RRClusterID string // the peer's, when it is a route reflector
}

// CalicoPeer is a BGPPeer that selects the node and names a peer outside the
// cluster (the edge).
type CalicoPeer struct {
	Address  string
	Port     int // peerIP "ip:port"; 0: 179
	AS       uint32
	Password string // password.secretKeyRef's value
	// TTLSecurity is ttlSecurity (hops): BIRD sends TTL 255 and wants
	// at least 256-N.
	TTLSecurity int
	// NextHopMode is Auto (""), Self or Keep.
	NextHopMode string
}

// CalicoBirdConfig renders a node's BIRD 1.6 configuration the way
// calico-node's confd renders it: bird_aggr.cfg, bird_ipam.cfg and bird.cfg
// in one file (in the order bird.cfg includes them). The one line Calico's
// BIRD fork has and BIRD 1.6.8 lacks, krt_tunnel in the kernel filter, is
// left out; it only selects IPIP tunnels.
func CalicoBirdConfig(n CalicoNode) (string, error) {
	if a, err := netip.ParseAddr(n.Address); err != nil || !a.Is4() {
		return "", fmt.Errorf("address %q: want IPv4 (CalicoBird6Config renders bird6's)", n.Address)
	}
	return calicoBirdConfig(n, false)
}

// CalicoBird6Config renders the configuration of calico-node's second BIRD,
// bird6 (confd's bird6.cfg, bird6_aggr.cfg and bird6_ipam.cfg): the same
// shape over IPv6 (projectcalico.org/IPv6Address as Address, source address
// and next hop; IPv6 pools, /122 blocks, mesh and peers), with the node's
// IPv4 address as router id (RouterID), since BGP identifiers are 32 bits.
func CalicoBird6Config(n CalicoNode) (string, error) {
	if a, err := netip.ParseAddr(n.Address); err != nil || !a.Is6() {
		return "", fmt.Errorf("address %q: want IPv6", n.Address)
	}
	if a, err := netip.ParseAddr(n.RouterID); err != nil || !a.Is4() {
		return "", fmt.Errorf("router id %q: want the node's IPv4 address", n.RouterID)
	}
	return calicoBirdConfig(n, true)
}

func calicoBirdConfig(n CalicoNode, v6 bool) (string, error) {
	if n.AS == 0 {
		n.AS = 64512
	}
	if n.RouterID == "" {
		n.RouterID = n.Address
	}
	type peer struct {
		Proto, Address, Extra, Export string
		Port                          int
		AS                            uint32
	}
	var peers []peer
	id := func(a string) string { return strings.NewReplacer(".", "_", ":", "_").Replace(a) }
	for _, m := range n.Mesh {
		if m == n.Address || n.RRClusterID != "" {
			continue
		}
		p := peer{Proto: "Mesh_" + id(m), Address: m, AS: n.AS, Export: "true"}
		p.Extra = "  import all;\n"
		// As confd: the node with the lower address waits (string order).
		if m > n.Address {
			p.Extra += "  passive on; # Mesh is unidirectional, peer will connect to us.\n"
		}
		if n.ListenPort != 0 {
			p.Port = n.ListenPort
		}
		peers = append(peers, p)
	}
	for _, np := range n.NodePeers {
		if np.Address == n.Address {
			continue
		}
		as := np.AS
		if as == 0 {
			as = n.AS
		}
		p := peer{Proto: "Node_" + id(np.Address), Address: np.Address, AS: as, Export: fmt.Sprint(as == n.AS)}
		if as == n.AS && n.RRClusterID != "" && np.RRClusterID != n.RRClusterID {
			p.Extra += "  rr client;\n  rr cluster id " + n.RRClusterID + ";\n"
		}
		p.Extra += "  import all;\n"
		if np.Address > n.Address {
			p.Extra += "  passive on; # Peering with a Calico node: it connects to us.\n"
		}
		peers = append(peers, p)
	}
	for _, gp := range n.Peers {
		if gp.AS == 0 {
			return "", fmt.Errorf("peer %s: no AS", gp.Address)
		}
		p := peer{Proto: "Global_" + id(gp.Address), Address: gp.Address, Port: gp.Port, AS: gp.AS, Export: fmt.Sprint(gp.AS == n.AS)}
		if gp.Port != 0 {
			p.Proto += fmt.Sprintf("_port_%d", gp.Port)
		}
		if gp.TTLSecurity > 0 {
			p.Extra += fmt.Sprintf("  ttl security on;\n  multihop %d;\n", gp.TTLSecurity)
		} else {
			p.Extra += "  ttl security off;\n  multihop;\n"
		}
		if gp.Password != "" {
			p.Extra += fmt.Sprintf("  password %q;\n", gp.Password)
		}
		switch gp.NextHopMode {
		case "", "Auto":
		case "Self":
			p.Extra += "  next hop self;\n"
		case "Keep":
			p.Extra += "  next hop keep;\n"
		default:
			return "", fmt.Errorf("peer %s: nextHopMode %q", gp.Address, gp.NextHopMode)
		}
		if gp.AS == n.AS && n.RRClusterID != "" {
			p.Extra += "  rr client;\n  rr cluster id " + n.RRClusterID + ";\n"
		}
		p.Extra += "  import filter { accept; };\n"
		peers = append(peers, p)
	}
	for _, b := range append(append([]string{}, n.Blocks...), n.PendingDeletion...) {
		p, err := netip.ParsePrefix(b)
		if err != nil {
			return "", fmt.Errorf("block %q: %w", b, err)
		}
		if p.Addr().Is6() != v6 {
			return "", fmt.Errorf("block %q: wrong address family for this BIRD", b)
		}
	}
	var b bytes.Buffer
	err := calicoBird.Execute(&b, map[string]any{"N": n, "Peers": peers, "V6": v6,
		"AllBlocks": append(append([]string{}, n.Blocks...), n.PendingDeletion...)})
	return b.String(), err
}

var calicoBird = template.Must(template.New("calico").Parse(`
{{- if .V6 -}}
# calico-node's bird6 configuration (confd's bird6.cfg with bird6_aggr.cfg and
# bird6_ipam.cfg in place of their includes), for BIRD 1.6's bird6.
{{- else -}}
# calico-node's BIRD configuration (confd's bird.cfg with bird_aggr.cfg and
# bird_ipam.cfg in place of their includes), for BIRD 1.6.
{{- end}}
{{- if .N.Log}}
log "{{.N.Log}}" all;
{{- else}}
log stderr all;
{{- end}}

function apply_communities ()
{
}

# ---- bird_aggr.cfg
{{- if .AllBlocks}}
protocol static {
   # IP blocks for this host.
{{- range .AllBlocks}}
   route {{.}} blackhole;
{{- end}}
}
{{- else}}
# No IP blocks or static routes for this host.
{{- end}}

# Aggregation of routes on this host; export the block, nothing beneath it.
function calico_aggr ()
{
{{- range .N.Blocks}}
      # Block {{.}} is confirmed
      if ( net = {{.}} ) then { accept; }
      if ( net ~ {{.}} ) then { reject; }
{{- end}}
{{- range .N.PendingDeletion}}
      # Block {{.}} is pendingDeletion
{{- end}}
}

# ---- bird_ipam.cfg
function reject_disabled_pools ()
{
{{- range .N.NoExportPools}}
  if ( net ~ {{.}} ) then { reject; }
{{- end}}
}

function reject_tunnel_routes () {
  # Don't export tunnel routes to other nodes, Felix programs them.
  if (defined(ifname)) then {
     if ((ifname ~ "*.cali") || (ifname ~ "*.calico")) then {
        reject;
     }
  }
}

function reject_local_routes () {
  if (defined(ifname)) then {
     if (ifname ~ "bpf*.cali") then {
        reject;
     }
  }
}

function calico_export_to_bgp_peers(bool internal_peer) {
  reject_disabled_pools();
  if (internal_peer) then {
    reject_tunnel_routes();
  }
  reject_local_routes();
  apply_communities();
  calico_aggr();
{{- range .N.Pools}}
  if ( net ~ {{.}} ) then {
    accept;
  }
{{- end}}
{{- range .N.NoExportPools}}
  # Skip {{.}} as BGP export is disabled for it
{{- end}}
}

filter calico_kernel_programming {
{{- range .N.Pools}}
  if ( net ~ {{.}} ) then {
    accept;
  }
{{- end}}
  accept;
}

# ---- bird.cfg
router id {{.N.RouterID}};
{{- if .N.ListenPort}}
# Set global listen_port
listen bgp port {{.N.ListenPort}};
{{- end}}

# Configure synchronization between routing tables and kernel.
protocol kernel {
  learn;             # Learn all alien routes from the kernel
  persist;           # Don't remove routes on bird shutdown
  scan time 2;       # Scan kernel routing table every 2 seconds
  import all;
  export filter calico_kernel_programming; # Default is export none
  graceful restart;
  merge paths on;    # Allow export multipath routes (ECMP)
}

# Watch interface up/down events.
protocol device {
  debug { states };
  scan time 2;    # Scan interfaces every 2 seconds
}

protocol direct {
  debug { states };
  interface -"cali*", -"kube-ipvs*", "*";
}

# Template for all BGP clients
template bgp bgp_template {
  debug { states };
  description "Connection to BGP peer";
  local as {{.N.AS}};
  gateway recursive; # This should be the default, but just in case.
  add paths on;
  graceful restart;  # See comment in kernel section about graceful restart.
  connect delay time 2;
  connect retry time 5;
  error wait time 5,30;
}
{{range .Peers}}
protocol bgp {{.Proto}} from bgp_template {
  neighbor {{.Address}} {{if .Port}}port {{.Port}} {{end}}as {{.AS}};
  source address {{$.N.Address}};  # The local address we use for the TCP connection
{{.Extra -}}
  export filter { calico_export_to_bgp_peers({{.Export}}); reject; };
}
{{end}}`))
