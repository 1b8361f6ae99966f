package model

import (
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
)

// Annotations that bind an Ingress to a class.
const (
	// AnnotationIngressClass is the deprecated class annotation, still
	// honoured as the Ingress API asks controllers to.
	AnnotationIngressClass = "kubernetes.io/ingress.class"
	// AnnotationDefaultClass marks the IngressClass that Ingresses naming
	// no class belong to.
	AnnotationDefaultClass = networkingv1.AnnotationIsDefaultIngressClass
)

// classSelector decides which Ingresses this controller serves, the way the
// HAProxy Kubernetes Ingress Controller does.
type classSelector struct {
	o       Options
	byName  map[string]*networkingv1.IngressClass
	deflt   *networkingv1.IngressClass // nil when no class is the default
	ourName string                     // the spec.controller we answer to
}

func newClassSelector(classes []*networkingv1.IngressClass, o Options) *classSelector {
	c := &classSelector{o: o, byName: make(map[string]*networkingv1.IngressClass, len(classes))}
	c.ourName = Controller
	if o.IngressClass != "" {
		c.ourName = Controller + "/" + o.IngressClass
	}
	for _, ic := range classes {
		if ic == nil {
			continue
		}
		c.byName[ic.Name] = ic
		if ic.Annotations[AnnotationDefaultClass] != "true" {
			continue
		}
		// Several defaults are a misconfiguration the API server admits;
		// take the newest, as Kubernetes' own admission does, so the
		// answer does not depend on list order.
		if c.deflt == nil || newerClass(ic, c.deflt) {
			c.deflt = ic
		}
	}
	return c
}

func newerClass(a, b *networkingv1.IngressClass) bool {
	ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	if !ta.Equal(tb) {
		return ta.After(tb)
	}
	return a.Name < b.Name
}

// ours says whether an IngressClass names this controller.
func (c *classSelector) ours(ic *networkingv1.IngressClass) bool {
	if ic == nil {
		return false
	}
	if c.o.IngressClass == "" {
		return ic.Spec.Controller == Controller || ic.Spec.Controller == Controller+"/"
	}
	return ic.Spec.Controller == c.ourName
}

// classAnnotation is the class an Ingress names by annotation: the
// Kubernetes one, else the same key under one of our prefixes.
func classAnnotation(ing *networkingv1.Ingress) string {
	if v := ing.Annotations[AnnotationIngressClass]; v != "" {
		return v
	}
	for _, k := range prefixedClassAnnotations {
		if v := ing.Annotations[k]; v != "" {
			return v
		}
	}
	return ""
}

var prefixedClassAnnotations = func() (keys []string) {
	for _, p := range AnnotationPrefixes {
		keys = append(keys, p+"ingress.class")
	}
	return keys
}()

// serves reports whether this controller serves ing.
func (c *classSelector) serves(ing *networkingv1.Ingress) bool {
	ann := classAnnotation(ing)
	field := ""
	if ing.Spec.IngressClassName != nil {
		field = *ing.Spec.IngressClassName
	}
	// The API server requires the two to agree when both are set; when an
	// older object still carries both, either naming us is enough.
	if ann != "" && c.o.IngressClass != "" && ann == c.o.IngressClass {
		return true
	}
	if field != "" {
		return c.ours(c.byName[field])
	}
	if ann != "" {
		return false
	}
	// No class named. A default IngressClass claims such Ingresses for its
	// controller; --empty-ingress-class serves them regardless.
	if c.o.IngressClass == "" {
		return c.deflt == nil || c.ours(c.deflt)
	}
	return c.o.EmptyIngressClass || c.ours(c.deflt)
}

// namespaceAllowed applies --namespace-whitelist and --namespace-blacklist.
func namespaceAllowed(ns string, o Options) bool {
	if len(o.NamespaceWhitelist) > 0 && !slices.Contains(o.NamespaceWhitelist, ns) {
		return false
	}
	return !slices.Contains(o.NamespaceBlacklist, ns)
}
