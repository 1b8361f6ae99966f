package model

import (
	"slices"
	"strings"
)

// Match routes one request the way the HAProxy frontend does with d.Maps,
// so tests and `perimeter explain` show what HAProxy will do. The lookup
// order, first hit wins:
//
//  1. host+path in MapExact, then the longest host+path prefix in MapPrefix;
//  2. the same with the wildcard host "*.<rest>" (first label replaced);
//  3. the same with no host (rules without a host);
//  4. DefaultBackend.
//
// host may carry a port and any case; path may carry a query. The route
// returned for the default backend has no Host, Path or PathType. Match
// reports false when nothing matches and there is no default backend (the
// built-in 404).
func Match(d *Desired, host, path string) (Route, bool) {
	host = requestHost(host)
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if path == "" {
		path = "/"
	}
	if host != "" {
		if r, ok := lookup(d, host, path); ok {
			return r, true
		}
		if w := wildcardHost(host); w != "" {
			if r, ok := lookup(d, w, path); ok {
				return r, true
			}
		}
	}
	if r, ok := lookup(d, "", path); ok {
		return r, true
	}
	if d.DefaultBackend != "" {
		return Route{Ingress: d.DefaultSource, Backend: d.DefaultBackend}, true
	}
	return Route{}, false
}

// requestHost lower-cases a Host header and strips its port, keeping the
// brackets of an IPv6 literal.
func requestHost(h string) string {
	h = strings.ToLower(h)
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i >= 0 {
			return h[:i+1]
		}
		return h
	}
	if i := strings.IndexByte(h, ':'); i >= 0 {
		return h[:i]
	}
	return h
}

// wildcardHost is the wildcard that matches h ("a.b.c" -> "*.b.c"), or ""
// when h has a single label.
func wildcardHost(h string) string {
	i := strings.IndexByte(h, '.')
	if i <= 0 || i == len(h)-1 {
		return ""
	}
	return "*" + h[i:]
}

// lookup is one host tier: exact key, then longest prefix key. Every
// MapPrefix key ends with '/', so only the prefixes of the request that end
// at a '/' can match.
func lookup(d *Desired, host, path string) (Route, bool) {
	key := host + path
	if be, ok := d.Maps[MapExact][key]; ok {
		if r, ok := findRoute(d, host, path, PathExact); ok && r.Backend == be {
			return r, true
		}
		if r, ok := findRoute(d, host, path, PathPrefix); ok && r.Backend == be {
			return r, true
		}
		return Route{Host: host, Path: path, Backend: be}, true
	}
	prefix := d.Maps[MapPrefix]
	for i := len(key) - 1; i >= len(host); i-- {
		if key[i] != '/' {
			continue
		}
		be, ok := prefix[key[:i+1]]
		if !ok {
			continue
		}
		p := key[len(host):i]
		if p == "" {
			p = "/"
		}
		if r, ok := findRoute(d, host, p, PathPrefix); ok && r.Backend == be {
			return r, true
		}
		return Route{Host: host, Path: p, PathType: PathPrefix, Backend: be}, true
	}
	return Route{}, false
}

// findRoute finds the served route for host, path and type in the sorted
// d.Routes.
func findRoute(d *Desired, host, path string, typ PathType) (Route, bool) {
	i, ok := slices.BinarySearchFunc(d.Routes, Route{Host: host, Path: path, PathType: typ}, func(r, t Route) int {
		if r.Host != t.Host {
			return strings.Compare(r.Host, t.Host)
		}
		if r.Path != t.Path {
			return strings.Compare(r.Path, t.Path)
		}
		return strings.Compare(string(r.PathType), string(t.PathType))
	})
	if !ok {
		return Route{}, false
	}
	return d.Routes[i], true
}
