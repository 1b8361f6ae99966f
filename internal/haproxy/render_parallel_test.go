package haproxy

import (
	"runtime"
	"testing"
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
