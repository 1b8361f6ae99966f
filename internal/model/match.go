package model

import (
	"strings"
)

// Match routes one request the way the HAProxy frontend does with d.Maps,
// so tests and `perimeter explain` show what HAProxy will do. The lookup
// order, first hit wins:
//
//  1. host+path in MapExact, then the longest host+path prefix in MapPrefix;
//  2. the same with the wildcard host "*.<rest>" (first label replaced),
//     unless the host has an owner (MapHostOwner) other than the
//     wildcard's;
//  3. the same with each Gateway API wildcard host that matches the host
//     with more than one label in place of "*" (MapGatewayWildcard),
//     longest suffix first, under the same owner rule (gateway_host.go);
//  4. the same with no host: the rules without a host, or, when the host
//     (else the first of its wildcards with an owner) has an owner, that
//     namespace's host-less rules and default ("@<namespace>" keys);
//  5. DefaultBackend.
//
// host may carry a port, a trailing dot and any case; path may carry a
// query. A host with a '/' or '@' is refused (HAProxy answers 400). The
// route returned for the default backend has no Host, Path or PathType.
// Match reports false when nothing matches and there is no default backend
// (the built-in 404).
func Match(d *Desired, host, path string) (Route, bool) {
	if strings.ContainsAny(host, "/@") {
		return Route{}, false
	}
	host = requestHost(host)
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if path == "" {
		path = "/"
	}
	owners := d.Maps[MapHostOwner]
	owner, owned := "", false
	if host != "" {
		if r, ok := lookup(d, host, "", path); ok {
			return found(r)
		}
		owner, owned = owners[host]
		if w := wildcardHost(host); w != "" {
			wowner, wowned := owners[w]
			if !owned || wowned && wowner == owner {
				if r, ok := lookup(d, w, "", path); ok {
					return found(r)
				}
			}
			if !owned && wowned {
				owner, owned = wowner, true
			}
			gw := d.Maps[MapGatewayWildcard]
			for _, n := range WildcardDepths(gw) {
				g, ok := gw[lastLabels(w, n)]
				if !ok {
					continue
				}
				gowner, gowned := owners[g]
				if !owned || gowned && gowner == owner {
					if r, ok := lookup(d, g, "", path); ok {
						return found(r)
					}
				}
				if !owned && gowned {
					owner, owned = gowner, true
				}
			}
		}
	}
	if r, ok := lookup(d, "", owner, path); ok {
		if owner != "" && r.Ingress == (ObjectRef{}) && r.Path == "/" {
			// The owner namespace's default backend (or the 404 that
			// stands in for another namespace's).
			r = Route{Ingress: d.NamespaceDefaults[owner[1:]], Backend: r.Backend}
		}
		return found(r)
	}
	if d.DefaultBackend != "" {
		return Route{Ingress: d.DefaultSource, Backend: d.DefaultBackend}, true
	}
	return Route{}, false
}

// found turns a hit on BackendNotFound into no match.
func found(r Route) (Route, bool) {
	if r.Backend == BackendNotFound {
		return Route{}, false
	}
	return r, true
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
		h = h[:i]
	}
	return strings.TrimSuffix(h, ".")
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
// at a '/' can match. With host "", keyHost is "" (every host-less rule) or
// "@<namespace>" (one namespace's).
func lookup(d *Desired, host, keyHost, path string) (Route, bool) {
	if host != "" {
		keyHost = host
	}
	key := keyHost + path
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
	for i := len(key) - 1; i >= len(keyHost); i-- {
		if key[i] != '/' {
			continue
		}
		be, ok := prefix[key[:i+1]]
		if !ok {
			continue
		}
		p := key[len(keyHost):i]
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

// findRoute finds the served route for host, path and type in d.Routes.
func findRoute(d *Desired, host, path string, typ PathType) (Route, bool) {
	return d.Routes.find(func(r Route) int {
		if r.Host != host {
			return strings.Compare(r.Host, host)
		}
		if r.Path != path {
			return strings.Compare(r.Path, path)
		}
		return strings.Compare(string(r.PathType), string(typ))
	})
}
