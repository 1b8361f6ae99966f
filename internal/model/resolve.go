package model

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// configMap reads the controller ConfigMap: Global settings and the lowest
// scope of backend settings.
func (b *builder) configMap() {
	g := &b.d.Global
	cm := b.s.ConfigMap
	if cm != nil {
		ref := ObjectRef{Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name}
		for i := range settings {
			s := &settings[i]
			if s.Scopes&ScopeConfigMap == 0 {
				continue
			}
			for _, key := range s.names() {
				raw, ok := cm.Data[key]
				if !ok {
					continue
				}
				raw = strings.TrimSpace(raw)
				value, err := b.checkValue(s, raw)
				if err != nil {
					b.problem(ref, ReasonInvalidConfigMapKey, "key %s=%q: %v; %s", key, raw, err, fallbackNote(s, ScopeConfigMap))
				}
				if err == nil || s.failClosed != 0 {
					if b.cmValues == nil {
						b.cmValues = values{}
					}
					b.cmValues[i] = value
				}
				break
			}
		}
	}
	for i := range settings {
		s := &settings[i]
		if s.Target != TargetGlobal {
			continue
		}
		raw, ok := b.cmValues[i]
		if !ok {
			raw, ok = s.Default, s.Default != ""
		}
		if ok {
			s.setGlobal(g, raw)
		}
	}
}

// fallbackNote says what applies instead of a rejected value.
func fallbackNote(s *Setting, scope Scope) string {
	switch {
	case s.Target == TargetRouteACL:
		return "the routes to this Service are left out until it is fixed (fail closed); other Services are not affected"
	case s.failClosed != 0 && scope == ScopeIngress:
		return "the routes of this Ingress answer " + strconv.Itoa(s.failClosed) + " to every request until it is fixed (fail closed); other Ingresses of the Service are not affected"
	case s.failClosed != 0:
		return "the backend answers " + strconv.Itoa(s.failClosed) + " to every request until it is fixed (fail closed)"
	}
	lower := strings.ReplaceAll((s.Scopes & (scope - 1)).String(), ",", " or ")
	switch {
	case lower != "" && s.Default != "":
		return "ignored; the " + lower + " value or the default " + quote(s.Default) + " applies"
	case lower != "":
		return "ignored; the " + lower + " value or " + s.unset() + " applies"
	case s.Default != "":
		return "ignored; the default " + quote(s.Default) + " applies"
	}
	return "ignored; " + s.unset() + " applies"
}

// unset names what applies when no scope sets the setting and it has no
// Default.
func (s *Setting) unset() string {
	if s.Unset != "" {
		return s.Unset
	}
	return "HAProxy's default"
}

func quote(s string) string { return `"` + s + `"` }

// annotationValues reads the settings an object sets by annotation in the
// given scope, reporting invalid values, and keys of ours that are unknown
// or have no effect in this scope, on the object.
func (b *builder) annotationValues(ref ObjectRef, ann map[string]string, scope Scope) values {
	if !hasOurPrefix(ann) {
		return nil
	}
	var v values
	for i := range settings {
		s := &settings[i]
		if s.Scopes&scope == 0 {
			continue
		}
		for _, key := range s.annotations {
			raw, ok := ann[key]
			if !ok {
				continue
			}
			raw = strings.TrimSpace(raw)
			value, err := b.checkValue(s, raw)
			if err != nil && strings.HasPrefix(key, LegacyPrefix) {
				// Other controllers (ingress-nginx before 0.9, haproxy-ingress)
				// read this prefix too, with other values for the same names:
				// a value that is not ours is theirs, and must not make this
				// one fail closed.
				b.problem(ref, ReasonForeignAnnotation, "annotation %s=%q is not a valid %s value here (%v): taken as another controller's annotation and ignored; use %s%s for this controller",
					key, raw, s.Name, err, AnnotationPrefixes[0], s.Name)
				continue
			}
			if err != nil {
				b.problem(ref, ReasonInvalidAnnotation, "annotation %s=%q: %v; %s", key, raw, err, fallbackNote(s, scope))
			} else if s.tenant != nil {
				if terr := s.tenant.check(value, ref.Namespace); terr != nil {
					b.problem(ref, s.tenant.reason, "annotation %s=%q: %v; %s", key, raw, terr, fallbackNote(s, scope))
					err, value = terr, refusedValue
				}
			}
			if err == nil || s.failClosed != 0 {
				if v == nil {
					v = values{}
				}
				v[i] = value
			}
			break
		}
	}
	b.strayAnnotations(ref, ann, scope)
	return v
}

// strayAnnotations reports the annotations under one of our own prefixes
// that no setting reads in scope: a misspelt key or one set on the wrong
// kind of object would otherwise be ignored without a word. The legacy
// prefix is shared with other controllers, so its unknown keys are theirs.
func (b *builder) strayAnnotations(ref ObjectRef, ann map[string]string, scope Scope) {
	for key := range ann {
		prefix, name := ownPrefix(key)
		if prefix == "" || scope == ScopeIngress && name == "ingress.class" && prefix != ExtensionPrefix {
			continue
		}
		i, known := annotationKeys[key]
		switch {
		case !known && settingNames[name] != nil:
			s := settingNames[name]
			b.problem(ref, ReasonUnknownAnnotation, "annotation %s: %s takes the prefix %s; ignored", key, name, strings.Join(settingPrefixes(s), " or "))
		case !known:
			b.problem(ref, ReasonUnknownAnnotation, "annotation %s is not a key of this controller; ignored", key)
		case settings[i].Scopes&scope == 0:
			s := &settings[i]
			b.problem(ref, ReasonAnnotationScope, "annotation %s has no effect on %s: %s is read from the %s only; ignored",
				key, kindArticle(ref.Kind), s.Name, strings.ReplaceAll(s.Scopes.String(), ",", " or "))
		}
	}
}

// ownPrefix splits key when it starts with one of the prefixes only this
// controller reads.
func ownPrefix(key string) (prefix, name string) {
	for _, p := range AnnotationPrefixes {
		if p != LegacyPrefix && strings.HasPrefix(key, p) {
			return p, key[len(p):]
		}
	}
	if strings.HasPrefix(key, ExtensionPrefix) {
		return ExtensionPrefix, key[len(ExtensionPrefix):]
	}
	return "", ""
}

func kindArticle(kind string) string {
	switch kind {
	case "Ingress":
		return "an Ingress"
	case "":
		return "this object"
	}
	return "a " + kind
}

// hasOurPrefix is a fast path: most objects carry no annotation of ours.
func hasOurPrefix(ann map[string]string) bool {
	for k := range ann {
		for _, p := range AnnotationPrefixes {
			if strings.HasPrefix(k, p) {
				return true
			}
		}
		if strings.HasPrefix(k, ExtensionPrefix) {
			return true
		}
	}
	return false
}

// ingressSettings reads a served Ingress's annotations once, so invalid
// values are reported even when the Ingress routes nowhere yet.
func (b *builder) ingressSettings(ing *networkingv1.Ingress) {
	if v := b.annotationValues(ingressRef(ing), ing.Annotations, ScopeIngress); v != nil {
		b.ingValues[ing] = v
	}
}

// serviceSettings reads a Service's annotations the first time a backend
// uses it; unused Services are not judged.
func (b *builder) serviceSettings(svc *corev1.Service) values {
	if v, ok := b.svcValues[svc]; ok {
		return v
	}
	v := b.annotationValues(serviceRef(svc.Namespace, svc.Name), svc.Annotations, ScopeService)
	b.svcValues[svc] = v
	return v
}

// applyBackendSettings resolves every backend setting by scope: Service,
// then the backend's Ingresses (which all ask for the same, variants.go),
// then the ConfigMap, then the default. A global setting that an Ingress or
// a Service may override for its backend takes only those scopes here: its
// ConfigMap value and default are the defaults section's.
func (b *builder) applyBackendSettings(d *backendDraft, st *backendState, svc *corev1.Service) {
	var svcVals values
	if svc != nil {
		svcVals = b.serviceSettings(svc)
	}
	for i := range settings {
		s := &settings[i]
		if s.setBackend == nil {
			continue
		}
		raw, ok := "", false
		if s.Scopes&ScopeService != 0 {
			raw, ok = svcVals[i]
		}
		if !ok && s.Scopes&ScopeIngress != 0 && len(st.users) > 0 {
			raw, ok = b.ingValues[st.users[0]][i]
		}
		if !ok && s.Target == TargetBackend {
			raw, ok = b.cmValues[i]
		}
		if !ok && s.Target == TargetBackend {
			raw, ok = s.Default, s.Default != ""
		}
		if ok {
			s.setBackend(d, raw)
		}
	}
}

// origin is the object whose value of backend setting i be uses, by
// applyBackendSettings's precedence: its Service, else the oldest of its
// Ingresses that sets it, else the ConfigMap.
func (b *builder) origin(i int, be *Backend) ObjectRef {
	s := &settings[i]
	if svc := b.services[nsName{be.Namespace, be.Service}]; svc != nil && s.Scopes&ScopeService != 0 {
		if _, ok := b.svcValues[svc][i]; ok {
			return serviceRef(be.Namespace, be.Service)
		}
	}
	if st := b.backends[be.Name]; st != nil && s.Scopes&ScopeIngress != 0 {
		for _, ing := range st.users {
			if _, ok := b.ingValues[ing][i]; ok {
				return ingressRef(ing)
			}
		}
	}
	if cm := b.s.ConfigMap; cm != nil {
		return ObjectRef{Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name}
	}
	return serviceRef(be.Namespace, be.Service)
}

// DefaultGlobal is Global with the defaults of the settings table: what
// the model gives when the ConfigMap sets nothing.
func DefaultGlobal() Global {
	var g Global
	for i := range settings {
		s := &settings[i]
		if s.Target == TargetGlobal && s.Default != "" {
			s.setGlobal(&g, s.Default)
		}
	}
	return g
}
