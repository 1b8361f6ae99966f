package haproxy

import (
	"regexp"
	"strings"

	"github.com/haproxytech/client-native/v6/config-parser/types"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// Conditional routes (model/feat_routeacl.go): both frontends look the
// request up in the route-acl maps tier by tier, like the main maps, and
// keep the list of conditional backends of the key found in txn.acl_be.
// One use_backend rule per conditional backend, before the main one,
// takes the request when its backend is listed and its condition holds.
// The rules live in the head (a change reloads); the maps change at run
// time, so a new host or path for a known condition needs no reload.

// routeACLValueRE is a map value of the route-acl maps: the shadow or a
// list ",a,b," of backend names.
var routeACLValueRE = regexp.MustCompile(`^(-|,([a-z0-9][a-z0-9_-]{0,199},)+)$`)

// routeACLValueOK reports whether every backend v lists exists as an HTTP
// backend.
func routeACLValueOK(st *state, v string) bool {
	if !routeACLValueRE.MatchString(v) {
		return false
	}
	if v == model.RouteACLShadow {
		return true
	}
	for _, n := range strings.Split(strings.Trim(v, ","), ",") {
		b := st.backends[n]
		if b == nil || b.spec.TCP {
			return false
		}
	}
	return true
}

// conditionOK checks again what the model rendered: one anonymous ACL of
// bare words, nothing HAProxy would read as a comment, a quote, another
// brace or a new line.
func conditionOK(c string) bool {
	inner, ok := strings.CutPrefix(c, "{ ")
	if !ok {
		return false
	}
	inner, ok = strings.CutSuffix(inner, " }")
	if !ok || inner == "" || len(c) > 8192 {
		return false
	}
	for _, tok := range strings.Split(inner, " ") {
		if !safeToken(tok) || strings.ContainsAny(tok, "{}") {
			return false
		}
	}
	return true
}

// routeACLExtras keeps the conditions whose backend exists and whose
// condition passes conditionOK.
func routeACLExtras(want *model.Desired, st *state, reject func(model.ObjectRef, string, ...any)) []model.RouteACL {
	var out []model.RouteACL
	for _, a := range want.RouteACLs {
		b := st.backends[a.Backend]
		switch {
		case b == nil || b.spec.TCP:
			continue
		case a.Match != nil:
			c, err := matchCondition(a.Match)
			if err != nil {
				reject(model.ObjectRef{Kind: "Service", Namespace: b.spec.Namespace, Name: b.spec.Service},
					"HTTPRoute match of backend %s: %v; its routes are left out", a.Backend, err)
				continue
			}
			// The rendered condition says it all; a pointer would make
			// every build look like a new head (extras.key).
			a.Condition, a.Match = c, nil
			out = append(out, a)
		case !conditionOK(a.Condition):
			reject(serviceRef(&model.Backend{Namespace: b.spec.Namespace, Service: b.spec.Service}), "route-acl of backend %s: condition refused; its routes are left out", a.Backend)
		default:
			out = append(out, a)
		}
	}
	return out
}

// routeACLActions look the conditional maps up at the tier at hand: key
// is the variable holding the tier's key, cond when the tier is looked at.
func (r renderer) routeACLActions(key, cond string) []types.Action {
	exact, prefix := r.mapPath(model.MapRouteACLExact), r.mapPath(model.MapRouteACLPrefix)
	none := "!{ var(txn.acl_be) -m found }"
	if cond != "" {
		none = cond + " " + none
	}
	return []types.Action{
		setVar("acl_be", "var(txn."+key+"),map_str("+exact+")", none),
		setVar("acl_be", "var(txn."+key+"),map_beg("+prefix+")", none),
	}
}

// routeACLUseBackends are the frontend's rules for the conditional
// backends, in the model's order (oldest Ingress first).
func routeACLUseBackends(acls []model.RouteACL) []types.UseBackend {
	out := make([]types.UseBackend, 0, len(acls)+1)
	for _, a := range acls {
		out = append(out, types.UseBackend{
			Name: a.Backend, Cond: "if",
			CondTest: "{ var(txn.acl_be) -m sub ," + a.Backend + ", } " + a.Condition,
		})
	}
	return out
}
