package model

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// TestGolden builds every testdata/<case>.yaml and compares Dump with
// testdata/<case>.golden. Refresh with `go test ./internal/model -update`
// and review the diff.
func TestGolden(t *testing.T) {
	cases, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no golden cases in testdata")
	}
	for _, c := range cases {
		name := strings.TrimSuffix(filepath.Base(c), ".yaml")
		t.Run(name, func(t *testing.T) {
			s, o := loadCase(t, c)
			d := Build(s, o)
			got := Dump(d) + dumpRequests(t, d, c)
			golden := strings.TrimSuffix(c, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the model's output (run with -update and review the diff):\n%s",
					golden, lineDiff(string(want), got))
			}
		})
	}
}

// requestPrefix starts a comment line in a case file naming a request
// ("# request: <host> <path>") whose Match result the golden file shows.
const requestPrefix = "# request:"

func dumpRequests(t *testing.T, d *Desired, path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for line := range strings.Lines(string(data)) {
		rest, ok := strings.CutPrefix(line, requestPrefix)
		if !ok {
			continue
		}
		host, p, ok := strings.Cut(strings.TrimSpace(rest), " ")
		if !ok {
			t.Fatalf("%s: %q: want \"%s <host> <path>\"", path, line, requestPrefix)
		}
		if b.Len() == 0 {
			b.WriteString("\nrequests\n")
		}
		r, ok := Match(d, host, p)
		switch {
		case !ok:
			fmt.Fprintf(&b, "  %s %s -> built-in 404\n", host, p)
		case r.PathType == "":
			fmt.Fprintf(&b, "  %s %s -> %s (default backend)\n", host, p, r.Backend)
		default:
			fmt.Fprintf(&b, "  %s %s -> %s (%s: %q %s %s)\n", host, p, r.Backend, r.Ingress.String(), r.Host, r.Path, r.PathType)
		}
	}
	return b.String()
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
