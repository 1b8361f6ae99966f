package model

import (
	"slices"
	"strings"
	"time"
)

// Scope is a set of places a setting may be written.
type Scope uint8

// Scopes, lowest precedence first: a Service annotation beats an Ingress
// annotation, which beats the controller ConfigMap.
const (
	ScopeConfigMap Scope = 1 << iota
	ScopeIngress
	ScopeService
)

func (s Scope) String() string {
	var parts []string
	for _, x := range []struct {
		s    Scope
		name string
	}{{ScopeConfigMap, "configmap"}, {ScopeIngress, "ingress"}, {ScopeService, "service"}} {
		if s&x.s != 0 {
			parts = append(parts, x.name)
		}
	}
	return strings.Join(parts, ",")
}

// Target says which part of Desired a setting configures.
type Target uint8

// Targets.
const (
	TargetGlobal  Target = iota + 1 // Desired.Global, from the ConfigMap
	TargetBackend                   // every Backend, per Service port
	// TargetTLS settings are read through their handle by the TLS step
	// (certificates, client authentication, redirects), per Ingress where
	// their scope allows.
	TargetTLS
	// TargetCanary settings are read through their handle by the canary
	// step, per Ingress.
	TargetCanary
	// TargetRouteACL is route-acl, read through its handle when the rules
	// are claimed (feat_routeacl.go).
	TargetRouteACL
)

func (t Target) String() string {
	switch t {
	case TargetGlobal:
		return "global"
	case TargetBackend:
		return "backend"
	case TargetTLS:
		return "tls"
	case TargetCanary:
		return "canary"
	case TargetRouteACL:
		return "route-acl"
	}
	return "unknown"
}

// handle reads one setting of the table with its own parser, so a step that
// reads values itself (TLS, canary) names the setting by a Go identifier: a
// misspelt name does not compile instead of silently reading nothing.
type handle[T any] struct {
	p parser[T]
	// index is the setting's position in settings, set when the table is
	// built; -1 until the handle is registered.
	index int
}

func newHandle[T any](p parser[T]) *handle[T] {
	return &handle[T]{p: p, index: -1}
}

// register binds h to s (with target t) and returns the table entry.
func (h *handle[T]) register(s Setting, t Target) Setting {
	s.Target = t
	s.Type = h.p.desc
	s.check = func(raw string) error { _, err := h.p.parse(raw); return err }
	s.bind = &h.index
	return s
}

// registerBackend binds h to s as a backend setting whose value set
// writes into the backend.
func (h *handle[T]) registerBackend(s Setting, set func(*backendDraft, T)) Setting {
	s = backendSetting(s, h.p, set)
	s.bind = &h.index
	return s
}

// raw is the value v holds for the setting.
func (h *handle[T]) raw(v values) (string, bool) {
	if h.index < 0 {
		return "", false
	}
	raw, ok := v[h.index]
	return raw, ok
}

// get is the parsed value v holds for the setting; ok is false when v holds
// none or it does not parse (a refused value kept to fail closed).
func (h *handle[T]) get(v values) (T, bool) {
	raw, ok := h.raw(v)
	if !ok {
		var zero T
		return zero, false
	}
	x, err := h.p.parse(raw)
	return x, err == nil
}

// setting is the table entry h is bound to.
func (h *handle[T]) setting() *Setting {
	return &settings[h.index]
}

// AnnotationPrefixes are the annotation prefixes accepted for every setting,
// in the order they are looked up when an object carries several.
var AnnotationPrefixes = []string{"haproxy.org/", LegacyPrefix, "haproxy.com/"}

// LegacyPrefix is the HAProxy Kubernetes Ingress Controller's oldest
// prefix, which other controllers read too: a value under it counts only
// when it is valid for the key, and keys unknown under it are not ours to
// report.
const LegacyPrefix = "ingress.kubernetes.io/"

// Reasons of annotations no setting reads.
const (
	// ReasonUnknownAnnotation: a key under one of our own prefixes that
	// is no setting (or takes another prefix).
	ReasonUnknownAnnotation = "UnknownAnnotation"
	// ReasonAnnotationScope: a setting annotated on a kind of object it
	// is not read from.
	ReasonAnnotationScope = "AnnotationScope"
	// ReasonForeignAnnotation: a value under LegacyPrefix that is not
	// valid for the key, taken as another controller's.
	ReasonForeignAnnotation = "ForeignAnnotation"
)

// ExtensionPrefix is the one prefix of the settings the HAProxy Kubernetes
// Ingress Controller lacks (Setting.Prefixes), so they never collide with
// a future key of its own.
const ExtensionPrefix = "perimeter.io/"

// Setting is one ConfigMap key / annotation. A ConfigMap key is Name (or an
// alias) as is; an annotation is one of AnnotationPrefixes + Name.
type Setting struct {
	Name    string
	Aliases []string
	Scopes  Scope
	Target  Target
	// Type describes the accepted values, for documentation.
	Type string
	// Default applies when no scope sets a valid value; "" leaves the field
	// at its zero value (HAProxy's or the renderer's default).
	Default string
	// Unset names what applies without a value when Default is "" (for
	// messages; "HAProxy's default" when empty).
	Unset string
	Doc   string
	// Example is a valid value shown in docs/annotations.md.
	Example string
	// Runtime marks settings applied through the Runtime API without a
	// reload; every other change reloads HAProxy.
	Runtime bool
	// Prefixes, when set, replace AnnotationPrefixes for this setting
	// (extensions take ExtensionPrefix alone).
	Prefixes []string

	check      func(string) error
	setBackend func(*backendDraft, string)
	setGlobal  func(*Global, string)
	// failClosed, when not 0, keeps an invalid value at its scope and
	// makes the backend answer this status (feat_backend.go).
	failClosed int
	// tenant, when set, judges a value that check accepted once more when
	// an Ingress or a Service sets it: namespace tenants get less than the
	// operator's ConfigMap (tenant.go).
	tenant *tenantRule
	// annotations are the full annotation keys, prefix-major, built once so
	// lookups do not allocate.
	annotations []string
	// bind, when set, receives the setting's index in the table (handle).
	bind *int
}

// names are the ConfigMap keys for s, in lookup order.
func (s *Setting) names() []string {
	return append([]string{s.Name}, s.Aliases...)
}

// backendDraft is a Backend being built, with the settings that only shape
// how its fields are computed.
type backendDraft struct {
	Backend
	serversIncrement int
	feat             backendFeatureDraft
}

// backendSetting binds a parser to a Backend field.
func backendSetting[T any](s Setting, p parser[T], set func(*backendDraft, T)) Setting {
	s.Target = TargetBackend
	s.Type = p.desc
	s.check = func(raw string) error { _, err := p.parse(raw); return err }
	s.setBackend = func(b *backendDraft, raw string) {
		if v, err := p.parse(raw); err == nil {
			set(b, v)
		}
	}
	return s
}

// perBackend lets an Ingress or a Service override a global setting for
// its backend: the ConfigMap value and the default stay in the defaults
// section, an annotation sets the backend's own.
func perBackend[T any](s Setting, p parser[T], set func(*backendDraft, T)) Setting {
	s.setBackend = func(b *backendDraft, raw string) {
		if v, err := p.parse(raw); err == nil {
			set(b, v)
		}
	}
	return s
}

// globalSetting binds a parser to a Global field.
func globalSetting[T any](s Setting, p parser[T], set func(*Global, T)) Setting {
	s.Target = TargetGlobal
	s.Type = p.desc
	s.check = func(raw string) error { _, err := p.parse(raw); return err }
	s.setGlobal = func(g *Global, raw string) {
		if v, err := p.parse(raw); err == nil {
			set(g, v)
		}
	}
	return s
}

const backendScopes = ScopeConfigMap | ScopeIngress | ScopeService

// settings is the one table of every key the model understands. A new
// feature adds its entry here; docs are generated from Settings().
var settings = func() []Setting {
	timeout := func(name, def, example, doc string, set func(*Global, time.Duration)) Setting {
		return globalSetting(Setting{Name: name, Scopes: ScopeConfigMap, Default: def, Example: example, Doc: doc}, durationParser(), set)
	}
	// backendTimeout is a timeout an Ingress or a Service may set for its
	// backend, as the HAProxy Kubernetes Ingress Controller allows.
	backendTimeout := func(name, def, example, doc string, set func(*Global, time.Duration), setBackend func(*backendDraft, time.Duration)) Setting {
		s := timeout(name, def, example, doc, set)
		s.Scopes = backendScopes
		return perBackend(s, durationParser(), setBackend)
	}
	list := []Setting{
		// Backend settings.
		backendSetting(Setting{
			Name: "load-balance", Scopes: backendScopes, Default: "roundrobin", Example: "leastconn",
			Doc: "Load-balancing algorithm of the backend.",
		}, balanceParser(), func(b *backendDraft, v string) { b.Balance = v }),
		backendSetting(Setting{
			Name: "check", Scopes: backendScopes, Default: "true", Example: "false",
			Doc: "Enable TCP health checks of the backend's servers.",
		}, boolParser(), func(b *backendDraft, v bool) { b.Check = v }),
		backendSetting(Setting{
			Name: "check-interval", Scopes: backendScopes, Example: "10s",
			Doc: "Interval between two health checks (HAProxy's default when unset).",
		}, durationParser(), func(b *backendDraft, v time.Duration) { b.CheckInterval = v }),
		backendSetting(Setting{
			Name: "forwarded-for", Scopes: backendScopes, Default: "true", Example: "false",
			Doc: "Add the X-Forwarded-For header to requests sent to the backend: the client address HAProxy saw, replacing any the client sent unless --trust-forwarded-for.",
		}, boolParser(), func(b *backendDraft, v bool) { b.ForwardedFor = v }),
		backendSetting(Setting{
			Name: "servers-increment", Aliases: []string{"scale-server-slots", "server-slots"}, Scopes: ScopeConfigMap | ScopeService,
			Example: "42", Unset: "server slots sized to the endpoints",
			Doc: "Server slots come in blocks of this size (the HAProxy Kubernetes Ingress Controller's 42 by default). Unset, slots are sized to the endpoints: their number plus a quarter (at least one) free for scale-up, in multiples of 4; a backend that shrinks keeps its slots without a reload.",
		}, intRange(1, 1000), func(b *backendDraft, v int) { b.serversIncrement = v }),

		// Global settings.
		globalSetting(Setting{
			Name: "maxconn", Scopes: ScopeConfigMap, Example: "20000",
			Doc: "Global maximum of concurrent connections.",
		}, intRange(1, 10_000_000), func(g *Global, v int) { g.Maxconn = v }),
		globalSetting(Setting{
			Name: "nbthread", Scopes: ScopeConfigMap, Example: "4",
			Doc: "Number of HAProxy worker threads.",
		}, intRange(1, 4096), func(g *Global, v int) { g.Nbthread = v }),
		globalSetting(Setting{
			Name: "hard-stop-after", Scopes: ScopeConfigMap, Default: "30m", Example: "30m",
			Doc: "Longest time an old worker may keep serving after a reload. Old workers held by long connections otherwise pile up when reloads are frequent; mworker-max-reloads bounds their number.",
		}, durationParser(), func(g *Global, v time.Duration) { g.HardStopAfter = v }),
		globalSetting(Setting{
			Name: "mworker-max-reloads", Scopes: ScopeConfigMap, Default: "50", Example: "20",
			Doc: "Reloads an old worker may survive before the master stops it, so frequent reloads while long connections hold old workers cannot pile them up.",
		}, intRange(1, 1000), func(g *Global, v int) { g.MworkerMaxReloads = v }),
		timeout("timeout-client", "50s", "30s", "Client inactivity timeout.", func(g *Global, v time.Duration) { g.TimeoutClient = v }),
		timeout("timeout-connect", "5s", "2s", "Timeout to connect to a server.", func(g *Global, v time.Duration) { g.TimeoutConnect = v }),
		backendTimeout("timeout-server", "50s", "1m", "Server inactivity timeout. On an Ingress or a Service: the timeout of its backends.",
			func(g *Global, v time.Duration) { g.TimeoutServer = v }, func(b *backendDraft, v time.Duration) { b.Features.TimeoutServer = v }),
		timeout("timeout-http-request", "5s", "10s", "Time to receive a whole HTTP request.", func(g *Global, v time.Duration) { g.TimeoutHTTPRequest = v }),
		timeout("timeout-http-keep-alive", "1m", "30s", "Time to wait for a new request on a kept-alive connection.", func(g *Global, v time.Duration) { g.TimeoutHTTPKeepAlive = v }),
		timeout("timeout-queue", "5s", "10s", "Time a request may wait in a queue for a server slot.", func(g *Global, v time.Duration) { g.TimeoutQueue = v }),
		timeout("timeout-tunnel", "1h", "2h", "Inactivity timeout of tunnels (WebSocket, CONNECT).", func(g *Global, v time.Duration) { g.TimeoutTunnel = v }),
	}
	list = append(list, frontendFeatureSettings()...)
	list = append(list, globalFeatureSettings()...)
	list = append(list, connectionSettings()...)
	list = append(list, backendFeatureSettings()...)
	list = append(list, tlsSettings()...)
	list = append(list, canarySettings()...)
	list = append(list, passthroughSettings()...)
	list = append(list, frontendSnippetSettings()...)
	list = append(list, standaloneSettings()...)
	list = append(list, routeACLSettings()...)
	for i := range list {
		s := &list[i]
		if s.bind != nil {
			*s.bind = i
		}
		if s.tenant == nil {
			s.tenant = tenantRules[s.Name]
		}
		for _, p := range settingPrefixes(s) {
			for _, n := range s.names() {
				s.annotations = append(s.annotations, p+n)
			}
		}
	}
	return list
}()

// annotationKeys are the settings by every annotation key, whatever their
// scope; settingNames by ConfigMap key (names and aliases).
var annotationKeys, settingNames = func() (map[string]int, map[string]*Setting) {
	keys, names := map[string]int{}, map[string]*Setting{}
	for i := range settings {
		for _, a := range settings[i].annotations {
			keys[a] = i
		}
		for _, n := range settings[i].names() {
			names[n] = &settings[i]
		}
	}
	return keys, names
}()

// settingPrefixes are the annotation prefixes s takes.
func settingPrefixes(s *Setting) []string {
	if s.Prefixes != nil {
		return s.Prefixes
	}
	return AnnotationPrefixes
}

// Settings returns a copy of the settings table, for documentation and
// `perimeter explain`.
func Settings() []Setting {
	out := make([]Setting, len(settings))
	copy(out, settings)
	for i := range out {
		out[i].Aliases = slices.Clone(out[i].Aliases)
		out[i].annotations = slices.Clone(out[i].annotations)
		out[i].Prefixes = slices.Clone(out[i].Prefixes)
		out[i].bind = nil
	}
	return out
}

// Annotation is the first annotation key of s, e.g. "haproxy.org/" + Name.
func (s Setting) Annotation() string {
	if len(s.annotations) == 0 {
		return ""
	}
	return s.annotations[0]
}

// Check reports why raw is not a valid value for s, or nil.
func (s Setting) Check(raw string) error {
	return s.check(raw)
}
