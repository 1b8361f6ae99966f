package config

import (
	"flag"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md from the code")

const referenceDoc = "../../docs/configuration.md"

// TestReferenceDoc checks that docs/configuration.md is what the code
// generates. Refresh with -update.
func TestReferenceDoc(t *testing.T) {
	want := Markdown()
	if *update {
		if err := os.WriteFile(referenceDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(referenceDoc)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/config -run TestReferenceDoc -update)", err)
	}
	if string(got) != want {
		t.Errorf("%s is stale (run go test ./internal/config -run TestReferenceDoc -update):\n%s", referenceDoc, lineDiff(string(got), want))
	}
	// The example file in the doc is one the daemon takes.
	_, block, ok := strings.Cut(want, "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || block == "" {
		t.Error("no yaml example in the doc")
	} else if _, _, err := parse(t, block); err != nil {
		t.Errorf("the doc's example is refused: %v", err)
	}
	for _, k := range Keys() {
		if !strings.Contains(want, "| `"+FlagSyntax(k.Name)+"` |") {
			t.Errorf("--%s has no row", k.Name)
		}
	}
}

// The YAML reference is a valid configuration file as installed (all
// commented out), and each of its entries, uncommented, is accepted.
func TestReferenceYAML(t *testing.T) {
	y := YAML()
	if c, _, err := parse(t, y); err != nil {
		t.Fatalf("the reference as installed: %v", err)
	} else if c.Kubeconfig != "/etc/perimeter/kubeconfig" {
		t.Fatalf("the reference as installed changed a default: %+v", c)
	}
	n := 0
	for _, k := range fileKeys() {
		if k.Alias != "" {
			if strings.Contains(y, "\n#"+k.Name+":") {
				t.Errorf("alias %s has an entry", k.Name)
			}
			continue
		}
		entry := yamlEntry(k)
		commented := "#" + strings.ReplaceAll(strings.TrimSuffix(entry, "\n"), "\n", "\n#") + "\n"
		if !strings.Contains(y, commented) {
			t.Errorf("%s: entry %q not in the reference", k.Name, commented)
		}
		extra := ""
		if k.Name == "bgp-cluster-as" || k.Name == "bgp-router-id" || k.Name == "bgp-listen-address" {
			extra = "bgp-local-as: 64512\n"
		}
		if _, _, err := parse(t, extra+entry); err != nil {
			t.Errorf("%s: the reference's entry %q is refused: %v", k.Name, entry, err)
		}
		n++
	}
	if n < 40 {
		t.Fatalf("only %d entries", n)
	}
	for _, line := range strings.Split(y, "\n") {
		if len(line) > 80 {
			t.Errorf("line longer than 80 characters: %q", line)
		}
		if line != "" && !strings.HasPrefix(line, "#") {
			t.Errorf("uncommented line %q", line)
		}
	}
}

// TestExamplesDiffer: the example of a key that has a real default is that
// default, so the installed file documents the defaults.
func TestExamplesAreDefaults(t *testing.T) {
	var c Config
	fs := c.FlagSet("perimeter", io.Discard)
	for _, k := range fileKeys() {
		if _, ok := examples[k.Name]; ok || k.Alias != "" {
			continue
		}
		// The typed value, printed as the flag prints it, is the default.
		got := Example(k)
		var s string
		switch v := got.(type) {
		case bool:
			s = strconv.FormatBool(v)
		case int:
			s = strconv.Itoa(v)
		case string:
			s = v
		default:
			t.Errorf("%s: example of type %T", k.Name, got)
			continue
		}
		if def := fs.Lookup(k.Name).DefValue; s != def {
			t.Errorf("%s: shown default %q, flag default %q", k.Name, s, def)
		}
	}
}

func TestLiveKeysDocumented(t *testing.T) {
	md := Markdown()
	for _, k := range Keys() {
		row := "| `" + FlagSyntax(k.Name) + "` |"
		i := strings.Index(md, row)
		if i < 0 {
			continue
		}
		line := md[i : i+strings.Index(md[i:], "\n")]
		want := "| restart |"
		switch {
		case k.FlagOnly:
			want = "| flag only |"
		case k.Live:
			want = "| live |"
		}
		if !strings.Contains(line, want) {
			t.Errorf("%s: row %q lacks %q", k.Name, line, want)
		}
	}
}

// TestReload: a live key's change is applied, any other key's is held back
// and reported until a restart.
func TestReload(t *testing.T) {
	base := "log: info\nhttp-bind-port: 8080\n"
	running, src, err := parse(t, base)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range fileKeys() {
		if k.Alias != "" {
			continue
		}
		t.Run(k.Name, func(t *testing.T) {
			v, ok := otherValue(k)
			if !ok {
				t.Fatalf("no second value for %s: add one to otherValue", k.Name)
			}
			content := base + v
			for _, line := range strings.SplitAfter(base, "\n") {
				if strings.HasPrefix(line, k.Name+":") {
					content = strings.Replace(base, line, v, 1)
				}
			}
			if err := os.WriteFile(src.Path(), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			loaded, err := src.Load()
			if err != nil {
				t.Fatalf("%q: %v", v, err)
			}
			next, live, restart := Reload(running, loaded)
			if k.Live {
				if len(live) != 1 || live[0].Key != k.Name || len(restart) != 0 {
					t.Fatalf("live %v, restart %v; want only %s live", live, restart, k.Name)
				}
				// Everything the daemon reads equals the loaded file.
				if !reflect.DeepEqual(next, loaded) {
					t.Fatalf("merged %+v\nloaded %+v", next, loaded)
				}
			} else {
				if len(restart) != 1 || restart[0].Key != k.Name || len(live) != 0 {
					t.Fatalf("live %v, restart %v; want only %s needing a restart", live, restart, k.Name)
				}
				if !reflect.DeepEqual(next, running) {
					t.Fatalf("a restart-only change was applied: %+v", next)
				}
				// Still reported on the next reload.
				if _, _, again := Reload(next, loaded); len(again) != 1 {
					t.Fatalf("second reload: restart %v", again)
				}
			}
		})
	}
	// Nothing changed: nothing to report.
	if err := os.WriteFile(src.Path(), []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	loaded, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	if _, live, restart := Reload(running, loaded); len(live)+len(restart) != 0 {
		t.Fatalf("unchanged file: live %v restart %v", live, restart)
	}
}

// otherValue is a line setting k to a valid value other than its default.
func otherValue(k Key) (string, bool) {
	special := map[string]string{
		"log":                     "warn",
		"http-bind-port":          "8081",
		"external":                "false",
		"disable-ipv4":            "true",
		"ipv4-bind-address":       "127.0.0.1",
		"ipv6-bind-address":       "::1",
		"gateway-listener-ports":  "8080-8090",
		"gateway-addresses":       "198.51.100.81-198.51.100.95",
		"stats-bind-address":      "127.0.0.2",
		"controller-bind-address": "127.0.0.3",
		"bgp-hold-time":           "9s",
		"sync-period":             "3s",
		"route-table":             "100",
	}
	if v, ok := special[k.Name]; ok {
		return k.Name + ": " + v + "\n", true
	}
	switch k.Kind {
	case KindBool:
		return k.Name + ": true\n", true
	case KindInt:
		return k.Name + ": 1234\n", true
	case KindDuration:
		return k.Name + ": 7s\n", true
	}
	if _, ok := examples[k.Name]; ok {
		return strings.Replace(yamlEntry(k), "log: info\n", "", 1), true
	}
	if k.Kind == KindString {
		return k.Name + ": other\n", true
	}
	return "", false
}

// lineDiff lists the lines that differ, enough to see what changed without
// a diff library.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			b.WriteString("line " + strconv.Itoa(i+1) + ":\n  -" + wl + "\n  +" + gl + "\n")
		}
	}
	return b.String()
}
