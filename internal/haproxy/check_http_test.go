package haproxy

import (
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// The HTTP-version form of check-http renders as HAProxy 2.6 takes it
// without a deprecation warning: the version on option httpchk, the Host
// header on http-check send.
func TestRenderCheckHTTPVersion(t *testing.T) {
	d := featuresDesired()
	d.Backends[0].Features.CheckHTTP = model.HTTPCheck{Method: "HEAD", Path: "/healthz", Version: "HTTP/1.1", Host: "www.example:8080"}
	r := goldenRenderer(Options{DisableIPv6: true})
	st, problems := desiredState(d)
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	withSlots(emptyState(), st)
	cfg, err := r.config(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	haproxyCheck(t, cfg, map[string]string{model.MapExact: "", model.MapPrefix: ""})
	for _, want := range []string{"option httpchk HEAD /healthz HTTP/1.1\n", "http-check send hdr Host www.example:8080\n"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q", want)
		}
	}
	// A value the model should never give is dropped, not rendered.
	var rejected []string
	got := checkedFeatures(model.BackendFeatures{CheckHTTP: model.HTTPCheck{Method: "GET", Path: "/", Version: "HTTP/1.1", Host: "a b"}},
		func(format string, a ...any) { rejected = append(rejected, format) })
	if got.CheckHTTP.Path != "" || len(rejected) != 1 {
		t.Fatalf("bad Host kept: %+v, rejected %v", got.CheckHTTP, rejected)
	}
}
