package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	networkingv1 "k8s.io/api/networking/v1"
)

// Canary (weighted) routing: an Ingress sends a share of the traffic of
// its rules' backends to another Service of its namespace. The HAProxy
// Kubernetes Ingress Controller has no such annotation, so these keys take
// ExtensionPrefix alone.
//
// Routes keep pointing at the main backend; two maps keyed by the main
// backend's name hold the canary backend and its weight. The frontends
// look both up after routing and switch to the canary backend for
// rand(100) < weight, so a weight change is a map change at run time.

// Map names of the canary maps: main backend -> canary backend, and main
// backend -> weight (0..100).
const (
	MapCanaryBackend = "canary-backend"
	MapCanaryWeight  = "canary-weight"
)

// ReasonInvalidCanary is the Event reason for a canary that cannot apply.
const ReasonInvalidCanary = "InvalidCanary"

// MaxCanaryWeight is the weight that sends every request to the canary.
const MaxCanaryWeight = 100

// Handles of the canary settings.
var (
	canaryService     = newHandle(dnsLabelParser("Service name"))
	canaryServicePort = newHandle(servicePortParser())
	canaryWeight      = newHandle(intRange(0, MaxCanaryWeight))
)

func canarySettings() []Setting {
	// Ingress scope only, under the extension prefix alone.
	ext := []string{ExtensionPrefix}
	return []Setting{
		canaryService.register(Setting{
			Name: "canary-service", Example: "web-canary", Scopes: ScopeIngress, Prefixes: ext,
			Doc: "Service of the Ingress namespace that gets canary-weight percent of the requests each rule of the Ingress routes. Adds a backend for that Service: a reload unless it exists already.",
		}, TargetCanary),
		canaryServicePort.register(Setting{
			Name: "canary-service-port", Example: "8080", Scopes: ScopeIngress, Prefixes: ext,
			Doc: "Port (number or name) of canary-service; default: the port each rule's backend names.",
		}, TargetCanary),
		canaryWeight.register(Setting{
			Name: "canary-weight", Default: "0", Example: "10", Runtime: true, Scopes: ScopeIngress, Prefixes: ext,
			Doc: "Percentage (0..100) of the requests sent to canary-service instead of the rule's backend. Changes at run time.",
		}, TargetCanary),
	}
}

func dnsLabelParser(what string) parser[string] {
	return parser[string]{
		desc: what + " (DNS label)",
		parse: func(s string) (string, error) {
			if err := checkDNSLabel(s); err != nil {
				return "", err
			}
			return s, nil
		},
	}
}

// servicePortParser accepts a port number or a port name.
func servicePortParser() parser[networkingv1.ServiceBackendPort] {
	return parser[networkingv1.ServiceBackendPort]{
		desc: "port number 1..65535 or port name",
		parse: func(s string) (networkingv1.ServiceBackendPort, error) {
			if s != "" && allDigits(s) {
				n, err := strconv.Atoi(s)
				if err != nil || n < 1 || n > 65535 {
					return networkingv1.ServiceBackendPort{}, errors.New("port number out of range (want 1..65535)")
				}
				return networkingv1.ServiceBackendPort{Number: int32(n)}, nil
			}
			if err := checkDNSLabel(s); err != nil {
				return networkingv1.ServiceBackendPort{}, fmt.Errorf("not a port number or name: %v", err)
			}
			return networkingv1.ServiceBackendPort{Name: s}, nil
		},
	}
}

// canary is one Ingress's canary settings.
type canary struct {
	ing     *networkingv1.Ingress
	service string
	port    networkingv1.ServiceBackendPort // zero: the rule's port
	weight  int
}

// ingressCanary reads the canary settings of ing; ok is false when it sets
// no (valid) canary-service.
func (b *builder) ingressCanary(ing *networkingv1.Ingress) (canary, bool) {
	v := b.ingValues[ing]
	svc, ok := canaryService.get(v)
	if !ok {
		return canary{}, false
	}
	c := canary{ing: ing, service: svc}
	c.port, _ = canaryServicePort.get(v)
	c.weight, _ = canaryWeight.get(v)
	return c, true
}

func (c canary) same(o canary) bool {
	return c.service == o.service && c.port == o.port && c.weight == o.weight
}

// canaries registers the canary backends and fills the canary maps. It
// runs after the rules are claimed and before the backends are finished.
// A backend routed by several Ingresses takes the canary of the oldest one
// that sets canary-service, like every Ingress-scope setting; the others
// are told that their traffic to it is split too.
func (b *builder) canaries(ings []*networkingv1.Ingress) {
	for _, ing := range ings {
		v := b.ingValues[ing]
		_, hasSvc := canaryService.raw(v)
		_, hasPort := canaryServicePort.raw(v)
		_, hasWeight := canaryWeight.raw(v)
		if !hasSvc && (hasPort || hasWeight) {
			b.problem(ingressRef(ing), ReasonInvalidCanary, "%scanary-weight or %scanary-service-port without %scanary-service: ignored",
				ExtensionPrefix, ExtensionPrefix, ExtensionPrefix)
		}
	}
	routed := map[string]bool{}
	for _, r := range b.routes {
		routed[r.Backend] = true
	}
	if len(routed) == 0 {
		return
	}
	backend, weight := map[string]string{}, map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(routed)) {
		st := b.backends[name]
		if st == nil {
			continue
		}
		var win canary
		found := false
		for _, ing := range st.users {
			c, ok := b.ingressCanary(ing)
			switch {
			case !ok:
				continue
			case !found:
				win, found = c, true
			case !c.same(win):
				b.problem(ingressRef(ing), ReasonAnnotationConflict,
					"canary of backend %s ignored: older Ingress %s/%s sets canary-service %s weight %d",
					name, win.ing.Namespace, win.ing.Name, win.service, win.weight)
			}
		}
		if !found {
			continue
		}
		port := win.port
		if port == (networkingv1.ServiceBackendPort{}) {
			port = st.port
		}
		cname := st.namespace + "_" + win.service + "_" + portString(port)
		if cname == st.base {
			b.problem(ingressRef(win.ing), ReasonInvalidCanary, "canary-service %s port %s is the rule's own backend %s: ignored", win.service, portString(port), name)
			continue
		}
		if !validBackendName(st.namespace, win.service, portString(port)) {
			b.problem(ingressRef(win.ing), ReasonInvalidCanary, "canary backend %s: names must be DNS labels: ignored", cname)
			continue
		}
		for _, ing := range st.users {
			if _, ok := b.ingressCanary(ing); !ok && ing != win.ing {
				b.problem(ingressRef(ing), ReasonCanaryShared,
					"backend %s is also routed by Ingress %s/%s, whose canary sends %d%% of its requests to %s: the requests of this Ingress are split too",
					name, win.ing.Namespace, win.ing.Name, win.weight, cname)
			}
		}
		// The canary variant with the settings of the main backend's
		// Ingresses.
		cst := b.useBackend(cname, st.namespace, win.service, port, st.users[0])
		// The canary serves the main backend's requests: it takes the
		// Ingress-scope settings of the same Ingresses (authentication,
		// allow-lists...), so the split never bypasses them.
		for _, ing := range st.users {
			if !slices.Contains(cst.users, ing) {
				cst.users = append(cst.users, ing)
			}
		}
		slices.SortFunc(cst.users, olderIngress)
		backend[name] = cst.name
		weight[name] = strconv.Itoa(win.weight)
	}
	if len(backend) > 0 {
		b.d.Maps[MapCanaryBackend] = backend
		b.d.Maps[MapCanaryWeight] = weight
	}
}

// ReasonCanaryShared warns an Ingress that another Ingress's canary splits
// the traffic of a backend they share.
const ReasonCanaryShared = "CanaryShared"

// Canary is the canary of a main backend in d: the backend that gets
// weight percent of its routed requests. ok is false when it has none.
func Canary(d *Desired, backend string) (canary string, weight int, ok bool) {
	canary, ok = d.Maps[MapCanaryBackend][backend]
	if !ok {
		return "", 0, false
	}
	weight, _ = strconv.Atoi(d.Maps[MapCanaryWeight][backend])
	return canary, weight, true
}
