package haproxy

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// TestRenderConnectionDefaults: each connection mode, the fin timeouts and
// logasap land in the defaults section, and HAProxy accepts the result.
func TestRenderConnectionDefaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     model.ConnectionSettings
		want  []string
		avoid []string
	}{
		{name: "keep-alive", avoid: []string{"http-server-close", "httpclose", "client-fin", "server-fin", "logasap"}},
		{name: "server-close", c: model.ConnectionSettings{Mode: model.ConnServerClose}, want: []string{"option http-server-close"}, avoid: []string{"httpclose"}},
		{name: "close", c: model.ConnectionSettings{Mode: model.ConnClose}, want: []string{"option httpclose"}, avoid: []string{"http-server-close"}},
		{
			name: "fin timeouts and logasap",
			c:    model.ConnectionSettings{TimeoutClientFin: 3 * time.Second, TimeoutServerFin: 1500 * time.Millisecond, LogASAP: true},
			want: []string{"timeout client-fin 3s", "timeout server-fin 1500ms", "option logasap"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := goldenRenderer(Options{DisableIPv6: true})
			d := featuresDesired()
			d.Global.Connection = tc.c
			st, problems := desiredState(d)
			if len(problems) != 0 {
				t.Fatalf("problems: %v", problems)
			}
			withSlots(emptyState(), st)
			cfg, err := r.config(st, nil)
			if err != nil {
				t.Fatal(err)
			}
			defaults := section(cfg, "defaults perimeter")
			for _, w := range tc.want {
				if !slices.Contains(strings.Split(defaults, "\n"), "  "+w) {
					t.Errorf("defaults lack %q:\n%s", w, defaults)
				}
			}
			for _, a := range tc.avoid {
				if strings.Contains(cfg, a) {
					t.Errorf("config has %q", a)
				}
			}
			haproxyCheck(t, cfg, map[string]string{model.MapExact: "", model.MapPrefix: ""})
		})
	}
}
