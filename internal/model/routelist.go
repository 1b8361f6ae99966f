package model

import (
	"iter"
	"slices"
	"sort"
	"strings"
)

// RouteList is the sorted list of served routes, kept in chunks so that an
// incremental update copies only the chunk it changes: a new host at
// 10,000 Ingresses copies a few kilobytes rather than the 2 MB of the
// whole list, garbage the collector would otherwise pay for at every
// change. A RouteList is a value: copies share chunks, which are never
// written once made.
type RouteList struct {
	chunks [][]Route
	n      int
}

// routeChunk is the size of the chunks a list is cut into; one grows to
// twice that before it is split.
const routeChunk = 256

// NewRouteList makes a list of routes already sorted by compareRoutes.
func NewRouteList(sorted []Route) RouteList {
	l := RouteList{n: len(sorted)}
	for len(sorted) > 0 {
		k := min(routeChunk, len(sorted))
		l.chunks = append(l.chunks, sorted[:k:k])
		sorted = sorted[k:]
	}
	return l
}

// Len is the number of routes.
func (l RouteList) Len() int { return l.n }

// All yields the routes in order.
func (l RouteList) All() iter.Seq[Route] {
	return func(yield func(Route) bool) {
		for _, c := range l.chunks {
			for _, r := range c {
				if !yield(r) {
					return
				}
			}
		}
	}
}

// Slice returns the routes as one new slice.
func (l RouteList) Slice() []Route {
	out := make([]Route, 0, l.n)
	for _, c := range l.chunks {
		out = append(out, c...)
	}
	return out
}

// search finds the first route r with cmp(r) >= 0: its chunk and its index
// in it, or len(chunks) when there is none.
func (l RouteList) search(cmp func(Route) int) (chunk, i int) {
	chunk = sort.Search(len(l.chunks), func(k int) bool {
		c := l.chunks[k]
		return cmp(c[len(c)-1]) >= 0
	})
	if chunk == len(l.chunks) {
		return chunk, 0
	}
	c := l.chunks[chunk]
	return chunk, sort.Search(len(c), func(k int) bool { return cmp(c[k]) >= 0 })
}

// find returns the route that cmp says is the one (cmp(r) == 0), if any.
func (l RouteList) find(cmp func(Route) int) (Route, bool) {
	ci, i := l.search(cmp)
	if ci == len(l.chunks) || cmp(l.chunks[ci][i]) != 0 {
		return Route{}, false
	}
	return l.chunks[ci][i], true
}

// insert adds r in order.
func (l *RouteList) insert(r Route) {
	ci, i := l.search(func(x Route) int { return compareRoutes(x, r) })
	if ci == len(l.chunks) {
		if ci == 0 {
			l.chunks, l.n = [][]Route{{r}}, 1
			return
		}
		ci--
		i = len(l.chunks[ci])
	}
	old := l.chunks[ci]
	c := make([]Route, 0, len(old)+1)
	c = append(append(append(c, old[:i]...), r), old[i:]...)
	chunks := slices.Clone(l.chunks)
	if len(c) > 2*routeChunk {
		h := len(c) / 2
		chunks = slices.Replace(chunks, ci, ci+1, c[:h:h], c[h:])
	} else {
		chunks[ci] = c
	}
	l.chunks = chunks
	l.n++
}

// deleteHost removes every route of host, which must all be ref's: it
// reports false, changing nothing, when one is another Ingress's.
func (l *RouteList) deleteHost(host string, ref ObjectRef) bool {
	ci, i := l.search(func(x Route) int { return strings.Compare(x.Host, host) })
	end, removed := ci, 0
	var repl [][]Route
	for end < len(l.chunks) {
		c := l.chunks[end]
		start := 0
		if end == ci {
			start = i
		}
		k := start
		for k < len(c) && c[k].Host == host {
			if c[k].Ingress != ref {
				return false
			}
			k++
		}
		if k == start {
			break
		}
		if rest := len(c) - (k - start); rest > 0 {
			nc := make([]Route, 0, rest)
			repl = append(repl, append(append(nc, c[:start]...), c[k:]...))
		}
		removed += k - start
		end++
		if k < len(c) {
			break
		}
	}
	if removed == 0 {
		return true
	}
	l.chunks = slices.Replace(slices.Clone(l.chunks), ci, end, repl...)
	l.n -= removed
	return true
}
