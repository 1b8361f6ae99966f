package config

import (
	"slices"
	"strings"
	"testing"
)

// The flags of a unit written for the peer parse, and those that change
// nothing are reported for the daemon's log.
func TestPeerFlagsAccepted(t *testing.T) {
	args := []string{"-e", "-t", "--configmap-patternfiles=haproxy-controller/patterns", "-p", "--prometheus", "--kubeconfig=/etc/perimeter/kubeconfig",
		"--configmap=haproxy-controller/haproxy-kubernetes-ingress", "--publish-service=haproxy-controller/haproxy-kubernetes-ingress",
		"--disable-config-snippets=backend", "--config-snippets=global,backend", "--cache-resync-period=5m",
		"--default-backend-port=6061", "--localpeer-port=10000", "--channel-size=600", "--initial-sync-period=1s",
		"--http-bind-thread=1-1", "--https-bind-thread=1-1", "--healthz-bind-thread=1-1", "--stats-bind-thread=1-1",
		"--gateway-controller-name=haproxy.org/gateway-controller", "--disable-quic", "--quic-bind-port=8443", "--quic-announce-port=443",
		"--disable-writing-only-if-reload", "--with-s6-overlay", "--with-pebble", "--with-gopherd", "--experimental=use-ingress-merge",
		"--custom-validation-rules=haproxy-controller/rules", "--enable-custom-annotations-on-ingress", "--disable-service-external-name",
		"--sync-period=5s", "--log=trace"}
	c, src, err := parse(t, "", args...)
	if err != nil {
		t.Fatal(err)
	}
	if !c.External || !c.Pprof || !c.DisableServiceExternalName || c.CacheResyncPeriod.String() != "5m0s" || c.PublishService != "haproxy-controller/haproxy-kubernetes-ingress" {
		t.Fatalf("implemented flags not applied: %+v", c)
	}
	if got := c.SnippetKinds(); !slices.Equal(got, []string{"global"}) {
		t.Fatalf("snippet kinds %v, want [global]", got)
	}
	var flags []string
	for _, n := range src.NoEffect() {
		if n.Reason == "" {
			t.Errorf("%s: no reason", n.Flag)
		}
		flags = append(flags, n.Flag)
	}
	want := []string{"--channel-size", "--custom-validation-rules", "--default-backend-port", "--disable-quic",
		"--disable-writing-only-if-reload", "--enable-custom-annotations-on-ingress",
		"--experimental", "--gateway-controller-name", "--healthz-bind-thread", "--http-bind-thread", "--https-bind-thread",
		"--initial-sync-period", "--localpeer-port", "--prometheus", "--quic-announce-port", "--quic-bind-port",
		"--stats-bind-thread", "--with-gopherd", "--with-pebble", "--with-s6-overlay", "-t"}
	if !slices.Equal(flags, want) {
		t.Fatalf("no-effect notices for\n%v\nwant\n%v", flags, want)
	}
	// Every no-effect flag is in the reference's group, once.
	if len(compatOrder) != len(noEffect)+len(jobModes) {
		t.Fatalf("compatOrder has %d flags, noEffect and jobModes %d", len(compatOrder), len(noEffect)+len(jobModes))
	}
	for _, n := range compatOrder {
		if _, ok := noEffect[n]; !ok && !jobModes[n] {
			t.Errorf("%s in compatOrder without a reason", n)
		}
	}
}

func TestDisableConfigSnippets(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
		bad  string
	}{
		{[]string{"--config-snippets=global,backend", "--disable-config-snippets=all"}, nil, ""},
		{[]string{"--config-snippets=global,backend", "--disable-config-snippets=frontend,global"}, []string{"backend"}, ""},
		{[]string{"--disable-config-snippets=global"}, nil, ""},
		{[]string{"--disable-config-snippets=stats"}, nil, `--disable-config-snippets="stats": unknown kind`},
		{[]string{"--publish-service=nonamespace"}, nil, `--publish-service="nonamespace": want NAMESPACE/NAME`},
	} {
		c, _, err := parse(t, "", tc.args...)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.bad)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
		} else if got := c.SnippetKinds(); !slices.Equal(got, tc.want) {
			t.Errorf("%v: kinds %v, want %v", tc.args, got, tc.want)
		}
	}
}

// A no-effect flag is refused in the file: it belongs to command lines
// written for the peer, not to Perimeter's own configuration.
func TestNoEffectFlagsNotInFile(t *testing.T) {
	if _, _, err := parse(t, "prometheus: true\n"); err == nil || !strings.Contains(err.Error(), "a command-line flag only") {
		t.Fatalf("prometheus in the file: %v", err)
	}
	if _, _, err := parse(t, "e: true\n"); err == nil || !strings.Contains(err.Error(), "a command-line flag only") {
		t.Fatalf("e in the file: %v", err)
	}
}
