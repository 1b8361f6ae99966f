package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestFDLimit: started with a low RLIMIT_NOFILE (prlimit, as a shell, a
// container or another init would give it) against 1,000 backends, the
// daemon serves every host. With slots sized to need, maxconn is what the
// limit leaves after the checked slots; with the peer's 42 slots per
// backend (servers-increment), the 42,000 checked slots cannot fit, so
// health checks give way and say so, where HAProxy used to refuse every
// configuration ("Cannot raise FD limit").
func TestFDLimit(t *testing.T) {
	e := newEnv(t)
	startScalePods(t)
	const n = 1000
	if err := e.scaleObjects(context.Background(), 0, n, 1); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, limit, increment string
		wantMaxconn            string
		wantChecks             bool
	}{
		// 1,000 x 4 slots: 8192 - 1000 reserved - 4000 leaves 1500 connections.
		{name: "slots sized to need", limit: "8192", wantMaxconn: "1500", wantChecks: true},
		{name: "42 slots per backend", limit: "20000", increment: "42", wantMaxconn: "9500"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cm := map[string]string{"servers-increment": tt.increment}
			if tt.increment == "" {
				cm = map[string]string{"load-balance": "roundrobin"}
			}
			e.configMap("fdlimit", cm)
			sub := &env{t: t, c: e.c, ns: e.ns, prefix: []string{"prlimit", "--nofile=" + tt.limit + ":" + tt.limit, "--"}}
			d := sub.startDaemon("--configmap=" + e.ns + "/fdlimit")
			for _, i := range []int{0, n / 2, n - 1} {
				d.served(fmt.Sprintf("s%d.test", i), time.Minute)
			}
			cfg := d.config()
			if !regexp.MustCompile(`(?m)^\s+maxconn ` + tt.wantMaxconn + `$`).MatchString(cfg) {
				t.Errorf("haproxy.cfg has no global maxconn %s", tt.wantMaxconn)
			}
			checks := regexp.MustCompile(`(?m)^\s+default-server check`).MatchString(cfg)
			if checks != tt.wantChecks {
				t.Errorf("servers with health checks: %v, want %v", checks, tt.wantChecks)
			}
			out := d.out.String()
			if !strings.Contains(out, "file descriptor limit") || !strings.Contains(out, "limit="+tt.limit) {
				t.Errorf("no start-up line about the file descriptor limit %s:\n%s", tt.limit, tail(out, 20))
			}
			if off := strings.Contains(out, "health checks are off"); off == tt.wantChecks {
				t.Errorf("log says checks are off: %v, want %v", off, !tt.wantChecks)
			}
			if strings.Contains(out, "Cannot raise FD limit") {
				t.Errorf("HAProxy refused a configuration for its FD limit:\n%s", tail(out, 20))
			}
			d.reloads() // the master CLI answers
			d.stop()
		})
	}
}
