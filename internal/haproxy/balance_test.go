package haproxy

import (
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// Every form of load-balance the model accepts is one HAProxy 2.6 takes.
func TestRenderBalanceOptions(t *testing.T) {
	d := featuresDesired()
	forms := []string{"uri len 10 depth 2 whole path-only", "url_param userid check_post", "hdr(Host) use_domain_only", "random(3)"}
	for i, form := range forms {
		d.Backends[i].Balance = form
	}
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
	for _, form := range forms {
		if !strings.Contains(cfg, "balance "+form+"\n") {
			t.Errorf("config lacks balance %s", form)
		}
	}
}
