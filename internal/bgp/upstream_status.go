package bgp

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"text/tabwriter"
	"time"
)

// UpstreamStatus is what `perimeter bgp status` shows of the upstream side.
type UpstreamStatus struct {
	LocalAS     uint32               `json:"localAS"`
	RouterID    netip.Addr           `json:"routerID"`
	HoldTime    string               `json:"holdTime"`
	RestartTime string               `json:"restartTime"`
	Restarting  bool                 `json:"restarting"`
	Peers       []UpstreamPeerStatus `json:"peers"`
	Addresses   []netip.Prefix       `json:"addresses"`
	// Announced, with Reason ("serving" when announced, else why not) and
	// Detail, since Since.
	Announced   bool      `json:"announced"`
	Reason      string    `json:"reason"`
	Detail      string    `json:"detail"`
	Since       time.Time `json:"since"`
	Transitions int       `json:"transitions"`
}

// UpstreamPeerStatus is one upstream session.
type UpstreamPeerStatus struct {
	Address netip.Addr `json:"address"`
	AS      uint32     `json:"as"`
	State   string     `json:"state"`
	Since   time.Time  `json:"since,omitzero"`
	Problem string     `json:"problem,omitempty"`
}

// Status returns the sessions and what is announced.
func (u *Upstream) Status() UpstreamStatus {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := UpstreamStatus{LocalAS: u.cfg.LocalAS, RouterID: u.cfg.RouterID, HoldTime: u.cfg.HoldTime.String(),
		RestartTime: u.cfg.RestartTime.String(), Restarting: u.cfg.Restarting,
		Addresses: slices.Clone(u.cfg.Addresses), Announced: u.announced, Reason: u.reason, Detail: u.detail,
		Since: u.since, Transitions: u.transitions}
	if u.cfg.RestartTime < 0 {
		st.RestartTime = "off"
	}
	for _, p := range u.cfg.Peers {
		ps := UpstreamPeerStatus{Address: p.Address, AS: p.AS, State: "Idle", Problem: u.problems[p.Address]}
		if s := u.sessions[p.Address]; s != nil {
			ps.State, ps.Since = stateName(s.state), s.since
		}
		st.Peers = append(st.Peers, ps)
	}
	return st
}

// WriteText renders the status like the rest of `perimeter bgp status`.
func (st UpstreamStatus) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "\nUpstream peers: AS %d, router ID %s, hold time %s, graceful restart %s\n",
		st.LocalAS, st.RouterID, st.HoldTime, st.RestartTime)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tAS\tSTATE\tSINCE\tPROBLEM")
	for _, p := range st.Peers {
		since := "-"
		if !p.Since.IsZero() {
			since = p.Since.Format(time.TimeOnly)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", p.Address, p.AS, p.State, since, p.Problem)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nAnnounce addresses:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ADDRESS\tSTATE\tWHY")
	state := "announced since " + st.Since.Format(time.TimeOnly)
	why := st.Detail
	if !st.Announced {
		state = "withdrawn since " + st.Since.Format(time.TimeOnly)
		why = st.Reason + ": " + st.Detail
	}
	for _, a := range st.Addresses {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", a, state, why)
	}
	return tw.Flush()
}

// Handler serves Status: text by default, JSON with ?format=json.
func (u *Upstream) Handler() http.Handler { return statusHandler(u.Status) }
