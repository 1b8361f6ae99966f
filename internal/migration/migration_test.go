package migration

import (
	"flag"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/config"
)

var update = flag.Bool("update", false, "rewrite the generated part of docs/migration.md")

const doc = "../../docs/migration.md"

// TestMigrationDoc: the tables of docs/migration.md are what the code and
// the peer's inventory generate, and the inventory agrees with the code.
// Refresh with -update.
func TestMigrationDoc(t *testing.T) {
	gen, problems := Markdown()
	for _, p := range problems {
		t.Error(p)
	}
	raw, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	head, rest, ok1 := strings.Cut(text, Begin+"\n")
	_, tail, ok2 := strings.Cut(rest, End)
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the %q ... %q markers", doc, Begin, End)
	}
	want := head + Begin + "\n" + gen + End + tail
	if *update {
		if err := os.WriteFile(doc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if text != want {
		t.Errorf("%s is stale: run go test ./internal/migration -run TestMigrationDoc -update", doc)
	}
}

// TestEveryPeerFlagParses: a command line with every flag of the peer that
// Perimeter accepts, each with a value of its kind, parses; the refused
// ones are refused.
func TestEveryPeerFlagParses(t *testing.T) {
	samples := map[string]string{
		"configmap": "ns/cm", "configmap-tcp-services": "ns/tcp", "configmap-errorfiles": "ns/errors",
		"configmap-patternfiles": "ns/patterns", "default-backend-service": "ns/svc", "default-ssl-certificate": "ns/cert",
		"publish-service": "ns/svc", "custom-validation-rules": "ns/rules", "namespace-whitelist": "a",
		"namespace-blacklist": "b", "ingress.class": "haproxy", "gateway-controller-name": "haproxy.org/gateway",
		"http-bind-thread": "1-1", "https-bind-thread": "1-1", "healthz-bind-thread": "1-1", "stats-bind-thread": "1-1",
		"initial-sync-period": "1s", "quic-bind-port": "8443", "quic-announce-port": "443", "disable-config-snippets": "all",
		"experimental": "use-ingress-merge", "kubeconfig": "/root/.kube/config", "input-file": "in.yaml", "output-file": "out.yaml",
	}
	var cfg config.Config
	fs := cfg.FlagSet("perimeter", io.Discard)
	var args []string
	for _, p := range peerFlags {
		f := fs.Lookup(p.name)
		if p.builtin {
			continue
		}
		if p.refused {
			if f != nil {
				t.Errorf("%s is accepted, the table says refused", config.FlagSyntax(p.name))
			}
			continue
		}
		if f == nil {
			t.Errorf("%s is not accepted", config.FlagSyntax(p.name))
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			args = append(args, config.FlagSyntax(p.name))
			continue
		}
		v := samples[p.name]
		if v == "" {
			v = p.v3
		}
		if v == "" || v == absent {
			t.Errorf("%s: no sample value", p.name)
			continue
		}
		args = append(args, config.FlagSyntax(p.name)+"="+v)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

// TestInventoryComplete: no key of the peer's documentation and no flag of
// its command line is missing from the tables.
func TestInventoryComplete(t *testing.T) {
	keys := map[string]bool{}
	for _, k := range peerKeys {
		if keys[k.name] {
			t.Errorf("key %s listed twice", k.name)
		}
		keys[k.name] = true
	}
	for _, k := range peerDocumented {
		if !keys[k] {
			t.Errorf("the peer's key %s is missing from the table", k)
		}
	}
	flags := map[string]bool{}
	for _, f := range peerFlags {
		if flags[f.name] {
			t.Errorf("flag %s listed twice", f.name)
		}
		flags[f.name] = true
	}
	for _, f := range peerFlagTags {
		if !flags[f] {
			t.Errorf("the peer's flag %s is missing from the table", config.FlagSyntax(f))
		}
	}
	if len(flags) != len(peerFlagTags) {
		t.Errorf("%d flags in the table, the peer has %d", len(flags), len(peerFlagTags))
	}
}
