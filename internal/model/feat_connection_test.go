package model

import (
	"strings"
	"testing"
	"time"
)

func TestConnectionSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		cm   []string
		want ConnectionSettings
		// problem is a substring of the one problem the ConfigMap causes.
		problem string
	}{
		{name: "defaults"},
		{name: "server-close", cm: []string{"http-connection-mode=http-server-close"}, want: ConnectionSettings{Mode: ConnServerClose}},
		{name: "close", cm: []string{"http-connection-mode=httpclose"}, want: ConnectionSettings{Mode: ConnClose}},
		{name: "keep-alive is the default", cm: []string{"http-connection-mode=http-keep-alive"}},
		{name: "deprecated server-close", cm: []string{"http-server-close=true"}, want: ConnectionSettings{Mode: ConnServerClose}},
		{name: "deprecated false is no change", cm: []string{"http-server-close=false", "http-keep-alive=false"}},
		{name: "deprecated keep-alive wins over server-close", cm: []string{"http-server-close=true", "http-keep-alive=on"}},
		{
			name: "mode wins over the deprecated keys",
			cm:   []string{"http-server-close=true", "http-keep-alive=true", "http-connection-mode=httpclose"},
			want: ConnectionSettings{Mode: ConnClose},
		},
		{
			name: "invalid mode keeps the deprecated key's", cm: []string{"http-server-close=true", "http-connection-mode=close"},
			want: ConnectionSettings{Mode: ConnServerClose}, problem: `key http-connection-mode="close": unknown value`,
		},
		{
			name: "fin timeouts and logasap",
			cm:   []string{"timeout-client-fin=3s", "timeout-server-fin=1500ms", "logasap=true"},
			want: ConnectionSettings{TimeoutClientFin: 3 * time.Second, TimeoutServerFin: 1500 * time.Millisecond, LogASAP: true},
		},
		{name: "invalid fin timeout", cm: []string{"timeout-client-fin=soon"}, problem: `key timeout-client-fin="soon"`},
		{name: "invalid logasap", cm: []string{"logasap=sometimes"}, problem: `key logasap="sometimes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, d := featureBackend(t, Options{}, configMap(tc.cm...))
			if got := d.Global.Connection; got != tc.want {
				t.Errorf("connection settings %+v, want %+v", got, tc.want)
			}
			var probs []string
			for _, p := range d.Problems {
				probs = append(probs, p.Reason+": "+p.Message)
			}
			switch {
			case tc.problem == "" && len(probs) != 0:
				t.Errorf("problems %q, want none", probs)
			case tc.problem != "" && (len(probs) != 1 || !strings.Contains(probs[0], ReasonInvalidConfigMapKey+": "+tc.problem)):
				t.Errorf("problems %q, want one with %q", probs, tc.problem)
			}
		})
	}
}
