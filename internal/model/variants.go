package model

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
)

// Backend variants. An Ingress's annotations configure the routes of that
// Ingress only: Ingresses routing to one Service port with different
// Ingress-scope backend settings each get their own HAProxy backend (a
// variant), so a broken or hostile annotation on one Ingress never changes
// how another one is served. Ingresses asking for the same settings share
// a variant. Service annotations and the ConfigMap apply to every variant,
// and every variant gets the Service's endpoints.
//
// The first variant registered for a Service port (its oldest Ingress's)
// is named "<namespace>_<service>_<port>", as when there is a single one;
// the others append "__" and a hash of their settings. DNS labels never
// hold "_", so "__" appears in no other backend name.

// variantID names a variant: the Service port's backend name and the
// Ingress-scope settings that differ from what applies without them.
type variantID struct{ base, key string }

type ingService struct {
	ing     *networkingv1.Ingress
	ns, svc string
}

// maxBackendName is the longest backend name the renderer accepts.
const maxBackendName = 200

// variantKey encodes the Ingress-scope backend settings ing sets for the
// Service ns/svc: the values that change the backend compared with an
// Ingress that sets none. A value the Service overrides, or equal to the
// ConfigMap's value or the default, changes nothing and is left out, so
// Ingresses that differ only there share a backend.
func (b *builder) variantKey(ns, svc string, ing *networkingv1.Ingress) string {
	k := b.settingsKey(ns, svc, ing)
	if ing != nil && b.standalone(ns, svc, ing) {
		k += "standalone-backend=" + ing.Namespace + "/" + ing.Name + "\x00"
	}
	return k
}

// settingsKey is the part of variantKey the Ingress-scope settings make.
func (b *builder) settingsKey(ns, svc string, ing *networkingv1.Ingress) string {
	if ing == nil {
		return ""
	}
	v := b.ingValues[ing]
	if len(v) == 0 {
		return ""
	}
	ck := ingService{ing, ns, svc}
	if k, ok := b.variantKeys[ck]; ok {
		return k
	}
	var svcVals values
	if s := b.services[nsName{ns, svc}]; s != nil {
		svcVals = b.serviceSettings(s)
	}
	// An Ingress sets few keys: walk those, in table order.
	idx := make([]int, 0, len(v))
	for i := range v {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	var sb strings.Builder
	for _, i := range idx {
		s := &settings[i]
		raw := v[i]
		if s.setBackend == nil || s.Scopes&ScopeIngress == 0 {
			continue
		}
		if _, over := svcVals[i]; over && s.Scopes&ScopeService != 0 {
			continue
		}
		if cm, ok := b.cmValues[i]; ok && cm == raw || !ok && s.Default != "" && s.Default == raw {
			continue
		}
		// Names, not indices: a key stays the same when the table grows.
		sb.WriteString(s.Name)
		sb.WriteByte('=')
		sb.WriteString(raw)
		sb.WriteByte(0)
	}
	k := sb.String()
	if b.variantKeys == nil {
		b.variantKeys = map[ingService]string{}
	}
	b.variantKeys[ck] = k
	return k
}

// variantName names a new variant: the base name for the first one of a
// Service port, else the base name, "__" and 8 hex digits of a hash of the
// key. The hash keeps the name stable while the settings stay the same,
// whatever other variants come and go; a collision (or a name too long for
// haproxy.cfg) takes the next candidate, deterministically since Ingresses
// are registered oldest first.
func (b *builder) variantName(id variantID) string {
	if _, taken := b.backends[id.base]; !taken {
		return id.base
	}
	seed := id.key
	for n := 0; ; n++ {
		sum := sha256.Sum256([]byte(seed))
		h := hex.EncodeToString(sum[:4])
		base := id.base
		if len(base)+2+len(h) > maxBackendName {
			base = base[:maxBackendName-2-len(h)]
		}
		name := base + "__" + h
		if _, taken := b.backends[name]; !taken {
			return name
		}
		seed = id.key + "\x00" + strconv.Itoa(n)
	}
}
