package e2e

import (
	"testing"
	"time"
)

// BenchmarkHAFailover prints what each failure of one of two edges costs a
// client sending through the router (docs/ha.md quotes these figures):
// graceful stop (requests failed during the stop, which must be none, and
// when the edge comes back; connects the SYN gate delayed), rolling hand-over restart, HAProxy killed, crash
// with and without graceful restart, freeze.
func BenchmarkHAFailover(b *testing.B) {
	l := haSetup(b)
	for i := 0; i < b.N; i++ {
		g := haGraceful(b, l)
		b.ReportMetric(float64(g.stopFailed), "graceful-failed")
		b.ReportMetric(float64(g.returnFailed), "graceful-return-failed")
		b.ReportMetric(ms(g.withdrawn), "graceful-withdraw-ms")
		b.ReportMetric(float64(g.delayed), "graceful-delayed-connects")
		b.ReportMetric(ms(g.slowest), "graceful-slowest-ms")
		b.Log(g)

		rfailed, rsent, gaps := haRolling(b, l)
		b.ReportMetric(float64(rfailed), "handover-failed")
		b.ReportMetric(float64(len(gaps)), "handover-withdrawals")
		b.ReportMetric(ms(l.takeover), "handover-session-back-ms")
		b.Logf("rolling hand-over: %d requests, %d failed, withdrawn %d times", rsent, rfailed, len(gaps))

		df, ds, dgaps := haDaemonCrash(b, l)
		b.ReportMetric(float64(df), "daemon-crash-failed")
		b.ReportMetric(float64(len(dgaps)), "daemon-crash-withdrawals")
		b.Logf("daemon killed, HAProxy alive: %d requests, %d failed, withdrawn %d times", ds, df, len(dgaps))

		down, back := haKillHAProxy(b, l, l.edges[1])
		b.ReportMetric(ms(down), "haproxy-kill-withdraw-ms")
		b.ReportMetric(ms(back), "haproxy-kill-back-ms")

		gr := haCrash(b, l)
		b.ReportMetric(float64(gr.failed), "crash-gr-failed")
		b.ReportMetric(ms(gr.outage), "crash-gr-outage-ms")
		b.Logf("crash, graceful restart on: %d of %d failed, last failure %s after the kill", gr.failed, gr.sent, gr.outage)
		plain := haCrash(b, l, "--bgp-upstream-restart-time=0")
		b.ReportMetric(float64(plain.failed), "crash-failed")
		b.ReportMetric(ms(plain.withdrawn), "crash-converge-ms")
		b.ReportMetric(ms(plain.outage), "crash-outage-ms")
		b.Logf("crash, graceful restart off: %d of %d failed, router converged after %s, last failure %s after the kill",
			plain.failed, plain.sent, plain.withdrawn, plain.outage)

		b.ReportMetric(ms(haFreeze(b, l)), "freeze-withdraw-ms")
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
