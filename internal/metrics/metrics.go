// Package metrics defines the daemon's own Prometheus collectors. HAProxy's
// traffic figures come from its built-in exporter on the stats port; these
// describe what the daemon decided and how long it took.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Daemon groups the collectors the sync loop updates.
type Daemon struct {
	Registry     *prometheus.Registry
	Reloads      *prometheus.CounterVec // reason, result
	RuntimeOps   *prometheus.CounterVec // kind (server, map, cert), result
	SyncSeconds  prometheus.Histogram
	Problems     prometheus.Gauge
	Quarantined  prometheus.Gauge
	Generation   prometheus.Gauge
	CacheObjects *prometheus.GaugeVec // kind
	Ready        prometheus.Gauge
	// Certificates is the expiry time (Unix seconds) of each served
	// certificate, by name ("<namespace>_<secret>" or "default").
	Certificates *prometheus.GaugeVec // name, secret
	// StatusLeader is 1 while this daemon writes Ingress status.
	StatusLeader prometheus.Gauge
	// ApplyFailures counts the passes that failed in a row (0 once one
	// succeeds); the loop backs off while it is not 0.
	ApplyFailures prometheus.Gauge
}

// New registers the daemon collectors and Go's runtime collectors.
func New() *Daemon {
	r := prometheus.NewRegistry()
	d := &Daemon{
		Registry: r,
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "perimeter_haproxy_reloads_total", Help: "HAProxy reloads by reason and result.",
		}, []string{"reason", "result"}),
		RuntimeOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "perimeter_haproxy_runtime_operations_total", Help: "HAProxy Runtime API commands sent instead of a reload, by kind (server, map, cert) and result.",
		}, []string{"kind", "result"}),
		SyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "perimeter_sync_duration_seconds", Help: "Time from a cache change to HAProxy applying it.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		Problems: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "perimeter_rejected_values", Help: "Objects or values currently rejected by validation.",
		}),
		Quarantined: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "perimeter_quarantined_objects", Help: "Objects whose configuration HAProxy refused and that are held at their last good state.",
		}),
		Generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "perimeter_config_generation", Help: "Number of desired states applied since start.",
		}),
		CacheObjects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "perimeter_cache_objects", Help: "Objects in the informer caches by kind.",
		}, []string{"kind"}),
		Ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "perimeter_ready", Help: "1 once caches are synced and HAProxy serves the first full configuration.",
		}),
		Certificates: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "perimeter_certificate_expiry_timestamp_seconds", Help: "Expiry (notAfter, Unix time) of each certificate the https frontend serves.",
		}, []string{"name", "secret"}),
		StatusLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "perimeter_status_leader", Help: "1 while this daemon holds the Lease and writes Ingress status.",
		}),
		ApplyFailures: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "perimeter_apply_failures", Help: "Consecutive failed attempts to apply the desired state (0 when the last one succeeded); retries back off while it is not 0.",
		}),
	}
	r.MustRegister(d.Reloads, d.RuntimeOps, d.SyncSeconds, d.Problems, d.Quarantined, d.Generation, d.CacheObjects, d.Ready, d.Certificates, d.StatusLeader, d.ApplyFailures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return d
}
