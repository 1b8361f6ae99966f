// Package migration generates the tables of docs/migration.md: every flag,
// ConfigMap key and annotation of the HAProxy Kubernetes Ingress Controller
// (v1.10 and 3.x), and what Perimeter does with it. What Perimeter has is
// read from its code (the flag set, the settings table); the peer's side
// and the reasons are written here by hand.
package migration

// peerFlag is one command-line flag of the peer.
type peerFlag struct {
	name string
	// v110 and v3 are the peer's defaults in that line ("-" when the line
	// lacks the flag, "" when there is no default).
	v110, v3 string
	// note is how Perimeter differs beyond the default, or why it refuses
	// the flag (refused).
	note    string
	refused bool
	// builtin: -h and --help, which Go's flag package answers itself.
	builtin bool
}

const absent = "-"

// peerFlags are the peer's flags, long and one-letter, in v1.10.16 and 3.x
// (pkg/utils/flags.go and flags-experimental.go).
var peerFlags = []peerFlag{
	{name: "external", v110: "false", v3: "false", note: "always on"},
	{name: "e", v110: "false", v3: "false", note: "always on"},
	{name: "kubeconfig", v110: "~/.kube/config", v3: "~/.kube/config"},
	{name: "program", v110: "/usr/local/sbin/haproxy", v3: "/usr/local/sbin/haproxy", note: "Debian's and RHEL's HAProxy path"},
	{name: "config-dir", v110: "/tmp/haproxy-ingress/etc", v3: "/tmp/haproxy-ingress/etc", note: "/tmp is world-writable and cleaned; systemd creates these with the right owner"},
	{name: "runtime-dir", v110: "/tmp/haproxy-ingress/run", v3: "/tmp/haproxy-ingress/run"},
	{name: "configmap", v110: "", v3: ""},
	{name: "configmap-tcp-services", v110: "", v3: "", note: "also `NS/SVC:PORT::ssl` and named ports; other options are refused with an Event"},
	{name: "configmap-errorfiles", v110: "", v3: ""},
	{name: "configmap-patternfiles", v110: "", v3: "", note: "the file's addresses are written into the configuration (at most 4096 per list); a change of the ConfigMap reloads"},
	{name: "default-backend-service", v110: "", v3: "", note: "it wins over a tenant's `spec.defaultBackend`"},
	{name: "default-backend-port", v110: "6061", v3: "6061"},
	{name: "default-ssl-certificate", v110: "", v3: "", note: "a self-signed certificate is generated when unset"},
	{name: "ingress.class", v110: "", v3: ""},
	{name: "empty-ingress-class", v110: "false", v3: "false"},
	{name: "namespace-whitelist", v110: "", v3: ""},
	{name: "namespace-blacklist", v110: "", v3: ""},
	{name: "namespace-label-selector", v110: absent, v3: absent, refused: true,
		note: "not accepted (newer than 3.2, after v3.2.11): ignoring it would serve the namespaces it leaves out; use `--namespace-whitelist`"},
	{name: "namespace-selector-ready-timeout", v110: absent, v3: absent, refused: true, note: "goes with `--namespace-label-selector`"},
	{name: "publish-service", v110: "", v3: "", note: "read once at start; `--publish-address` wins"},
	{name: "disable-ingress-status-update", v110: absent, v3: "false"},
	{name: "gateway-controller-name", v110: "", v3: ""},
	{name: "ipv4-bind-address", v110: "0.0.0.0", v3: "0.0.0.0"},
	{name: "ipv6-bind-address", v110: "::", v3: "::"},
	{name: "http-bind-port", v110: "80", v3: "8080"},
	{name: "https-bind-port", v110: "443", v3: "8443"},
	{name: "disable-http", v110: "false", v3: "false"},
	{name: "disable-https", v110: "false", v3: "false"},
	{name: "disable-ipv4", v110: "false", v3: "false"},
	{name: "disable-ipv6", v110: "false", v3: "false"},
	{name: "healthz-bind-port", v110: "1042", v3: "1042", note: "bound on `--stats-bind-address` (loopback)"},
	{name: "stats-bind-port", v110: "1024", v3: "1024", note: "bound on `--stats-bind-address` (loopback)"},
	{name: "controller-port", v110: "6060", v3: "6060", note: "bound on `--controller-bind-address` (loopback); `/metrics` always served"},
	{name: "localpeer-port", v110: "10000", v3: "10000"},
	{name: "http-bind-thread", v110: absent, v3: ""},
	{name: "https-bind-thread", v110: absent, v3: ""},
	{name: "healthz-bind-thread", v110: absent, v3: ""},
	{name: "stats-bind-thread", v110: absent, v3: ""},
	{name: "sync-period", v110: "5s", v3: "5s", note: "the least time between two reloads; endpoints and map entries go out at once"},
	{name: "initial-sync-period", v110: absent, v3: ""},
	{name: "cache-resync-period", v110: "10m", v3: "10m"},
	{name: "channel-size", v110: "600", v3: "600"},
	{name: "log", v110: "info", v3: "info", note: "`trace` logs as `debug`"},
	{name: "prometheus", v110: "false", v3: "false"},
	{name: "pprof", v110: "false", v3: "false"},
	{name: "p", v110: "false", v3: "false"},
	{name: "disable-service-external-name", v110: "false", v3: "false"},
	{name: "disable-config-snippets", v110: absent, v3: "", note: "snippets are off unless `--config-snippets` enables them; this flag only takes kinds away"},
	{name: "disable-quic", v110: absent, v3: "false"},
	{name: "quic-bind-port", v110: absent, v3: ""},
	{name: "quic-announce-port", v110: absent, v3: ""},
	{name: "disable-writing-only-if-reload", v110: absent, v3: "false"},
	{name: "custom-validation-rules", v110: absent, v3: ""},
	{name: "enable-custom-annotations-on-ingress", v110: absent, v3: "false"},
	{name: "experimental", v110: absent, v3: ""},
	{name: "with-s6-overlay", v110: "false", v3: "false"},
	{name: "with-pebble", v110: absent, v3: "false"},
	{name: "with-gopherd", v110: absent, v3: absent, note: "newer than 3.2"},
	{name: "job-check-crd", v110: "false", v3: "false", note: "prints that there is nothing to install and exits 0"},
	{name: "input-file", v110: absent, v3: "", note: "exits 2: there are no custom resources to convert"},
	{name: "output-file", v110: absent, v3: "", note: "exits 2: there are no custom resources to convert"},
	{name: "version", v110: "false", v3: "false"},
	{name: "v", v110: "false", v3: "false"},
	{name: "t", v110: "false", v3: "false"},
	{name: "help", v110: "false", v3: "false", builtin: true, note: "prints the flags"},
	{name: "h", v110: "false", v3: "false", builtin: true, note: "prints the flags"},
}

// Scopes of a peer key: c (ConfigMap), i (Ingress), s (Service).
const (
	c   = "c"
	ci  = "c,i"
	cis = "c,i,s"
	cs  = "c,s"
	is  = "i,s"
	s   = "s"
	i   = "i"
)

// peerKey is one ConfigMap key or annotation of the peer.
type peerKey struct {
	name string
	// v110, v3: the scopes where the peer reads it ("" when the line lacks
	// the key).
	v110, v3 string
	// note: how Perimeter differs, or why it lacks the key.
	note string
	// outside: Perimeter reads the key outside its settings table.
	outside bool
	// notNeeded: Perimeter lacks the key because what it asks for is
	// always the case.
	notNeeded bool
}

// peerKeys are the peer's keys (documentation/doc.yaml, cross-checked with
// its code), grouped as its documentation groups them.
var peerKeys = []peerKey{
	// Global and defaults.
	{name: "maxconn", v110: c, v3: c},
	{name: "nbthread", v110: c, v3: c},
	{name: "hard-stop-after", v110: c, v3: c},
	{name: "syslog-server", v110: c, v3: c, note: "no default (the peer logs to `127.0.0.1 local0 notice`): without it there is no traffic log"},
	{name: "log-format", v110: c, v3: c},
	{name: "log-format-tcp", v3: c, note: "also the format of the ssl-passthrough frontend"},
	{name: "dontlognull", v110: c, v3: c},
	{name: "logasap", v110: c, v3: c},
	{name: "http-connection-mode", v110: c, v3: c},
	{name: "http-keep-alive", v110: c, v3: c},
	{name: "http-server-close", v110: c, v3: c},
	{name: "timeout-client", v110: c, v3: c},
	{name: "timeout-client-fin", v110: c, v3: c},
	{name: "timeout-connect", v110: c, v3: c},
	{name: "timeout-http-request", v110: c, v3: c},
	{name: "timeout-http-keep-alive", v110: c, v3: c},
	{name: "timeout-queue", v110: c, v3: c},
	{name: "timeout-server", v110: c, v3: cis},
	{name: "timeout-server-fin", v110: c, v3: c},
	{name: "timeout-tunnel", v110: c, v3: c},
	{name: "global-config-snippet", v110: c, v3: c, note: "off unless `--config-snippets=global`; section openers refused"},
	{name: "frontend-config-snippet", v110: c, v3: c, note: "off unless `--config-snippets=frontend`; section openers refused; one HAProxy rejects keeps the previous global settings"},
	{name: "stats-config-snippet", v110: c, v3: c, note: "off unless `--config-snippets=stats`; section openers refused"},
	{name: "cr-global", v110: c, v3: c, note: "no custom resources (below)"},
	{name: "cr-defaults", v110: c, v3: c, note: "no custom resources (below)"},
	{name: "cr-frontend-http", v3: c, note: "no custom resources (below)"},
	{name: "cr-frontend-https", v3: c, note: "no custom resources (below)"},
	{name: "cr-frontend-stats", v3: c, note: "no custom resources (below)"},
	{name: "prometheus-endpoint-auth-secret", v3: c, notNeeded: true, note: "the stats and exporter listener binds loopback (`--stats-bind-address`)"},
	{name: "quic-alt-svc-max-age", v3: c, note: "no QUIC on HAProxy 2.6"},
	{name: "clean-certs", v110: c, v3: c, notNeeded: true, note: "certificate files no object references are always removed"},
	// TLS.
	{name: "ssl-certificate", v110: c, v3: c},
	{name: "client-ca", v110: c, v3: c},
	{name: "client-crt-optional", v110: c, v3: c},
	{name: "client-strict-sni", v110: c, v3: c},
	{name: "tls-alpn", v110: c, v3: c},
	{name: "generate-certificates-signer", v3: c, note: "not implemented: certificates come from Secrets"},
	{name: "ssl-passthrough", v110: cis, v3: cis, note: "a new host of an existing passthrough backend is a map entry, no reload; only the host's owner namespace; allow/deny lists, auth and rate limits fail closed on a passthrough backend"},
	{name: "ssl-redirect", v110: ci, v3: ci},
	{name: "ssl-redirect-code", v110: ci, v3: ci},
	{name: "ssl-redirect-port", v110: ci, v3: ci, note: "default none, which redirects to 443 (the peer: 443 in v1.10, 8443 in 3.x)"},
	// Per-route HTTP.
	{name: "allow-list", v3: ci},
	{name: "whitelist", v110: ci, v3: ci},
	{name: "deny-list", v3: ci},
	{name: "blacklist", v110: ci, v3: ci},
	{name: "src-ip-header", v110: ci, v3: ci},
	{name: "auth-type", v110: ci, v3: ci},
	{name: "auth-secret", v110: ci, v3: ci, note: "an Ingress or Service names a Secret of its own namespace; hashes with a bounded cost only"},
	{name: "auth-realm", v110: ci, v3: ci},
	{name: "rate-limit-requests", v110: ci, v3: ci},
	{name: "rate-limit-period", v110: ci, v3: ci},
	{name: "rate-limit-size", v110: ci, v3: ci, note: "up to 1m entries (the peer: 100m)"},
	{name: "rate-limit-status-code", v110: ci, v3: ci, note: "a status HAProxy can deny with"},
	{name: "rate-limit-whitelist", v3: ci},
	{name: "cors-enable", v110: ci, v3: ci},
	{name: "cors-allow-origin", v110: ci, v3: ci, note: "a safe regex subset on an Ingress"},
	{name: "cors-allow-methods", v110: ci, v3: ci},
	{name: "cors-allow-headers", v110: ci, v3: ci},
	{name: "cors-allow-credentials", v110: ci, v3: ci},
	{name: "cors-max-age", v110: ci, v3: ci},
	{name: "cors-respond-to-options", v3: ci},
	{name: "path-rewrite", v110: ci, v3: ci, note: "a safe regex subset on an Ingress; at most 16 lines"},
	{name: "set-host", v110: ci, v3: ci},
	{name: "request-set-header", v110: ci, v3: ci, note: "`%[...]` is evaluated, through an allow-list of fetches and converters (docs/annotations.md); `%%` is a literal `%`"},
	{name: "response-set-header", v110: ci, v3: ci, note: "`%[...]` is evaluated, through an allow-list of fetches and converters (docs/annotations.md); `%%` is a literal `%`"},
	{name: "request-redirect", v110: ci, v3: ci, note: "also takes absolute URLs"},
	{name: "request-redirect-code", v110: ci, v3: ci},
	{name: "request-capture", v110: ci, v3: ci},
	{name: "request-capture-len", v110: ci, v3: ci},
	{name: "proxy-protocol", v110: c, v3: c},
	// Backend.
	{name: "load-balance", v110: cis, v3: cis, note: "HAProxy 2.6's algorithms and options except `hash` (a sample expression); each word is checked"},
	{name: "check", v110: cis, v3: cis},
	{name: "check-http", v110: cis, v3: cis, note: "GET, HEAD and OPTIONS only; after the HTTP version, only a Host header (sent with `http-check send`)"},
	{name: "check-interval", v110: cis, v3: cis},
	{name: "timeout-check", v110: cis, v3: cis},
	{name: "pod-maxconn", v110: cis, v3: cis, note: "not divided by the number of controllers running"},
	{name: "forwarded-for", v110: cis, v3: cis, note: "a client's `X-Forwarded-For` is replaced unless `--trust-forwarded-for`"},
	{name: "send-proxy-protocol", v110: cis, v3: cis},
	{name: "server-ssl", v110: cis, v3: cis},
	{name: "server-proto", v110: cis, v3: cis},
	{name: "server-ca", v110: cis, v3: cis, note: "an Ingress or Service names a Secret of its own namespace"},
	{name: "server-crt", v110: cis, v3: cis, note: "an Ingress or Service names a Secret of its own namespace"},
	{name: "abortonclose", v110: cis, v3: cis},
	{name: "cookie-persistence", v110: cis, v3: cs},
	{name: "cookie-persistence-no-dynamic", v3: cs, note: "`cookie-persistence` wins when both apply"},
	{name: "scale-server-slots", v110: cis, v3: cis},
	{name: "servers-increment", v110: cis, v3: cis},
	{name: "server-slots", v110: cis, v3: cis},
	{name: "backend-config-snippet", v110: cis, v3: cis, note: "off unless `--config-snippets=backend`; validated, a bad one is dropped for its backend only"},
	{name: "cr-backend", v110: cis, v3: cis, note: "no custom resources (below)"},
	{name: "standalone-backend", v3: is, note: "a backend variant of the Ingress's own, named like the other variants; Ingresses with different settings get one anyway"},
	{name: "route-acl", v110: s, v3: s, note: "the fetch is one of the sample allow-list, then `-m str|beg|end|sub|found|len|int|ip|reg` and bare-word patterns (no `||`, `!` or several ACLs); an invalid value leaves the Service's routes out with an Event; a new host for the Service is a map entry, no reload"},
	{name: "ingress.class", v110: i, v3: i, outside: true, note: "also `kubernetes.io/ingress.class`"},
}

// peerResources are the peer's custom resources and what to use here.
var peerResources = []struct{ kind, instead string }{
	{"Global (ingress.v1.haproxy.org, ingress.v3.haproxy.org)", "ConfigMap keys (`maxconn`, `nbthread`, `hard-stop-after`, `syslog-server`, `log-format`, ...) and, for the rest, `global-config-snippet` with `--config-snippets=global`"},
	{"Defaults (v1, v3)", "the ConfigMap's `timeout-*` keys, `log-format`, `dontlognull`"},
	{"Backend (v1, v3)", "annotations on the Service (`load-balance`, `check*`, `timeout-check`, `server-*`, `pod-maxconn`, ...) and `backend-config-snippet` with `--config-snippets=backend`"},
	{"TCP (v1, v3)", "`--configmap-tcp-services` entries `NS/SVC:PORT[:ssl]`"},
	{"Frontend (v3)", "ConfigMap keys of the frontend (`ssl-*`, `client-ca`, `tls-alpn`, `proxy-protocol`); `frontend-config-snippet` with `--config-snippets=frontend`"},
	{"ValidationRules (v3)", "none: custom annotations are not supported; every key is validated by Perimeter itself"},
}

// peerDocumented are the keys of the peer's documentation table
// (documentation/annotations.md of 3.2, generated from its doc.yaml), to
// check that peerKeys misses none.
var peerDocumented = []string{"auth-type", "auth-secret", "auth-realm", "blacklist", "deny-list", "check", "check-http",
	"check-interval", "clean-certs", "client-ca", "client-crt-optional", "client-strict-sni", "generate-certificates-signer",
	"cors-enable", "cors-allow-origin", "cors-allow-methods", "cors-allow-credentials", "cors-allow-headers", "cors-max-age",
	"global-config-snippet", "frontend-config-snippet", "stats-config-snippet", "backend-config-snippet", "cookie-persistence",
	"cookie-persistence-no-dynamic", "dontlognull", "src-ip-header", "forwarded-for", "hard-stop-after", "http-connection-mode",
	"http-keep-alive", "http-server-close", "load-balance", "log-format", "log-format-tcp", "logasap", "maxconn", "nbthread",
	"path-rewrite", "pod-maxconn", "proxy-protocol", "quic-alt-svc-max-age", "rate-limit-period", "rate-limit-status-code",
	"rate-limit-requests", "rate-limit-size", "rate-limit-whitelist", "request-capture", "request-capture-len",
	"request-set-header", "request-redirect", "request-redirect-code", "response-set-header", "route-acl",
	"send-proxy-protocol", "server-ca", "server-crt", "server-proto", "server-ssl", "set-host", "scale-server-slots",
	"ssl-certificate", "ssl-passthrough", "ssl-redirect", "ssl-redirect-code", "ssl-redirect-port", "syslog-server",
	"standalone-backend", "timeout-check", "timeout-client", "timeout-client-fin", "timeout-connect", "timeout-http-request",
	"timeout-http-keep-alive", "timeout-queue", "timeout-server", "timeout-server-fin", "timeout-tunnel", "whitelist",
	"allow-list", "tls-alpn"}

// peerFlagTags are the long and short names of the peer's OSArgs (its
// pkg/utils/flags.go, v1.10.16 to the newest), to check that peerFlags
// misses none.
var peerFlagTags = []string{"configmap-patternfiles", "configmap-tcp-services", "default-backend-service",
	"configmap-errorfiles", "default-ssl-certificate", "configmap", "ipv6-bind-address", "gateway-controller-name",
	"ipv4-bind-address", "runtime-dir", "ingress.class", "publish-service", "config-dir", "program", "kubeconfig",
	"http-bind-thread", "https-bind-thread", "healthz-bind-thread", "disable-config-snippets", "version", "v",
	"namespace-whitelist", "namespace-blacklist", "namespace-label-selector", "namespace-selector-ready-timeout",
	"help", "h", "localpeer-port", "stats-bind-port", "stats-bind-thread", "default-backend-port", "channel-size",
	"controller-port", "http-bind-port", "https-bind-port", "sync-period", "initial-sync-period", "cache-resync-period",
	"healthz-bind-port", "quic-announce-port", "quic-bind-port", "log", "disable-ipv4", "external", "e", "t",
	"empty-ingress-class", "disable-service-external-name", "with-s6-overlay", "with-gopherd", "disable-https", "pprof",
	"p", "prometheus", "disable-http", "disable-ipv6", "with-pebble", "job-check-crd", "experimental", "disable-quic",
	"disable-writing-only-if-reload", "input-file", "output-file", "disable-ingress-status-update",
	"enable-custom-annotations-on-ingress", "custom-validation-rules"}
