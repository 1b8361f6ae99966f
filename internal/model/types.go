// Package model turns an immutable snapshot of Kubernetes objects into the
// HAProxy state the daemon wants. It is pure: no I/O, no clocks, no
// goroutines, and the same snapshot always gives the same result, so it can be
// tested with golden files and used unchanged by `perimeter render`/`explain`.
package model

import (
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Snapshot is what the informers held at one instant. The model never
// mutates it.
type Snapshot struct {
	Ingresses      []*networkingv1.Ingress
	IngressClasses []*networkingv1.IngressClass
	Services       []*corev1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
	// Secrets holds only the Secrets that served objects reference.
	Secrets []*corev1.Secret
	// PendingSecrets lists, as NAMESPACE/NAME, referenced Secrets whose
	// watch has not completed its first list: their absence is not (yet) a
	// problem (tls.go).
	PendingSecrets []string
	// RefusedSecrets are referenced Secrets the watcher does not watch
	// (namespace filters, caps), as NAMESPACE/NAME -> why: they count as
	// missing, reported as not watched rather than not found (tenant.go).
	RefusedSecrets map[string]string
	// ConfigMap is the controller ConfigMap (--configmap); nil when absent.
	ConfigMap *corev1.ConfigMap
	// ErrorFiles is --configmap-errorfiles; TCPServices is --configmap-tcp-services.
	ErrorFiles  *corev1.ConfigMap
	TCPServices *corev1.ConfigMap
	// PatternFiles is --configmap-patternfiles: its keys are the files a
	// "patterns/<file>" address list names.
	PatternFiles *corev1.ConfigMap
	// ExternalNames holds what the daemon's resolver last found for the
	// DNS names of ExternalName Services, by lower-case name without a
	// trailing dot; a name not yet looked up is absent.
	ExternalNames map[string]ResolvedName
	// Gateway API objects, present only when their CRDs are installed
	// (gateway.go).
	GatewayClasses  []*gwv1.GatewayClass
	Gateways        []*gwv1.Gateway
	HTTPRoutes      []*gwv1.HTTPRoute
	GRPCRoutes      []*gwv1.GRPCRoute
	ReferenceGrants []*gwv1.ReferenceGrant
	TLSRoutes       []*gwv1.TLSRoute
	TCPRoutes       []*gwv1.TCPRoute
	// Namespaces are watched with the Gateway API: listeners select the
	// namespaces of their routes by label.
	Namespaces []*corev1.Namespace
}

// ResolvedName is the outcome of looking up an ExternalName Service's DNS
// name: the addresses go through the same checks as EndpointSlice
// addresses, since whoever writes the Service (or its DNS zone) chooses
// them.
type ResolvedName struct {
	Addrs []netip.Addr
	// Err is why the last lookup failed; empty when it succeeded.
	Err string
}

// ExternalNameKey is the key of a name in Snapshot.ExternalNames.
func ExternalNameKey(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// Options are the daemon flags that change what the model produces.
type Options struct {
	// IngressClass is --ingress.class; empty serves Ingresses without a class.
	IngressClass string
	// EmptyIngressClass is --empty-ingress-class: with IngressClass set, also
	// serve Ingresses that name no class.
	EmptyIngressClass bool
	// DefaultBackendService is --default-backend-service as NAMESPACE/NAME
	// (port: the Service's first port); empty means the built-in 404.
	DefaultBackendService string
	// NamespaceWhitelist / NamespaceBlacklist filter objects by namespace.
	NamespaceWhitelist []string
	NamespaceBlacklist []string
	// ConfigSnippets lists the snippet kinds enabled by --config-snippets
	// ("global", "backend", "frontend", "stats"); snippets are ignored
	// unless named here.
	ConfigSnippets []string
	// DefaultSSLCertificate is --default-ssl-certificate as NAMESPACE/NAME
	// (the ConfigMap's ssl-certificate wins); DefaultCertificate is the PEM
	// (chain then key) served when neither gives a valid certificate: the
	// daemon generates it at start, the model never does (tls.go).
	DefaultSSLCertificate string
	DefaultCertificate    []byte
	// AllowCrossNamespaceHosts is --allow-cross-namespace-hosts: Ingresses
	// of several namespaces may share a host (oldest rule wins per path),
	// and requests for a host fall through to any namespace's wildcard and
	// host-less rules. Off, a host belongs to the namespace of its oldest
	// Ingress.
	AllowCrossNamespaceHosts bool
	// LocalAddresses are the edge host's own addresses: endpoints never
	// point at them (backends.go).
	LocalAddresses []netip.Addr
	// DisableExternalName is --disable-service-external-name: ExternalName
	// Services get no servers, with an Event.
	DisableExternalName bool
	// GatewayController is --gateway-controller, the GatewayClass
	// controllerName served; empty means DefaultGatewayController.
	GatewayController string
	// GatewayHTTPPort is the port the http frontend listens on: HTTP
	// listeners of Gateways must name it (or 80); 0 accepts any port.
	GatewayHTTPPort int
	// GatewayHTTPSPort is the https frontend's port: HTTPS and TLS
	// listeners must name it (or 443); 0 accepts any port, -1 means
	// HTTPS is not served.
	GatewayHTTPSPort int
	// GatewayListenerPorts are the ports beyond the http and https ports
	// that Gateway HTTP listeners may open (gateway_ports.go); none by
	// default, since a listener's port opens a port on the edge host.
	GatewayListenerPorts []PortRange
	// GatewayAddresses are the addresses the edge gives Gateways, one
	// each; none means every Gateway is served on the edge's address.
	GatewayAddresses []netip.Addr
	// ReservedPorts are ports the edge serves otherwise (statistics,
	// health): no Gateway listener may take them.
	ReservedPorts []int
}

// PortRange is the ports From to To, both included.
type PortRange struct{ From, To int }

// Controller is the IngressClass spec.controller prefix we answer to,
// compatible with the HAProxy Kubernetes Ingress Controller.
const Controller = "haproxy.org/ingress-controller"

// Map names. Keys are "host/path" (host lower-case, no port) or "/path" for
// rules without a host; a wildcard host is stored as "*.example.com".
const (
	MapExact  = "path-exact"  // exact lookups: Exact paths and Prefix paths themselves
	MapPrefix = "path-prefix" // map_beg lookups: Prefix paths with a trailing "/"
	// MapHostOwner maps each routed host (wildcards included) to
	// "@<namespace>" of its owner. Keys "@<namespace>/path" in MapExact and
	// MapPrefix hold that namespace's host-less rules and default.
	MapHostOwner = "host-owner"
	// MapGatewayWildcard maps the suffix of each wildcard host of the
	// Gateway API routes to the host ("example.com" -> "*.example.com"):
	// there a wildcard matches one or more leading labels, where an
	// Ingress's matches exactly one (gateway_host.go).
	MapGatewayWildcard = "gateway-wildcard"
)

// BackendNotFound is the map value that answers 404: the backend HAProxy's
// configuration always has for unmatched requests.
const BackendNotFound = "DEFAULT_404"

// Desired is the whole HAProxy state the daemon wants.
type Desired struct {
	Global Global
	// Backends sorted by Name.
	Backends []*Backend
	// Maps by name (MapExact, MapPrefix, ...): key -> value (a backend name;
	// a weight 0..100 in MapCanaryWeight).
	Maps map[string]map[string]string
	// MapChanges tells, for some maps, how they differ from the previous
	// result's (the one an incremental update was applied to), so that a
	// consumer can apply a change of a few entries of a map of thousands
	// without comparing every entry. Optional: absent means "compare".
	MapChanges map[string]MapChange
	// DefaultBackend names the backend for requests no rule matches; empty
	// means HAProxy's built-in 404 answer.
	DefaultBackend string
	// DefaultSource is the Ingress whose spec.defaultBackend gave
	// DefaultBackend; zero when it came from --default-backend-service or
	// DefaultBackend is empty.
	DefaultSource ObjectRef
	// NamespaceDefaults are, by namespace, the Ingresses whose
	// spec.defaultBackend answers the unmatched paths of the namespace's
	// own hosts (MapHostOwner).
	NamespaceDefaults map[string]ObjectRef
	// Routes are the served rules, sorted, for status, explain and tests.
	Routes RouteList
	// CondRoutes are the rules to Services with route-acl, oldest Ingress
	// first; RouteACLs their backends' conditions, in the order the
	// frontends try them (feat_routeacl.go).
	CondRoutes []Route
	RouteACLs  []RouteACL
	// Served lists the Ingresses this controller serves (for status).
	Served []ObjectRef
	// Problems are rejected objects or values; each becomes a log line and an
	// Event on its object.
	Problems []Problem
	// SecretRefs lists, as NAMESPACE/NAME, every Secret that served objects
	// reference, so that only those are watched.
	SecretRefs []string
	// TLS is what the https frontend serves (tls.go).
	TLS TLS
	// ErrorPages are the --configmap-errorfiles pages, sorted by Code.
	ErrorPages []ErrorPage
	// TCPServices are the --configmap-tcp-services frontends, sorted by Port.
	TCPServices []TCPService
	// GatewayAPI is the status of the served Gateway API objects.
	GatewayAPI GatewayAPIStatus
	// GatewayBinds are the HTTP listening sockets Gateways add to the
	// http frontend, sorted by Name (gateway_ports.go).
	GatewayBinds []GatewayBind

	// inc is what UpdateIngresses needs to apply a change of Ingresses
	// without a full Build (incremental.go); nil when it cannot.
	inc *ingressIndex
	// bySvc indexes Backends by Service (indexBackends).
	bySvc map[ServiceKey][]string
}

// MapChange says that map To equals map From but for the entries of Keys
// (sorted): each is set in To to a new value or missing from it. A consumer
// trusts it only when it holds From and is handed To, by identity, since
// results are copied and their other maps replaced.
type MapChange struct {
	From, To map[string]string
	Keys     []string
}

// Global holds ConfigMap-level settings. Zero values mean HAProxy's or the
// daemon's defaults.
type Global struct {
	Maxconn       int
	Nbthread      int
	HardStopAfter time.Duration
	// MworkerMaxReloads is how many reloads an old worker may survive.
	MworkerMaxReloads int
	SSLRedirect       bool

	TimeoutClient        time.Duration
	TimeoutConnect       time.Duration
	TimeoutServer        time.Duration
	TimeoutHTTPRequest   time.Duration
	TimeoutHTTPKeepAlive time.Duration
	TimeoutQueue         time.Duration
	TimeoutTunnel        time.Duration

	// ProxyProtocol lists the sources the http frontend accepts the
	// PROXY protocol from (feat_backend.go); "" = none.
	ProxyProtocol CIDRList

	// TLS is the https frontend's policy (tls.go).
	TLS TLSPolicy

	// Log is syslog-server, log-format and dontlognull (feat_global.go).
	Log LogSettings
	// Connection is http-connection-mode, the fin timeouts and logasap
	// (feat_connection.go).
	Connection ConnectionSettings
	// ConfigSnippet is global-config-snippet, one directive per line; empty
	// unless --config-snippets enables "global".
	ConfigSnippet string
	// FrontendSnippet (frontend-config-snippet, the http and https
	// frontends) and StatsSnippet (stats-config-snippet): one directive per
	// line; empty unless --config-snippets enables "frontend", "stats".
	FrontendSnippet, StatsSnippet string
}

// Backend is one Service port. Every field is already validated: renderers
// may write it into haproxy.cfg as is.
type Backend struct {
	// Name is "<namespace>_<service>_<port>", made only of [a-z0-9_-].
	Name      string
	Namespace string
	Service   string
	// Port is the Service port as written in the Ingress (name or number).
	Port string

	// Balance is an HAProxy balance algorithm, e.g. "roundrobin", "hdr(host)".
	Balance       string
	Check         bool
	CheckInterval time.Duration
	ForwardedFor  bool

	// Slots is the number of server slots (a multiple of servers-increment,
	// at least len(Endpoints)).
	Slots int
	// Endpoints sorted by address then port, unique.
	Endpoints []Endpoint
	// TLS is how HAProxy connects to the servers (tls.go).
	TLS BackendTLS
	// Features are health checks, persistence, client identity, access
	// control, authentication and rate limiting (feat_backend.go).
	Features BackendFeatures

	// HTTP holds the request/response rules of the frontend annotations
	// (redirects, rewrites, headers, captures, CORS) and the backend
	// snippet (feat_http.go).
	HTTP HTTPRules
	// TCP marks the backend of a --configmap-tcp-services entry (mode tcp).
	TCP bool

	// endpointsFrom is what RefreshEndpoints needs to recompute Endpoints
	// and Slots without the Ingresses (refresh.go).
	endpointsFrom endpointSource
}

// Endpoint is one pod address serving a backend.
type Endpoint struct {
	Address string // IPv4 or IPv6 literal
	Port    int
	// Draining endpoints are terminating: they finish current requests and
	// get no new ones.
	Draining bool
}

// PathType mirrors networking/v1 PathType after ImplementationSpecific has
// been mapped to Prefix.
type PathType string

// Path types the model serves.
const (
	PathExact  PathType = "Exact"
	PathPrefix PathType = "Prefix"
)

// Route is one served Ingress rule or HTTPRoute match.
type Route struct {
	// Ingress is the Ingress or HTTPRoute the route comes from.
	Ingress  ObjectRef
	Host     string // "" for rules without a host
	Path     string
	PathType PathType
	Backend  string
}

// ObjectRef names a Kubernetes object.
type ObjectRef struct {
	Kind      string // "Ingress", "Service", "ConfigMap", "Secret", ...
	Namespace string
	Name      string
}

// String writes r as "Kind namespace/name" ("Kind name" without namespace).
func (r ObjectRef) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// Problem is a rejected object or value.
type Problem struct {
	Object ObjectRef
	// Reason is a CamelCase Event reason, e.g. "InvalidAnnotation".
	Reason string
	// Message is one line naming the key, the value and why.
	Message string
}
