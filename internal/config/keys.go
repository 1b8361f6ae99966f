package config

import (
	"flag"
	"io"
	"time"
)

// Kind is the type of a key's value in the configuration file.
type Kind string

// The kinds of values. A list takes a YAML list or one value.
const (
	KindBool     Kind = "boolean"
	KindInt      Kind = "integer"
	KindUint     Kind = "number"
	KindDuration Kind = "duration"
	KindString   Kind = "string"
	KindList     Kind = "list"
)

// Key is one flag, and the key of the configuration file of the same name.
type Key struct {
	Name  string
	Kind  Kind
	Usage string
	// Default is the flag's default as text ("" for none).
	Default string
	// Alias names the key this one is another name of.
	Alias string
	// FlagOnly: a command-line flag only (--config, --version).
	FlagOnly bool
	// Live: a reload applies a change at once; otherwise it needs a restart.
	Live bool
	// Split: items of a list may also be comma-separated.
	Split bool
}

// aliases maps alternative flag names to the canonical one.
var aliases = map[string]string{"configmap-errorfile": "configmap-errorfiles",
	// The peer's one-letter forms.
	"e": "external", "v": "version", "p": "pprof"}

func canonical(name string) string {
	if c, ok := aliases[name]; ok {
		return c
	}
	return name
}

// Keys lists every flag of `perimeter run` in the order of the reference:
// by group, as groups lists them.
func Keys() []Key {
	var c Config
	fs := c.FlagSet("perimeter", io.Discard)
	var out []Key
	for _, g := range groups {
		for _, name := range g.keys {
			f := fs.Lookup(name)
			if f == nil {
				continue // the reference test reports it
			}
			out = append(out, keyOf(f))
		}
	}
	return out
}

// fileKeys are the keys the configuration file may set (the aliases too).
func fileKeys() []Key {
	var out []Key
	for _, k := range Keys() {
		if !k.FlagOnly {
			out = append(out, k)
		}
	}
	return out
}

// flagOnly: --config and --version, the one-letter forms and the peer's
// flags that have no effect are not keys of the configuration file.
func flagOnly(name string) bool {
	_, ignored := noEffect[name]
	return name == "config" || name == "version" || len(name) == 1 || ignored || jobModes[name]
}

func keyOf(f *flag.Flag) Key {
	k := Key{Name: f.Name, Usage: f.Usage, Default: f.DefValue, Alias: aliases[f.Name],
		FlagOnly: flagOnly(f.Name)}
	_, k.Live = liveKeys[canonical(f.Name)]
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		k.Kind = KindBool
		return k
	}
	switch f.Value.(type) {
	case listFlag:
		k.Kind, k.Split = KindList, true
		return k
	case repeatFlag:
		k.Kind = KindList
		return k
	case uint32Flag:
		k.Kind = KindUint
		return k
	}
	k.Kind = KindString
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case int:
			k.Kind = KindInt
		case time.Duration:
			k.Kind = KindDuration
		}
	}
	return k
}

// groups order the reference; every flag is in exactly one of them.
var groups = []struct {
	title string
	keys  []string
}{
	{"Cluster and what is served", []string{"kubeconfig", "external", "e", "configmap", "configmap-errorfiles", "configmap-errorfile",
		"configmap-tcp-services", "configmap-patternfiles", "ingress.class", "empty-ingress-class", "namespace-whitelist", "namespace-blacklist",
		"default-backend-service", "default-ssl-certificate", "config-snippets", "disable-config-snippets",
		"allow-cross-namespace-hosts", "disable-service-external-name", "external-name-resolver", "external-name-interval",
		"cache-resync-period", "gateway-controller", "gateway-listener-ports", "gateway-addresses"}},
	{"HAProxy", []string{"program", "config-dir", "runtime-dir", "http-bind-port", "https-bind-port", "ipv4-bind-address",
		"ipv6-bind-address", "disable-http", "disable-https", "disable-ipv4", "disable-ipv6", "trust-forwarded-for", "sync-period"}},
	{"Tenant limits", []string{"max-watched-secrets", "max-watched-secrets-per-namespace", "max-config-size"}},
	{"Endpoints for operators", []string{"stats-bind-address", "stats-bind-port", "healthz-bind-port",
		"controller-bind-address", "controller-port", "pprof", "p"}},
	{"Ingress status", []string{"publish-address", "publish-service", "election-id", "election-namespace", "update-status-on-shutdown",
		"disable-ingress-status-update"}},
	{"BGP", []string{"bgp-local-as", "bgp-router-id", "bgp-listen-address", "bgp-listen-address-ipv6", "bgp-listen-port", "bgp-peer",
		"bgp-peers-from-nodes", "bgp-node-selector", "bgp-node-password-secret", "bgp-node-port", "bgp-node-ttl-security", "bgp-cluster-as",
		"bgp-passive-prefix", "bgp-ebgp-multihop", "pod-cidr", "bgp-block-size", "route-table", "bgp-hold-time",
		"bgp-keep-routes-on-exit", "bgp-max-prefixes"}},
	{"High availability", []string{"announce-address", "bgp-upstream-peer", "bgp-upstream-community", "bgp-upstream-med",
		"bgp-upstream-hold-time", "bgp-upstream-restart-time", "shutdown-drain"}},
	{"Daemon", []string{"log", "config", "version", "v"}},
	{compatTitle, compatOrder},
}
