package routes

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	installed       prometheus.Gauge
	installedFamily *prometheus.GaugeVec
	stale           prometheus.Gauge
	refused         prometheus.Gauge
	errors          *prometheus.CounterVec
	netlinkSeconds  prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		installed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "perimeter_routes_installed",
			Help: "Pod routes learned by BGP and present in the kernel.",
		}),
		installedFamily: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "perimeter_routes_installed_by_family",
			Help: "Pod routes learned by BGP and present in the kernel, by address family (ipv4, ipv6).",
		}, []string{"family"}),
		stale: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "perimeter_routes_stale",
			Help: "Routes kept from a previous run until BGP re-announces them or the sweep removes them.",
		}),
		refused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "perimeter_routes_refused",
			Help: "Learned routes not installed: next hop unreachable, or a route not ours holds the destination.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "perimeter_routes_netlink_errors_total",
			Help: "Failed netlink route writes, by operation.",
		}, []string{"op"}),
		netlinkSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "perimeter_routes_write_seconds",
			Help:    "Time of one netlink route write.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 8),
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.installed, m.installedFamily, m.stale, m.refused, m.errors, m.netlinkSeconds} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register route metrics: %w", err)
		}
	}
	return m, nil
}
