package haproxy

import (
	"regexp"

	"github.com/haproxytech/client-native/v6/config-parser/types"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// Canary routing (model/feat_canary.go): after the route lookups, both
// frontends look the chosen backend up in the canary maps and switch to
// its canary backend for rand(100) < weight. The rules are always there
// and the maps always loaded, so adding, changing or removing a canary is
// a map change through the Runtime API (plus a reload only when the
// canary backend itself is new).

var canaryWeightRE = regexp.MustCompile(`^(100|[1-9]?[0-9])$`)

// mapValueOK reports whether v may be a value of map name in st: a weight
// for the canary weight map, an owner for the host-owner map, a redirect
// for the ssl-redirect map, an existing backend for every other map.
func mapValueOK(st *state, name, v string) bool {
	switch name {
	case model.MapSSLRedirect:
		return redirectValueRE.MatchString(v)
	case model.MapCanaryWeight:
		return canaryWeightRE.MatchString(v)
	case model.MapHostOwner:
		return ownerValueRE.MatchString(v)
	case model.MapRouteACLExact, model.MapRouteACLPrefix:
		return routeACLValueOK(st, v)
	case model.MapSSLPassthrough:
		if v == model.PassthroughReject {
			return true
		}
		// The ssl frontend is mode tcp: it can use mode tcp backends only.
		b := st.backends[v]
		return b != nil && b.spec.TCP
	case model.MapGatewayWildcard:
		return true // wildcardEntryOK
	case model.MapExact, model.MapPrefix:
		if v == builtin404 {
			return true
		}
	}
	return st.backends[v] != nil
}

// canaryActions switch txn.backend to its canary for a share of the
// requests. rand(100) is 0..99, so weight 0 never switches and 100 always
// does. HAProxy 2.6 compares a sample with a constant only: the weight is
// subtracted from the random number (sub() takes a variable) and the
// result compared with 0.
func (r renderer) canaryActions() []types.Action {
	weights, backends := r.mapPath(model.MapCanaryWeight), r.mapPath(model.MapCanaryBackend)
	return []types.Action{
		setVar("canary_weight", "var(txn.backend),map_str_int("+weights+",0)", "{ var(txn.backend) -m found }"),
		setVar("backend", "var(txn.backend),map_str("+backends+")",
			"{ var(txn.canary_weight) -m int gt 0 } { rand(100),sub(txn.canary_weight) -m int lt 0 }"),
	}
}
