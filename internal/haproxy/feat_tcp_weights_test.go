package haproxy

import (
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// TestTCPBackendLines: weighted shares map consecutive ranges of one draw
// per connection; a refused share's range is rejected wherever it lies.
func TestTCPBackendLines(t *testing.T) {
	for _, c := range []struct {
		name string
		t    model.TCPService
		want string
	}{
		{"one backend", model.TCPService{Port: 9300, Backend: "a"}, "  default_backend a\n"},
		{"refused in the middle", model.TCPService{Port: 9300, Backend: "c", Shares: []model.TCPShare{
			{Backend: "a", Weight: 5}, {Weight: 1}, {Backend: "b", Weight: 2}, {Backend: "c", Weight: 2}, {Weight: 3},
		}}, "" +
			"  tcp-request content set-var(sess.tcp_share) rand(13)\n" +
			"  tcp-request content reject if { var(sess.tcp_share) -m int ge 5 } { var(sess.tcp_share) -m int lt 6 }\n" +
			"  tcp-request content reject if { var(sess.tcp_share) -m int ge 10 } { var(sess.tcp_share) -m int lt 13 }\n" +
			"  use_backend a if { var(sess.tcp_share) -m int lt 5 }\n" +
			"  use_backend b if { var(sess.tcp_share) -m int lt 8 }\n" +
			"  default_backend c\n"},
	} {
		if got := tcpBackendLines(c.t); got != c.want {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
}
