package model

import (
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// routedStatus is the fixed status the backend of host's route answers
// with, 0 when it asks pods or there is no route.
func routedStatus(t *testing.T, d *Desired, host string) (status int, routed bool) {
	t.Helper()
	for _, r := range d.Routes.Slice() {
		if r.Host != host {
			continue
		}
		for _, b := range d.Backends {
			if b.Name == r.Backend {
				return b.HTTP.Status, true
			}
		}
	}
	return 0, false
}

// TestRouteWithoutUsableBackend: a rule whose backendRefs all have weight
// 0 answers 500 for its matches instead of leaving them to other rules;
// more weighted backendRefs than a rule can split leave the rule out.
func TestRouteWithoutUsableBackend(t *testing.T) {
	s, o := loadCase(t, "testdata/gateway.yaml")
	var api *gwv1.HTTPRoute
	for _, r := range s.HTTPRoutes {
		if r.Name == "api" {
			api = r
		}
	}
	if api == nil {
		t.Fatal("no HTTPRoute api in the case")
	}
	zero := int32(0)
	api.Spec.Rules[0].BackendRefs[0].Weight = &zero
	d := Build(s, o)
	if status, routed := routedStatus(t, d, "api.example.com"); !routed || status != 500 {
		t.Errorf("rule of weight 0 only: routed %v, status %d; want a 500 answer", routed, status)
	}

	ref := api.Spec.Rules[0].BackendRefs[0]
	ref.Weight = nil
	api.Spec.Rules[0].BackendRefs = nil
	for range maxWeightedRefs + 1 {
		api.Spec.Rules[0].BackendRefs = append(api.Spec.Rules[0].BackendRefs, ref)
	}
	d = Build(s, o)
	if _, routed := routedStatus(t, d, "api.example.com"); routed {
		t.Errorf("rule with %d weighted backendRefs is routed", maxWeightedRefs+1)
	}
	found := false
	for _, p := range d.Problems {
		found = found || p.Reason == ReasonUnsupportedRouteRule && p.Object.Name == "api"
	}
	if !found {
		t.Errorf("no %s problem for HTTPRoute api: %+v", ReasonUnsupportedRouteRule, d.Problems)
	}
}
