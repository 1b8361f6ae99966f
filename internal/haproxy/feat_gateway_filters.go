package haproxy

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// HTTPRoute filters (model/gateway_filters.go) without an annotation
// counterpart: header add and remove, and redirects built from the
// request's scheme, host, path and query.

func headerLines(dir string, adds []model.Header, removes []string, add func(string, ...any)) error {
	for _, x := range adds {
		if !model.ValidHeaderName(x.Name) || !lineSafe(x.Value) {
			return fmt.Errorf("%s header %q is not valid", dir, x.Name)
		}
		add("http-%s add-header %s %s", dir, x.Name, quoteArg(literalFormat(x.Value)))
	}
	for _, n := range removes {
		if !model.ValidHeaderName(n) {
			return fmt.Errorf("%s header %q is not valid", dir, n)
		}
		add("http-%s del-header %s", dir, n)
	}
	return nil
}

func routeRequestHeaders(f model.RouteFilters, add func(string, ...any)) error {
	return headerLines("request", f.AddRequestHeaders, f.RemoveRequestHeaders, add)
}

func routeResponseHeaders(f model.RouteFilters, add func(string, ...any)) error {
	return headerLines("response", f.AddResponseHeaders, f.RemoveResponseHeaders, add)
}

// routeRedirect answers with a Location of the request's path and query
// (after the backend's path rewrites, which run first), and the scheme,
// host and port of the redirect or of the request.
func routeRedirect(r model.RouteRedirect, add func(string, ...any)) error {
	if !r.Set {
		return nil
	}
	if !slices.Contains([]int{301, 302, 303, 307, 308}, r.Code) {
		return fmt.Errorf("redirect code %d", r.Code)
	}
	scheme := "%[ssl_fc,iif(https,http)]"
	switch r.Scheme {
	case "":
	case "http", "https":
		scheme = r.Scheme
	default:
		return fmt.Errorf("redirect scheme %q", r.Scheme)
	}
	host := "%[req.hdr(host),field(1,:)]"
	if r.Host != "" {
		if !safeToken(r.Host) || !lineSafe(r.Host) {
			return fmt.Errorf("redirect host %q", r.Host)
		}
		host = literalFormat(r.Host)
	}
	if r.Port < 0 || r.Port > 65535 {
		return fmt.Errorf("redirect port %d", r.Port)
	}
	if r.Port != 0 {
		host += ":" + strconv.Itoa(r.Port)
	}
	add("http-request redirect location %s code %d", quoteArg(scheme+"://"+host+"%[pathq]"), r.Code)
	return nil
}
