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
				err := s.check(raw)
				if err != nil {
					b.problem(ref, ReasonInvalidConfigMapKey, "key %s=%q: %v; %s", key, raw, err, fallbackNote(s, ScopeConfigMap))
				}
				if err == nil || s.failClosed != 0 {
					if b.cmValues == nil {
						b.cmValues = values{}
					}
					b.cmValues[i] = raw
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
	if s.failClosed != 0 {
		return "the backend answers " + strconv.Itoa(s.failClosed) + " to every request until it is fixed (fail closed)"
	}
	lower := strings.ReplaceAll((s.Scopes & (scope - 1)).String(), ",", " or ")
	switch {
	case lower != "" && s.Default != "":
		return "ignored; the " + lower + " value or the default " + quote(s.Default) + " applies"
	case lower != "":
		return "ignored; the " + lower + " value or HAProxy's default applies"
	case s.Default != "":
		return "ignored; the default " + quote(s.Default) + " applies"
	}
	return "ignored; HAProxy's default applies"
}

func quote(s string) string { return `"` + s + `"` }

// annotationValues reads the settings an object sets by annotation in the
// given scope, reporting invalid values on the object.
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
			err := s.check(raw)
			if err != nil {
				b.problem(ref, ReasonInvalidAnnotation, "annotation %s=%q: %v; %s", key, raw, err, fallbackNote(s, scope))
			} else if s.tenant != nil {
				if terr := s.tenant.check(raw, ref.Namespace); terr != nil {
					b.problem(ref, s.tenant.reason, "annotation %s=%q: %v; %s", key, raw, terr, fallbackNote(s, scope))
					err, raw = terr, refusedValue
				}
			}
			if err == nil || s.failClosed != 0 {
				if v == nil {
					v = values{}
				}
				v[i] = raw
			}
			break
		}
	}
	return v
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
// then the oldest Ingress that sets a valid value, then the ConfigMap, then
// the default.
func (b *builder) applyBackendSettings(d *backendDraft, st *backendState, svc *corev1.Service) {
	var svcVals values
	if svc != nil {
		svcVals = b.serviceSettings(svc)
	}
	for i := range settings {
		s := &settings[i]
		if s.Target != TargetBackend {
			continue
		}
		raw, ok := "", false
		if s.Scopes&ScopeService != 0 {
			raw, ok = svcVals[i]
		}
		if !ok && s.Scopes&ScopeIngress != 0 {
			raw, ok = b.ingressValue(i, st)
		}
		if !ok {
			raw, ok = b.cmValues[i]
		}
		if !ok {
			raw, ok = s.Default, s.Default != ""
		}
		if ok {
			s.setBackend(d, raw)
		}
	}
}

// ingressValue is the value of setting i from the oldest Ingress routing to
// the backend that sets it; younger Ingresses that disagree are told so.
func (b *builder) ingressValue(i int, st *backendState) (string, bool) {
	var winner *networkingv1.Ingress
	var raw string
	for _, ing := range st.users {
		v, ok := b.ingValues[ing][i]
		if !ok {
			continue
		}
		if winner == nil {
			winner, raw = ing, v
			continue
		}
		if v != raw {
			b.problem(ingressRef(ing), ReasonAnnotationConflict,
				"%s %q ignored for backend %s: older Ingress %s/%s sets %q",
				settings[i].Name, v, st.name, winner.Namespace, winner.Name, raw)
		}
	}
	return raw, winner != nil
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
