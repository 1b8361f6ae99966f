package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRouteList applies random inserts and host deletions to a RouteList
// and to a plain sorted slice, across chunk splits, and checks after every
// step that both hold the same routes, that the copy taken before the step
// is unchanged, and that find sees what the slice holds.
func TestRouteList(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	var want []Route
	for i := range 3 * routeChunk {
		want = append(want, Route{Ingress: ObjectRef{Kind: "Ingress", Namespace: "ns", Name: fmt.Sprintf("i%03d", i%400)},
			Host: fmt.Sprintf("h%03d.test", i%400), Path: fmt.Sprintf("/%d", i), Backend: "b"})
	}
	slices.SortFunc(want, compareRoutes)
	l := NewRouteList(slices.Clone(want))
	for step := range 3000 {
		before, snapshot := l, l.Slice()
		h := fmt.Sprintf("h%03d.test", r.IntN(450))
		ref := ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "i" + h[1:4]}
		if r.IntN(2) == 0 {
			rt := Route{Ingress: ref, Host: h, Path: fmt.Sprintf("/n%d", step), Backend: "b"}
			l.insert(rt)
			i, _ := slices.BinarySearchFunc(want, rt, compareRoutes)
			want = slices.Insert(want, i, rt)
		} else {
			other := r.IntN(10) == 0
			by := ref
			if other {
				by.Name = "someone-else"
			}
			owned := !slices.ContainsFunc(want, func(x Route) bool { return x.Host == h && x.Ingress != by })
			if ok := l.deleteHost(h, by); ok != owned {
				t.Fatalf("step %d: deleteHost(%s) = %v, want %v", step, h, ok, owned)
			}
			if owned {
				want = slices.DeleteFunc(want, func(x Route) bool { return x.Host == h })
			}
		}
		if got := l.Slice(); !slices.Equal(got, want) || l.Len() != len(want) {
			t.Fatalf("step %d: %d routes (Len %d), want %d", step, len(got), l.Len(), len(want))
		}
		if !slices.Equal(before.Slice(), snapshot) {
			t.Fatalf("step %d: the copy taken before changed", step)
		}
		for _, c := range l.chunks {
			if len(c) == 0 || len(c) > 2*routeChunk {
				t.Fatalf("step %d: a chunk of %d routes", step, len(c))
			}
		}
		if len(want) > 0 {
			x := want[r.IntN(len(want))]
			got, ok := l.find(func(y Route) int { return compareRoutes(y, x) })
			if !ok || got != x {
				t.Fatalf("step %d: find %v: %v %v", step, x, got, ok)
			}
		}
	}
}
