package model

import networkingv1 "k8s.io/api/networking/v1"

// standalone-backend (the peer's 3.x key): an Ingress gets a backend of its
// own for each Service port it routes to, never shared with another
// Ingress, even one asking for the same settings. Backend variants
// (variants.go) already separate Ingresses whose settings differ; this
// makes the variant key name the Ingress too.

var standaloneBackend = newHandle(boolParser())

func standaloneSettings() []Setting {
	return []Setting{standaloneBackend.registerBackend(Setting{
		Name: "standalone-backend", Example: "true", Scopes: ScopeIngress | ScopeService,
		Doc: "Give the Ingress (on a Service: each Ingress routing to it) a backend of its own for each Service port, never shared with another Ingress: " +
			"its own health checks, connection limits and sticky-session state. Ingresses with different backend settings get their own backend anyway; this also separates those with the same settings. Each such backend costs its server slots in memory.",
	}, func(*backendDraft, bool) {
		// Nothing to set: variantKey reads the handle and gives the
		// Ingress its own variant.
	})}
}

// standalone reports whether ing's routes to Service ns/svc take a backend
// of their own: the Service's annotation, else the Ingress's.
func (b *builder) standalone(ns, svc string, ing *networkingv1.Ingress) bool {
	if s := b.services[nsName{ns, svc}]; s != nil {
		if on, ok := standaloneBackend.get(b.serviceSettings(s)); ok {
			return on
		}
	}
	on, _ := standaloneBackend.get(b.ingValues[ing])
	return on
}
