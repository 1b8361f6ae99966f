package haproxy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// TestTCPServiceVerifiesServers: server-ca on a TCP service's Service
// reaches its backend's server line as verify required with the CA file,
// never verify none.
func TestTCPServiceVerifiesServers(t *testing.T) {
	port := int32(5432)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "pg", Annotations: map[string]string{"haproxy.org/server-ca": "pg-ca"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "sql", Port: port, Protocol: corev1.ProtocolTCP}}},
	}
	name, ready := "sql", true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "db", Name: "pg-1", Labels: map[string]string{discoveryv1.LabelServiceName: "pg"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"198.18.7.10"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	ca := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "pg-ca"},
		Data: map[string][]byte{"ca.crt": certOnly(testPEM(t, "pg CA"))}}
	tcp := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ingress", Name: "tcp"}, Data: map[string]string{"15432": "db/pg:5432"}}
	d := model.Build(&model.Snapshot{TCPServices: tcp, Services: []*corev1.Service{svc},
		EndpointSlices: []*discoveryv1.EndpointSlice{slice}, Secrets: []*corev1.Secret{ca}}, model.Options{})
	if len(d.Problems) != 0 {
		t.Fatalf("problems: %v", d.Problems)
	}
	st, problems := desiredState(d)
	if len(problems) != 0 {
		t.Fatalf("driver problems: %v", problems)
	}
	withSlots(emptyState(), st)
	r := goldenRenderer(Options{DisableIPv6: true})
	cfg, err := r.config(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(cfg, "\nbackend tcp15432_db_pg_5432 ")
	if i < 0 {
		t.Fatalf("no TCP backend in:\n%s", cfg)
	}
	section := cfg[i+1:]
	if j := strings.Index(section, "\n\n"); j > 0 {
		section = section[:j]
	}
	if !strings.Contains(section, "ssl verify required ca-file ") || strings.Contains(section, "verify none") {
		t.Errorf("TCP backend does not verify its servers:\n%s", section)
	}
}
