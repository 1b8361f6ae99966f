package config

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// shownDefaults replace a default whose text would mislead (a zero that
// means "derived from something else").
var shownDefaults = map[string]string{
	"bgp-router-id":         "the listen address",
	"bgp-cluster-as":        "BGPConfiguration asNumber, else bgp-local-as",
	"bgp-node-port":         "BGPConfiguration listenPort, else 179",
	"bgp-node-ttl-security": "0 (off)",
	"bgp-ebgp-multihop":     "0 (directly connected)",
	"route-table":           "0 (main)",
	"bgp-max-prefixes":      "10000",
}

// examples are the values the YAML reference shows, commented out, for keys
// whose default is empty or means "derived".
var examples = map[string]any{
	"configmap":               "haproxy-controller/haproxy-kubernetes-ingress",
	"configmap-errorfiles":    "haproxy-controller/errorfiles",
	"configmap-tcp-services":  "haproxy-controller/tcp-services",
	"configmap-patternfiles":  "haproxy-controller/patterns",
	"ingress.class":           "haproxy",
	"namespace-whitelist":     []string{"team-a", "team-b"},
	"namespace-blacklist":     []string{"kube-system"},
	"default-backend-service": "default/fallback",
	"default-ssl-certificate": "default/wildcard-tls",
	"config-snippets":         []string{"global", "backend", "frontend", "stats"},
	"publish-address":         []string{"203.0.113.10"},
	"bgp-local-as":            64512,
	"bgp-router-id":           "198.51.100.10",
	"bgp-listen-address":      "198.51.100.10",
	"bgp-listen-address-ipv6": "2001:db8::10",
	"bgp-peer":                []string{"198.51.100.1,as=64512", "198.51.100.2,as=64512,password-secret=perimeter/bgp/password"},
	"bgp-cluster-as":          64512,
	"bgp-passive-prefix":      []string{"198.51.100.0/24"},
	"bgp-node-selector":       "perimeter-peer == 'true'",
	"pod-cidr":                []string{"198.18.0.0/16"},
	"bgp-max-prefixes":        10000,
	"bgp-upstream-peer":       []string{"198.51.100.1,as=64500", "198.51.100.2,as=64500,password-secret=perimeter/upstream"},
	"announce-address":        []string{"203.0.113.10"},
	"bgp-upstream-community":  []string{"64500:100"},
	"bgp-upstream-med":        "10",
	"publish-service":         "haproxy-controller/haproxy-kubernetes-ingress",
	"disable-config-snippets": []string{"all"},
}

// notes add to a flag's one-line usage in the Markdown reference.
var notes = map[string]string{
	"kubeconfig":                    "Its identity needs the permissions in [packaging/rbac.yaml](../packaging/rbac.yaml).",
	"program":                       "HAProxy 2.6 or newer.",
	"ingress.class":                 "An Ingress names its class by `spec.ingressClassName` or the annotation `kubernetes.io/ingress.class`.",
	"default-ssl-certificate":       "The ConfigMap's `ssl-certificate` wins; see [tls.md](tls.md).",
	"config-snippets":               "See [annotations.md](annotations.md#config-snippets).",
	"publish-address":               "For a keepalived pair, the VIP. Default with --announce-address: the announce addresses.",
	"announce-address":              "See [ha.md](ha.md).",
	"disable-ingress-status-update": "No election either.",
	"sync-period":                   "Endpoint changes go out through the Runtime API and are never delayed.",
	"allow-cross-namespace-hosts":   "See [security.md](security.md#hosts-and-paths).",
	"trust-forwarded-for":           "See [security.md](security.md#request-handling).",
	"disable-service-external-name": "See [features.md](features.md#externalname-services).",
	"publish-service":               "--publish-address wins; the Service is read once, at start.",
	"disable-config-snippets":       "The peer's flag: snippets are off here unless --config-snippets enables them.",
	"pprof":                         "Profiles reveal the daemon's internals: keep the controller port on loopback.",
	"gateway-controller":            "Gateway API objects are watched once their CRDs are installed; see [gateway-api.md](gateway-api.md).",
	"gateway-listener-ports":        "A listener's port opens a port on the edge host; see [gateway-api.md](gateway-api.md#ports-and-addresses).",
	"gateway-addresses":             "The addresses must reach the edge host (on lo or an interface, routed to it); see [gateway-api.md](gateway-api.md#ports-and-addresses).",
}

// intro of the compatibility group, after its title.
var groupIntro = map[string]string{
	compatTitle: "Flags of the HAProxy Kubernetes Ingress Controller (v1.10 and 3.x) that change nothing here, " +
		"and its one-shot job modes. " +
		"They are accepted so that its units and manifests start unchanged; the daemon logs one warning per flag given, " +
		"with the reason below. They are command-line flags only. See [migration.md](migration.md).",
}

// Example is the value the YAML reference shows for k: its example, else
// its default, typed as the file takes it.
func Example(k Key) any {
	if v, ok := examples[k.Name]; ok {
		return v
	}
	switch k.Kind {
	case KindBool:
		return k.Default == "true"
	case KindInt:
		n, _ := strconv.Atoi(k.Default)
		return n
	case KindDuration:
		d, _ := time.ParseDuration(k.Default)
		return d.String()
	}
	return k.Default
}

func reloadWord(k Key) string {
	switch {
	case k.FlagOnly:
		return "flag only"
	case k.Live:
		return "live"
	}
	return "restart"
}

// Markdown is docs/configuration.md: every flag and key, its type, default,
// and whether a reload applies it.
func Markdown() string {
	var b strings.Builder
	b.WriteString(`# Configuration

<!-- Generated from internal/config by
     go test ./internal/config -run TestReferenceDoc -update
     (also printed by ` + "`perimeter config-reference`" + `).
     Do not edit by hand: TestReferenceDoc fails when this file and the code disagree. -->

Perimeter is configured by its configuration file and command-line flags
(below), the controller ConfigMap (` + "`--configmap`" + `, keys in
[annotations.md](annotations.md)) and annotations on Ingresses and Services.
Flag names are those of the HAProxy Kubernetes Ingress Controller where it has
the same option.

## The configuration file

` + "`" + DefaultPath + "`" + ` (another with ` + "`--config=FILE`" + `) is YAML; its keys are the
flag names without the dashes. The packages install it with every key
commented out at its default (` + "`perimeter config-reference --format=yaml`" + `
prints that file).

` + "```yaml" + `
kubeconfig: /etc/perimeter/kubeconfig
configmap: haproxy-controller/haproxy-kubernetes-ingress
log: info
sync-period: 2s
disable-ipv6: true
bgp-local-as: 64512
bgp-router-id: 198.51.100.10
bgp-peers-from-nodes: true
bgp-peer:
  - 198.51.100.1,as=64512
` + "```" + `

- A flag given on the command line wins over the key of the same name; for a
  list, the flags replace the file's list.
- Values have their YAML types: booleans ` + "`true`/`false`" + `, integers, durations
  with a unit (` + "`500ms`, `30s`, `1m30s`" + `), strings. A list takes a YAML list or one
  value; a block list (` + "`- item`" + ` lines) keeps commas inside ` + "`bgp-peer`" + ` items.
- A key left out takes its default. A missing file is fine at the default path
  and an error when named by ` + "`--config`" + `.
- A bad file is refused at start with one line, ` + "`FILE:LINE: KEY: reason`" + `, and
  a non-zero exit: an unknown key (with the likely one it meant), a value of
  the wrong type, an invalid value, a key set twice.
- ` + "`--config`" + ` and ` + "`--version`" + ` are command-line flags only.

## Reload

` + "`systemctl reload perimeter`" + ` sends SIGHUP (` + "`ExecReload=/bin/kill -HUP $MAINPID`" + `): the
daemon reads the file again (command-line flags still win) and

- applies at once the keys marked **live** below: the next sync serves with
  them, with a HAProxy reload only when the generated configuration changes;
- logs ` + "`KEY changed: needs a restart`" + ` for every other key whose value changed,
  keeps running with the old value, and says so in the status line
  (` + "`systemctl status`" + `, sd_notify ` + "`STATUS=`" + `) until a restart;
- on a bad file keeps running with the settings it has, and logs the
  ` + "`FILE:LINE: KEY: reason`" + ` at error level and puts it into the status line.

The daemon tells systemd ` + "`RELOADING=1`" + ` when it starts reading the file and
` + "`READY=1`" + ` with the new status line when it is done (sd_notify(3)). The log
names every key that changed, with its old and new value.

## Keys

"reload" says whether a reload applies a change (live) or it needs a restart.

`)
	for _, g := range groups {
		fmt.Fprintf(&b, "### %s\n\n", g.title)
		if intro := groupIntro[g.title]; intro != "" {
			for _, l := range wrap(intro, 76) {
				b.WriteString(l + "\n")
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "| flag / key | type | default | reload | meaning |\n|---|---|---|---|---|\n")
		for _, k := range Keys() {
			if !inGroup(k.Name, g.keys) {
				continue
			}
			def := k.Default
			if s, ok := shownDefaults[k.Name]; ok {
				def = s
			}
			if def != "" {
				def = "`" + def + "`"
			}
			kind := string(k.Kind)
			if k.Split {
				kind += " (items may be comma-separated)"
			}
			meaning := k.Usage
			if k.Alias != "" {
				meaning = "another name of `" + k.Alias + "`"
			}
			if n := notes[k.Name]; n != "" {
				meaning += ". " + n
			}
			if r, ok := noEffect[k.Name]; ok {
				meaning += ". No effect: " + r
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", FlagSyntax(k.Name), kind, cell(def), reloadWord(k), cell(meaning))
		}
		b.WriteString("\n")
	}
	b.WriteString(`Listeners for operators (` + "`stats-*`, `healthz-bind-port`, `controller-*`" + `) bind
loopback unless told otherwise: on an edge host they face the internet.
`)
	return b.String()
}

func inGroup(name string, keys []string) bool {
	for _, k := range keys {
		if k == name {
			return true
		}
	}
	return false
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// YAML is the configuration file the packages install: every key commented
// out at its default (or an example when it has none), with its meaning.
func YAML() string {
	var b strings.Builder
	b.WriteString(`# Perimeter configuration (` + DefaultPath + `).
#
# Keys are the flag names of ` + "`perimeter run`" + `; a flag given on the command
# line wins over the key here. Every key is commented out: the value shown is
# its default, or an example when it has none. Booleans are true/false,
# durations have a unit (500ms, 30s, 1m30s), lists take a YAML list or one
# value.
#
# ` + "`systemctl reload perimeter`" + ` re-reads this file: keys marked "live" apply at
# once; for the others the daemon logs "KEY changed: needs a restart". A bad
# file is refused (at start) or ignored with the reason logged (on reload).
# ` + "`perimeter config-reference`" + ` prints the full reference (Markdown).
`)
	for _, g := range groups {
		fmt.Fprintf(&b, "\n# ---- %s\n", g.title)
		for _, k := range Keys() {
			if !inGroup(k.Name, g.keys) || k.FlagOnly || k.Alias != "" {
				continue
			}
			usage := k.Usage
			if _, ok := examples[k.Name]; ok {
				usage += "; the value below is an example"
				if !strings.Contains(usage, "default") {
					def := "none"
					if d, ok := shownDefaults[k.Name]; ok {
						def = d
					}
					usage += ", the default is " + def
				}
			}
			if k.Live {
				usage += " [live]"
			} else {
				usage += " [restart]"
			}
			b.WriteString("\n")
			for _, l := range wrap(usage, 76) {
				b.WriteString("# " + l + "\n")
			}
			for _, l := range strings.Split(strings.TrimSuffix(yamlEntry(k), "\n"), "\n") {
				b.WriteString("#" + l + "\n")
			}
		}
	}
	return b.String()
}

// yamlEntry is "key: value" for k's example, as YAML.
func yamlEntry(k Key) string {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	node := &yaml.Node{Kind: yaml.MappingNode}
	var kn, vn yaml.Node
	kn.SetString(k.Name)
	if err := vn.Encode(Example(k)); err != nil {
		panic(err) // examples are plain values
	}
	node.Content = []*yaml.Node{&kn, &vn}
	if err := enc.Encode(node); err != nil {
		panic(err)
	}
	_ = enc.Close()
	return buf.String()
}

func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}
