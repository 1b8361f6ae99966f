package main

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/config"
)

// The flag table in docs/ is the operator's reference: every flag must be
// there, and nothing that no longer exists.
func TestFlagsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var c config.Config
	fs := c.FlagSet("perimeter", &bytes.Buffer{})
	seen := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		seen[f.Name] = true
		if !strings.Contains(string(doc), "| `--"+f.Name+"` |") {
			t.Errorf("flag --%s missing from docs/configuration.md", f.Name)
		}
	})
	for _, line := range strings.Split(string(doc), "\n") {
		if name, ok := strings.CutPrefix(line, "| `--"); ok {
			name, _, _ = strings.Cut(name, "`")
			if !seen[name] {
				t.Errorf("docs/configuration.md documents --%s, which does not exist", name)
			}
		}
	}
}

func TestFatalErrorsAreOneLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing kubeconfig", []string{"--kubeconfig=/nonexistent/kubeconfig", "--controller-port=0"}, "kubeconfig"},
		{"bad flag value", []string{"--configmap=nonamespace"}, "want NAMESPACE/NAME"},
		{"bad log level", []string{"--log=loud"}, "--log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(tc.args, &out, &errOut)
			if code == 0 {
				t.Fatalf("exit code 0, want non-zero; stderr: %s", errOut.String())
			}
			msg := strings.TrimSpace(errOut.String())
			if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, tc.want) {
				t.Fatalf("stderr %q: want one line containing %q", msg, tc.want)
			}
		})
	}
}
