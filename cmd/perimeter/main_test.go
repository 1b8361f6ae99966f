package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
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
		if !strings.Contains(string(doc), "| `"+config.FlagSyntax(f.Name)+"` |") {
			t.Errorf("flag %s missing from docs/configuration.md", config.FlagSyntax(f.Name))
		}
	})
	for _, line := range strings.Split(string(doc), "\n") {
		if name, ok := strings.CutPrefix(line, "| `-"); ok {
			name, _, _ = strings.Cut(strings.TrimPrefix(name, "-"), "`")
			if !seen[name] {
				t.Errorf("docs/configuration.md documents %s, which does not exist", config.FlagSyntax(name))
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

// A bad configuration file stops the daemon before anything starts, with
// one line naming the file, the line and the key.
func TestBadConfigFileIsFatal(t *testing.T) {
	p := filepath.Join(t.TempDir(), "perimeter.yaml")
	if err := os.WriteFile(p, []byte("kubeconfig: /nonexistent\nhttp-bind-port: eighty\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := run([]string{"run", "--config=" + p}, &out, &errOut)
	msg := strings.TrimSpace(errOut.String())
	want := "perimeter: " + p + `:2: http-bind-port: want a whole number, got "eighty"`
	if code == 0 || msg != want {
		t.Fatalf("exit %d, stderr %q; want non-zero and %q", code, msg, want)
	}
	// Named but missing: an error too.
	errOut.Reset()
	if code := run([]string{"render", "--config=" + p + ".missing"}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "no such file") {
		t.Fatalf("missing --config file: exit %d, stderr %q", code, errOut.String())
	}
}

func TestConfigReference(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"config-reference"}, &out, &errOut); code != 0 || out.String() != config.Markdown() {
		t.Fatalf("config-reference: exit %d, stderr %q", code, errOut.String())
	}
	out.Reset()
	if code := run([]string{"config-reference", "--format=yaml"}, &out, &errOut); code != 0 || out.String() != config.YAML() {
		t.Fatalf("config-reference --format=yaml: exit %d, stderr %q", code, errOut.String())
	}
	if code := run([]string{"config-reference", "--format=toml"}, &out, &errOut); code != 2 {
		t.Fatalf("unknown format: exit %d", code)
	}
}

// The peer's one-shot modes end at once: a Job written for it succeeds
// with nothing to install, and a conversion it cannot do is an error.
func TestPeerJobModes(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "perimeter.yaml")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"--job-check-crd", "--config=" + empty}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "no custom resource definitions") {
		t.Fatalf("--job-check-crd: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"--input-file=a.yaml", "--output-file=b.yaml", "--config=" + empty}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "no custom resources") {
		t.Fatalf("--input-file: exit %d, stderr %q", code, errOut.String())
	}
	out.Reset()
	if code := run([]string{"-v"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "perimeter ") {
		t.Fatalf("-v: exit %d, stdout %q", code, out.String())
	}
}
