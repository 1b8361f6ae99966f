package kube

import (
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

func ingRefs(names ...string) []model.ObjectRef {
	var out []model.ObjectRef
	for _, n := range names {
		out = append(out, model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: n})
	}
	return out
}

// TestServeDirty: after the first set, a pass checks only the Ingresses
// that entered or left the served set.
func TestServeDirty(t *testing.T) {
	s := NewStatusWriter(nil, nil, StatusOptions{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.Serve(ingRefs("a", "b", "c", "e"))
	if !s.all || len(s.served) != 4 {
		t.Fatalf("the first set must ask for a full pass: all %v, %d served", s.all, len(s.served))
	}
	s.all = false
	s.Serve(ingRefs("a", "b", "c", "e"))
	if len(s.dirty) != 0 {
		t.Fatalf("nothing changed, dirty %v", s.dirty)
	}
	s.Serve(ingRefs("b", "c", "d", "e", "f"))
	got := slices.SortedFunc(maps.Keys(s.dirty), func(x, y model.ObjectRef) int { return strings.Compare(x.Name, y.Name) })
	if !slices.Equal(got, ingRefs("a", "d", "f")) {
		t.Fatalf("dirty %v, want a, d, f", got)
	}
	if !maps.Equal(s.served, map[model.ObjectRef]bool{ingRefs("b")[0]: true, ingRefs("c")[0]: true, ingRefs("d")[0]: true, ingRefs("e")[0]: true, ingRefs("f")[0]: true}) {
		t.Fatalf("served %v", s.served)
	}
	if s.all {
		t.Fatal("a change of a few Ingresses asked for a full pass")
	}
}
