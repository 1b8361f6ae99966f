package app

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/perimeter-ingress/perimeter/internal/metrics"
	"github.com/perimeter-ingress/perimeter/internal/model"
)

// TestCertificateMetricsSkipRefused: a certificate HAProxy refused is not
// served, so it has no expiry metric.
func TestCertificateMetricsSkipRefused(t *testing.T) {
	m := metrics.New()
	good := &model.Certificate{Name: "victim_shop", Secret: model.ObjectRef{Kind: "Secret", Namespace: "victim", Name: "shop"}, NotAfter: time.Unix(2e9, 0)}
	bad := &model.Certificate{Name: "mallory_evil", Secret: model.ObjectRef{Kind: "Secret", Namespace: "mallory", Name: "evil"}, NotAfter: time.Unix(2e9, 0)}
	certificateMetrics(m, model.TLS{Certificates: []*model.Certificate{good, bad}}, []model.Problem{
		{Object: bad.Secret, Reason: model.ReasonInvalidSecret, Message: "haproxy refused the certificate of Secret evil"},
		{Object: model.ObjectRef{Kind: "Ingress", Namespace: "victim", Name: "shop"}, Reason: model.ReasonInvalidSecret},
	})
	if n := testutil.CollectAndCount(m.Certificates); n != 1 {
		t.Fatalf("%d certificate series, want the victim's only", n)
	}
	if v := testutil.ToFloat64(m.Certificates.WithLabelValues("victim_shop", "victim/shop")); v != 2e9 {
		t.Fatalf("victim's expiry %v", v)
	}
}
