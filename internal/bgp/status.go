package bgp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	api "github.com/osrg/gobgp/v3/api"

	"github.com/perimeter-ingress/perimeter/internal/routes"
)

// Status is a snapshot of the speaker for `perimeter bgp status`.
type Status struct {
	RouterID   netip.Addr `json:"routerID"`
	LocalAS    uint32     `json:"localAS"`
	ListenPort int        `json:"listenPort"`
	Running    bool       `json:"running"`
	// Pools are the accepted pod CIDRs; OwnershipChecked says whether
	// blocks are matched against BlockAffinities (OwnedBlocks of them).
	Pools            []Pool `json:"pools"`
	OwnershipChecked bool   `json:"ownershipChecked"`
	OwnedBlocks      int    `json:"ownedBlocks"`
	// NodePodCIDRs are the Nodes' spec.podCIDRs owned by their Node
	// (host-local IPAM).
	NodePodCIDRs int            `json:"nodePodCIDRs"`
	StaleSwept   bool           `json:"staleSwept"`
	Peers        []PeerStatus   `json:"peers"`
	Routes       []RouteStatus  `json:"routes"`
	Rejected     []RejectedPath `json:"rejected"`
}

// PeerStatus is one BGP neighbour.
type PeerStatus struct {
	Address netip.Addr `json:"address"`
	AS      uint32     `json:"as"`
	// Family is what the session carries: ipv4 or ipv6 unicast, by the
	// peer address's family (Calico's bird and bird6).
	Family string `json:"family"`
	Kind   string `json:"kind"`
	Node   string `json:"node,omitempty"`
	State  string `json:"state"`
	// Since is when the session entered State (uptime when Established).
	Since    time.Time `json:"since,omitzero"`
	Received int       `json:"received"`
	Accepted int       `json:"accepted"`
	Rejected int       `json:"rejected"`
	EndOfRIB bool      `json:"endOfRIB"`
	Problem  string    `json:"problem,omitempty"`
}

// RouteStatus is a learned route and what the kernel side made of it.
type RouteStatus struct {
	routes.Status
	// Peer announced the best path (invalid for stale routes).
	Peer netip.Addr `json:"peer,omitzero"`
}

// RejectedPath is an announcement the import policy refused.
type RejectedPath struct {
	Peer    netip.Addr   `json:"peer"`
	Prefix  netip.Prefix `json:"prefix"`
	NextHop netip.Addr   `json:"nextHop"`
	Reason  Reason       `json:"reason"`
	Owner   string       `json:"owner,omitempty"`
	// Expected marks what a healthy Calico cluster sends and Perimeter
	// ignores (another node's block re-announced, a service address):
	// counted, not logged at Warn.
	Expected bool `json:"expected,omitempty"`
}

// Status returns the current peers, routes and rejections.
func (s *Speaker) Status() Status {
	s.mu.Lock()
	srv := s.srv
	running := srv != nil && !s.stopping
	s.mu.Unlock()

	// Live session data (uptime, dynamic neighbours) comes from GoBGP.
	live := map[netip.Addr]*api.Peer{}
	if running {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
			if a, err := netip.ParseAddr(p.GetState().GetNeighborAddress()); err == nil {
				live[a.Unmap()] = p
			}
		})
		cancel()
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{
		RouterID: s.cfg.RouterID, LocalAS: s.cfg.LocalAS, ListenPort: s.cfg.ListenPort, Running: running,
		Pools: s.policy.Pools(), OwnershipChecked: s.policy.OwnershipKnown(), OwnedBlocks: len(s.policy.owners),
		NodePodCIDRs: len(s.policy.podCIDRs),
		StaleSwept:   s.swept,
	}
	addrs := map[netip.Addr]bool{}
	for a := range s.peers {
		addrs[a] = true
	}
	for a := range s.problems {
		addrs[a] = true
	}
	for a := range live {
		addrs[a] = true
	}
	for a := range s.tripped {
		addrs[a] = true
	}
	for a := range addrs {
		ps := PeerStatus{Address: a, State: "Idle", Family: familyName(a)}
		if p, ok := s.peers[a]; ok {
			ps.AS, ps.Kind, ps.Node = p.AS, p.Kind, p.Node
		} else {
			ps.Kind = kindPassive
		}
		if pr, ok := s.problems[a]; ok {
			ps.Problem, ps.State, ps.Kind = pr, "Unconfigured", kindFor(s.cfg, a)
		}
		if until, ok := s.tripped[a]; ok {
			ps.Problem = fmt.Sprintf("more than %d prefixes announced; dropped until %s",
				s.cfg.MaxPrefixes, until.Local().Format("15:04:05"))
		}
		if ss := s.sessions[a]; ss != nil {
			ps.State, ps.Since, ps.EndOfRIB = stateName(ss.state), ss.since, ss.eor
			if ss.state == api.PeerState_UNKNOWN {
				ps.State = "Idle"
			}
			if ss.as != 0 {
				ps.AS = ss.as
			}
		}
		if lp, ok := live[a]; ok {
			ps.State = stateName(lp.GetState().GetSessionState())
			if as := lp.GetState().GetPeerAsn(); as != 0 {
				ps.AS = as
			}
			if up := lp.GetTimers().GetState().GetUptime(); up != nil && lp.GetState().GetSessionState() == api.PeerState_ESTABLISHED {
				ps.Since = up.AsTime()
			}
		}
		for p, r := range s.adjIn[a] {
			ps.Received++
			if r.verdict.Accept {
				ps.Accepted++
			} else {
				ps.Rejected++
				st.Rejected = append(st.Rejected, RejectedPath{Peer: a, Prefix: p, NextHop: r.nextHop,
					Reason: r.verdict.Reason, Owner: r.verdict.Owner, Expected: s.expectedRejection(r.nextHop, r.verdict)})
			}
		}
		st.Peers = append(st.Peers, ps)
	}
	slices.SortFunc(st.Peers, func(a, b PeerStatus) int { return a.Address.Compare(b.Address) })
	slices.SortFunc(st.Rejected, func(a, b RejectedPath) int {
		if c := comparePrefix(a.Prefix, b.Prefix); c != 0 {
			return c
		}
		return a.Peer.Compare(b.Peer)
	})
	for _, r := range s.routes.Routes() {
		st.Routes = append(st.Routes, RouteStatus{Status: r, Peer: s.best[r.Dst].peer})
	}
	return st
}

func kindFor(cfg Config, a netip.Addr) string {
	for _, p := range cfg.Peers {
		if p.Address == a {
			return kindStatic
		}
	}
	return kindNode
}

// WriteText formats st like `birdc show protocols` followed by
// `birdc show route`.
func (st Status) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "BGP router ID %s, local AS %d, port %d", st.RouterID, st.LocalAS, st.ListenPort)
	if !st.Running {
		fmt.Fprint(tw, " (not running)")
	}
	fmt.Fprintln(tw)
	var pools []string
	for _, p := range st.Pools {
		pools = append(pools, fmt.Sprintf("%s (/%d blocks)", p.CIDR, p.BlockSize))
	}
	if len(pools) == 0 {
		pools = []string{"none: every route is rejected"}
	}
	fmt.Fprintf(tw, "Pod CIDRs: %s\n", strings.Join(pools, ", "))
	if st.NodePodCIDRs > 0 {
		fmt.Fprintf(tw, "Node podCIDRs: %d, each accepted from its Node only\n", st.NodePodCIDRs)
	}
	if st.OwnershipChecked {
		fmt.Fprintf(tw, "Block ownership: checked against %d block affinities\n", st.OwnedBlocks)
	} else {
		fmt.Fprintln(tw, "Block ownership: not checked (no BlockAffinity data)")
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "Peer\tAS\tFamily\tKind\tNode\tState\tSince\tRecv\tAcc\tRej\tEoR\tInfo")
	for _, p := range st.Peers {
		since := "-"
		if !p.Since.IsZero() {
			since = p.Since.Local().Format("2006-01-02 15:04:05")
		}
		eor := "-"
		if p.EndOfRIB {
			eor = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", p.Address, p.AS, p.Family, p.Kind, dash(p.Node),
			p.State, since, p.Received, p.Accepted, p.Rejected, eor, p.Problem)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "Route\tVia\tGateway\tPeer\tState\tInfo")
	for _, r := range st.Routes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Dst, addrOrDash(r.NextHop), addrOrDash(r.Gateway),
			addrOrDash(r.Peer), r.State, r.Error)
	}
	if len(st.Rejected) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "Rejected\tPeer\tVia\tReason\tOwner\tExpected")
		for _, r := range st.Rejected {
			exp := "-"
			if r.Expected {
				exp = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Prefix, r.Peer, addrOrDash(r.NextHop), r.Reason, dash(r.Owner), exp)
		}
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func addrOrDash(a netip.Addr) string {
	if !a.IsValid() {
		return "-"
	}
	return a.String()
}

// Handler serves Status: text by default, JSON with ?format=json or
// Accept: application/json.
func (s *Speaker) Handler() http.Handler { return statusHandler(s.Status) }

// statusHandler serves what status returns, as text or JSON: the speaker's
// and the upstream side's status pages are the same page.
func statusHandler[T interface{ WriteText(io.Writer) error }](status func() T) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		st := status()
		if r.URL.Query().Get("format") == "json" || strings.Contains(r.Header.Get("Accept"), "application/json") {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(st)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_ = st.WriteText(w)
	})
}
