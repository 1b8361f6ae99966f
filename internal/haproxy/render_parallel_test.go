package haproxy

import (
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	parser "github.com/haproxytech/client-native/v6/config-parser"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// TestRenderParallel: backends rendered on every CPU (a start-up at
// thousands of backends) make the very same configuration as backends
// rendered one by one.
func TestRenderParallel(t *testing.T) {
	want := benchDesired(3 * parallelRender)
	render := func(procs int) string {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		r := goldenRenderer(Options{DisableIPv6: true})
		st, _ := desiredState(want)
		withSlots(emptyState(), st)
		st.spares = chooseSpares(st)
		cfg, err := r.config(st, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	one, all := render(1), render(4)
	if one != all {
		t.Fatalf("parallel render differs from the serial one (%d and %d bytes)", len(one), len(all))
	}
	if n := len(one); n < 3*parallelRender*50 {
		t.Fatalf("config of %d bytes for %d backends", n, 3*parallelRender)
	}
}

// TestRenderScratchReused: every backend goes through the one section a
// scratch parser keeps; what one backend set must be gone for the next.
// Each backend, rendered after each other one, is the same as rendered on
// a fresh parser.
func TestRenderScratchReused(t *testing.T) {
	r := goldenRenderer(Options{DisableIPv6: true})
	want := featuresDesired()
	want.Backends = append(want.Backends, backendOf("ns_plain_80", 4, model.Endpoint{Address: "198.18.60.11", Port: 8080}))
	st, problems := desiredState(want)
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	withSlots(emptyState(), st)
	names := append(slices.Sorted(maps.Keys(st.backends)), builtin404)
	at := func(name string) *backend {
		if name == builtin404 {
			return nil
		}
		return st.backends[name]
	}
	fresh := map[string]string{}
	for _, name := range names {
		var scratch parser.Parser
		text, err := renderBackend(r, &scratch, name, at(name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(text, "\nbackend "+name+" from "+defaultsName+"\n") || strings.Contains(text, scratchBackend) {
			t.Fatalf("backend %s rendered as:\n%s", name, text)
		}
		fresh[name] = text
	}
	var scratch parser.Parser
	for _, first := range names {
		for _, then := range names {
			for _, name := range []string{first, then} {
				text, err := renderBackend(r, &scratch, name, at(name))
				if err != nil {
					t.Fatal(err)
				}
				if text != fresh[name] {
					t.Fatalf("%s rendered after %s:\n%s\nwant:\n%s", name, first, text, fresh[name])
				}
			}
		}
	}
}

// BenchmarkRenderFirst renders every backend with nothing cached, as the
// first configuration after a start does.
func BenchmarkRenderFirst(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run("backends="+strconv.Itoa(n), func(b *testing.B) {
			r := goldenRenderer(Options{DisableIPv6: true})
			st, _ := desiredState(benchDesired(n))
			withSlots(emptyState(), st)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.config(st, &renderCache{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
