package haproxy

import (
	"fmt"
	"regexp"

	"github.com/haproxytech/client-native/v6/config-parser/types"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// Gateway API wildcards (model/gateway_host.go) match one or more labels.
// The one-label case is the common wildcard tier of routingActions; the
// tiers here serve the others: one per label count of the wildcard
// suffixes in the gateway-wildcard map, largest first, so the most
// specific wildcard wins and a request whose path no rule of one wildcard
// matches falls through to the next. A tier takes the last n labels of
// txn.whost (the host with its first label already replaced by "*", so at
// least one label is always left for the wildcard; a host of no more
// labels gives back whost itself, which is no key) and looks them up in
// the map: a tree lookup per tier, never a scan over the hosts. The map
// gives the wildcard host, whose keys are then looked up as the one-label
// tier's are, under the same owner rule. A new wildcard is a map change;
// a new label count is a new tier (a reload).

// wildcardKeyRE is a key of the gateway-wildcard map: a DNS name.
var wildcardKeyRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)

// wildcardEntryOK: the value is the wildcard host of the key, the suffix
// the frontend took from the request.
func wildcardEntryOK(k, v string) bool {
	return wildcardKeyRE.MatchString(k) && v == "*."+k
}

// gatewayWildcardActions are the tiers for the label counts depths
// (largest first), between the one-label wildcard tier and the host-less
// rules.
func (r renderer) gatewayWildcardActions(depths []int) []types.Action {
	if len(depths) == 0 {
		return nil
	}
	gw := r.mapPath(model.MapGatewayWildcard)
	exact, prefix, owners := r.mapPath(model.MapExact), r.mapPath(model.MapPrefix), r.mapPath(model.MapHostOwner)
	notFound := "!{ var(txn.backend) -m found }"
	unowned := notFound + " !{ var(txn.owner) -m found }"
	var out []types.Action
	for _, n := range depths {
		// Variables of their own per tier: a lookup that finds nothing
		// leaves a variable as it was.
		host, owner, key := fmt.Sprintf("gw%d", n), fmt.Sprintf("gwowner%d", n), fmt.Sprintf("gwkey%d", n)
		hostFound := notFound + " { var(txn." + host + ") -m found }"
		keyFound := notFound + " { var(txn." + key + ") -m found }"
		out = append(out,
			setVar(host, fmt.Sprintf("var(txn.whost),field(-1,.,%d),map_str(%s)", n, gw), notFound),
			setVar(owner, "var(txn."+host+"),map_str("+owners+")", hostFound),
			setVar(key, "var(txn."+host+"),concat(,txn.path)", hostFound+" !{ var(txn.owner) -m found }"),
			setVar(key, "var(txn."+host+"),concat(,txn.path)", hostFound+" { var(txn."+owner+"),strcmp(txn.owner) eq 0 }"),
		)
		out = append(out, r.routeACLActions(key, keyFound)...)
		out = append(out,
			setVar("backend", "var(txn."+key+"),map_str("+exact+")", keyFound),
			setVar("backend", "var(txn."+key+"),map_beg("+prefix+")", keyFound),
			setVar("owner", "var(txn."+owner+")", unowned),
		)
	}
	return out
}
