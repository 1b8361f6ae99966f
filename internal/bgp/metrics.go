package bgp

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	peerState     *prometheus.GaugeVec
	peerUp        *prometheus.GaugeVec
	received      *prometheus.GaugeVec
	accepted      *prometheus.GaugeVec
	rejected      *prometheus.GaugeVec
	rejectedTotal *prometheus.CounterVec
	bestPaths     prometheus.Gauge
	bestFamily    *prometheus.GaugeVec
	policyUpdates prometheus.Counter
	maxPrefixes   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	peer := []string{"peer"}
	m := &metrics{
		peerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "perimeter_bgp_peer_state",
			Help: "BGP session state per peer (RFC 4271: 1 Idle, 2 Connect, 3 Active, 4 OpenSent, 5 OpenConfirm, 6 Established).",
		}, peer),
		peerUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "perimeter_bgp_peer_up",
			Help: "1 when the BGP session with the peer is established.",
		}, peer),
		received: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "perimeter_bgp_prefixes_received",
			Help: "Prefixes currently announced by the peer.",
		}, peer),
		accepted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "perimeter_bgp_prefixes_accepted",
			Help: "Prefixes from the peer that pass the import policy.",
		}, peer),
		rejected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "perimeter_bgp_prefixes_rejected",
			Help: "Prefixes from the peer that the import policy rejects.",
		}, peer),
		rejectedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "perimeter_bgp_prefixes_rejected_total",
			Help: "Announcements rejected by the import policy, by peer and reason.",
		}, []string{"peer", "reason"}),
		bestPaths: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "perimeter_bgp_best_paths",
			Help: "Prefixes with an accepted best path (handed to the route manager).",
		}),
		bestFamily: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "perimeter_bgp_best_paths_by_family",
			Help: "Prefixes with an accepted best path, by address family (ipv4, ipv6).",
		}, []string{"family"}),
		maxPrefixes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "perimeter_bgp_max_prefixes_exceeded_total",
			Help: "Sessions dropped because the peer announced more than the maximum number of prefixes.",
		}, peer),
		policyUpdates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "perimeter_bgp_policy_updates_total",
			Help: "Import policy changes applied to GoBGP (pools, block affinities or nodes changed).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.peerState, m.peerUp, m.received, m.accepted, m.rejected,
		m.rejectedTotal, m.bestPaths, m.bestFamily, m.policyUpdates, m.maxPrefixes} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register BGP metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) forget(peer string) {
	for _, v := range []*prometheus.GaugeVec{m.peerState, m.peerUp, m.received, m.accepted, m.rejected} {
		v.DeleteLabelValues(peer)
	}
	m.rejectedTotal.DeletePartialMatch(prometheus.Labels{"peer": peer})
}
