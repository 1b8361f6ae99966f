package model

import (
	"slices"
	"testing"
)

// The intersection rules of Listener.hostname and HTTPRouteSpec.hostnames.
func TestHostIntersection(t *testing.T) {
	for _, c := range []struct {
		listener, route, want string
		ok                    bool
	}{
		{"", "", "", true},
		{"", "foo.example.com", "foo.example.com", true},
		{"*.example.com", "", "*.example.com", true},
		{"foo.example.com", "foo.example.com", "foo.example.com", true},
		{"*.example.com", "foo.example.com", "foo.example.com", true},
		{"*.example.com", "foo.bar.example.com", "foo.bar.example.com", true},
		{"foo.example.com", "*.example.com", "foo.example.com", true},
		{"foo.bar.example.com", "*.example.com", "foo.bar.example.com", true},
		{"*.example.com", "*.bar.example.com", "*.bar.example.com", true},
		{"*.bar.example.com", "*.example.com", "*.bar.example.com", true},
		{"*.example.com", "*.example.com", "*.example.com", true},
		{"*.example.com", "example.com", "", false},
		{"example.com", "*.example.com", "", false},
		{"*.example.com", "foo.example.org", "", false},
		{"*.example.com", "*.example.org", "", false},
		{"foo.example.com", "bar.example.com", "", false},
		{"*.wildcard.io", "wildcard.io", "", false},
	} {
		got, ok := hostIntersection(c.listener, c.route)
		if got != c.want || ok != c.ok {
			t.Errorf("hostIntersection(%q, %q) = %q, %t; want %q, %t", c.listener, c.route, got, ok, c.want, c.ok)
		}
	}
}

// lastLabels is what HAProxy's field(-1,.,n) gives.
func TestLastLabels(t *testing.T) {
	for _, c := range []struct {
		h    string
		n    int
		want string
	}{
		{"*.b.c.example.com", 2, "example.com"},
		{"*.b.c.example.com", 3, "c.example.com"},
		{"*.b.c.example.com", 5, "*.b.c.example.com"},
		{"*.example.com", 3, "*.example.com"},
		{"*", 2, "*"},
	} {
		if got := lastLabels(c.h, c.n); got != c.want {
			t.Errorf("lastLabels(%q, %d) = %q, want %q", c.h, c.n, got, c.want)
		}
	}
	if got := WildcardDepths(map[string]string{"example.com": "", "a.example.com": "", "example.org": "", "com": ""}); !slices.Equal(got, []int{3, 2, 1}) {
		t.Errorf("WildcardDepths = %v, want [3 2 1]", got)
	}
}
