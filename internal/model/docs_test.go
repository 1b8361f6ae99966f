package model

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const annotationsDoc = "../../docs/annotations.md"

// settingExample is the Example of s, else its default.
func settingExample(s Setting) string {
	if s.Example != "" {
		return s.Example
	}
	return s.Default
}

// annotationsTable renders docs/annotations.md from Settings().
func annotationsTable() string {
	var b strings.Builder
	b.WriteString(`# Annotations and ConfigMap keys

<!-- Generated from the model's settings table by
     go test ./internal/model -run TestAnnotationsDoc -update
     Do not edit by hand: TestAnnotationsDoc fails when this file and the code disagree. -->

Every key below is a key of the controller ConfigMap (` + "`--configmap`" + `) and, where its
scope says so, an annotation on an Ingress or a Service with one of the prefixes
` + prefixList() + `; the keys the HAProxy Kubernetes Ingress Controller lacks take the prefix
` + "`" + ExtensionPrefix + "`" + ` alone. Precedence: Service, then Ingress, then ConfigMap, then the default. An Ingress's
annotations apply to the routes of that Ingress only: Ingresses sharing a Service port
with different settings get separate backends (see features.md). An invalid value
is reported as an Event naming the object, the key, the value and why; the next scope
or the default applies instead.

An annotation under ` + "`haproxy.org/`, `haproxy.com/` or `" + ExtensionPrefix + "`" + ` that is no key below gets an
UnknownAnnotation Warning Event, and one set on an object its scope does not list (e.g. a
ConfigMap-only key on an Ingress) an AnnotationScope Event; the object is otherwise served
as usual. ` + "`" + LegacyPrefix + "`" + ` is shared with other controllers: a value under it that is not valid
for the key is taken as theirs (ForeignAnnotation Event), ignored, and never fails closed.

"Applied" says whether a change goes out through HAProxy's Runtime API (runtime) or
needs a reload (reload, hitless).

| Key | Scope | Type | Default | Example | Applied | Description |
|---|---|---|---|---|---|---|
`)
	list := Settings()
	slices.SortFunc(list, func(a, b Setting) int { return strings.Compare(a.Name, b.Name) })
	for _, s := range list {
		key := "`" + s.Name + "`"
		for _, a := range s.Aliases {
			key += " (alias `" + a + "`)"
		}
		for _, p := range s.Prefixes {
			key += " (annotation `" + p + s.Name + "` only)"
		}
		applied := "reload"
		if s.Runtime {
			applied = "runtime"
		}
		doc := s.Doc
		if r := s.TenantRestriction(); r != "" {
			doc += " " + r
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n",
			key, strings.ReplaceAll(s.Scopes.String(), ",", ", "), cell(s.Type), code(s.Default), code(settingExample(s)), applied, cell(doc))
	}
	b.WriteString(annotationsNotes)
	b.WriteString(sampleDoc())
	return b.String()
}

// sampleDoc lists the allowed fetches and converters (sample.go).
func sampleDoc() string {
	var b strings.Builder
	b.WriteString(`
## Sample expressions

An expression is a fetch, optionally followed by converters: ` + "`fetch[(args)][,converter[(args)]]...`" + `, at
most 256 characters and 8 converters; arguments are names, integers or single separator characters. Only the
fetches and converters below are accepted: they read the request or response the expression runs in and
its connection, and nothing of the HAProxy process, of other backends or of other tenants (no ` + "`env`" + `,
` + "`hostname`" + `, ` + "`var`" + `, stick tables, ` + "`be_*`" + `, Lua, ` + "`debug`" + `). Anything else is refused with an
InvalidAnnotation Event and the annotation is ignored.

`)
	names := func(list []sampleFunc, ctx SampleContext) string {
		var out []string
		for _, f := range list {
			if f.ctx == ctx || ctx == 0 {
				out = append(out, "`"+f.example+"`")
			}
		}
		return strings.Join(out, ", ")
	}
	fmt.Fprintf(&b, "- Fetches of the request (`request-capture`, `request-set-header`): %s.\n", names(sampleFetches, SampleRequest))
	fmt.Fprintf(&b, "- Fetches of the response (`response-set-header`): %s.\n", names(sampleFetches, SampleResponse))
	fmt.Fprintf(&b, "- Fetches of both: %s.\n", names(sampleFetches, sampleBoth))
	fmt.Fprintf(&b, "- Converters: %s.\n", names(sampleConverters, 0))
	return b.String()
}

// annotationsNotes documents the ConfigMaps and formats the table cannot.
const annotationsNotes = `
## Values

- ` + "`set-host`" + ` and redirect targets are sent literally: quotes, ` + "`#`" + ` and ` + "`%`" + ` are kept as written.
- Header values (` + "`request-set-header`, `response-set-header`" + `) are literal too, except ` + "`%[...]`" + `, a sample
  expression HAProxy evaluates (as the HAProxy Kubernetes Ingress Controller does), and ` + "`%%`" + `, a literal
  ` + "`%`" + `. Sample expressions there and in ` + "`request-capture`" + ` may use only the fetches and converters
  listed under [Sample expressions](#sample-expressions).
- ` + "`path-rewrite`" + ` regexes are checked with Go's RE2 before HAProxy (PCRE2) gets them; a regex
  that only PCRE2 accepts is refused. The query string is kept.
- ` + "`cors-allow-origin`" + `: a matching request Origin is echoed (with ` + "`Vary: Origin`" + `); ` + "`*`" + ` answers ` + "`*`" + `.
  With ` + "`cors-respond-to-options`" + `, a preflight OPTIONS from an allowed origin gets 204 from HAProxy.
- ` + "`request-capture`" + ` fields appear in the traffic log as ` + "`%hr`" + ` (the default ` + "`option httplog`" + ` shows them);
  the traffic log needs ` + "`syslog-server`" + `.

## Config snippets

` + "`global-config-snippet`" + ` and ` + "`backend-config-snippet`" + ` are raw HAProxy directives. They are ignored
(with a SnippetDisabled Event on the object that sets them) unless ` + "`--config-snippets=global,backend`" + ` enables
them. The operator's ` + "`frontend-config-snippet`" + ` (http and https frontends) and ` + "`stats-config-snippet`" + ` (ConfigMap
only) need ` + "`frontend`" + ` and ` + "`stats`" + ` in ` + "`--config-snippets`" + `; a frontend that ` + "`haproxy -c`" + ` rejects after such a
change keeps the previous global settings. A line that would open a new section (` + "`backend`, `frontend`, `global`" + `, ...)
or a conditional block (` + "`.if`" + `) is refused. A backend snippet that ` + "`haproxy -c`" + ` rejects is dropped from its
backend alone, which keeps its other settings, and a ConfigRejected Event names the object that set it (an
Ingress's snippet is on that Ingress's own backend variant: other Ingresses of the Service keep theirs).

Enable backend snippets only where everyone who can annotate an Ingress or a Service is trusted like a
cluster administrator. Even then a backend snippet may use only the directives listed in the table above,
and no word that names a file, changes a map or an ACL, or runs Lua or a service; and HAProxy itself runs
unable to read the daemon's files (its kubeconfig above all), without CAP_NET_ADMIN and with an environment
of its own (PATH only), so a snippet that gets through still reaches nothing of the daemon's (see
[security.md](security.md)).

## Error pages (` + "`--configmap-errorfiles`" + `, alias ` + "`--configmap-errorfile`" + `)

Keys are status codes HAProxy generates: 200, 400, 401, 403, 404, 405, 407, 408, 410, 413, 425, 429,
500, 501, 502, 503, 504. A value starting with ` + "`HTTP/`" + ` is a whole response (status line, headers,
blank line, body), as the HAProxy Kubernetes Ingress Controller takes it; any other value is the body of
an HTML page. The 404 page also answers requests no rule matches. A change reloads HAProxy.

## TCP services (` + "`--configmap-tcp-services`" + `)

Keys are ports, values ` + "`NAMESPACE/SERVICE:PORT`" + ` (port number or name). Each port gets a ` + "`mode tcp`" + `
frontend on the IPv4/IPv6 bind addresses and a backend whose endpoints change at run time, like HTTP
backends; the Service's annotations (` + "`load-balance`, `check`, `server-ca`" + `, ...) apply, and a
Secret problem of the backend is an Event on the Service. ` + "`NAMESPACE/SERVICE:PORT:ssl`" + `
(also written ` + "`PORT::ssl`" + `) terminates TLS on the port with the default certificate (the one the
https frontend serves to clients without a matching SNI) and forwards the decrypted stream. Any other
option (a PROXY protocol field, ` + "`send-proxy`" + `, ...) is refused with an Event rather than ignored.

## Canary (` + "`" + ExtensionPrefix + "canary-*`" + `)

An Ingress annotated ` + "`" + ExtensionPrefix + "canary-service: NAME`" + ` sends ` + "`" + ExtensionPrefix + "canary-weight`" + ` percent
(0..100, default 0) of the requests each of its rules routes to that Service of its namespace, on the
rule's port or ` + "`" + ExtensionPrefix + "canary-service-port`" + `. The split is per request (no stickiness). The canary
backend takes the same Ingress-scope settings as the rule's backend and its own Service's annotations.
The split applies to the rule's backend (Service port and variant): another Ingress routing to the
same Service port with the same settings is split too and gets a CanaryShared Event. A weight change goes out through the Runtime API;
naming a new canary Service adds its backend (one reload).
`

func prefixList() string {
	var p []string
	for _, x := range AnnotationPrefixes {
		p = append(p, "`"+x+"`")
	}
	return strings.Join(p, ", ")
}

// cell escapes what would break a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`"
}

var docKeyRE = regexp.MustCompile("(?m)^\\| `([a-z0-9.-]+)`")

// TestAnnotationsDoc checks that docs/annotations.md documents exactly the
// keys the code knows, and is what the code generates. Refresh with -update.
func TestAnnotationsDoc(t *testing.T) {
	want := annotationsTable()
	if *update {
		if err := os.WriteFile(annotationsDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(annotationsDoc)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/model -run TestAnnotationsDoc -update)", err)
	}
	documented := map[string]bool{}
	for _, m := range docKeyRE.FindAllStringSubmatch(string(got), -1) {
		documented[m[1]] = true
	}
	code := map[string]bool{}
	for _, s := range Settings() {
		code[s.Name] = true
		if !documented[s.Name] {
			t.Errorf("key %s is in the code but not in %s", s.Name, annotationsDoc)
		}
	}
	for k := range documented {
		if !code[k] {
			t.Errorf("key %s is documented in %s but the code lacks it", k, annotationsDoc)
		}
	}
	if string(got) != want {
		t.Errorf("%s is stale (run go test ./internal/model -run TestAnnotationsDoc -update):\n%s", annotationsDoc, lineDiff(string(got), want))
	}
}

// TestSettingExamples checks that every documented example is a value the
// code accepts.
func TestSettingExamples(t *testing.T) {
	for _, s := range Settings() {
		ex := settingExample(s)
		if ex == "" {
			t.Errorf("%s: no example (set Setting.Example)", s.Name)
			continue
		}
		if err := s.Check(ex); err != nil {
			t.Errorf("%s: example %q rejected: %v", s.Name, ex, err)
		}
	}
}
