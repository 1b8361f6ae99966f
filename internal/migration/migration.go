package migration

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/config"
	"github.com/perimeter-ingress/perimeter/internal/model"
)

// Begin and End delimit the generated part of docs/migration.md.
const (
	Begin = "<!-- BEGIN GENERATED: go test ./internal/migration -run TestMigrationDoc -update -->"
	End   = "<!-- END GENERATED -->"
)

// Markdown is the generated part of docs/migration.md, and the problems
// that make the inventory inconsistent with the code (a peer flag the flag
// set lacks, a peer key Perimeter lacks with no reason given).
func Markdown() (string, []string) {
	var b strings.Builder
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }

	var cfg config.Config
	fs := cfg.FlagSet("perimeter", io.Discard)
	peerFlagNames := map[string]bool{}

	b.WriteString(`## Every flag of the HAProxy Kubernetes Ingress Controller

"—": the peer's line lacks the flag. ✓: Perimeter applies it (with its own
default where shown); "no effect": accepted and logged at start as doing
nothing here, with the reason; ✗: refused.

| flag | v1.10 default | 3.x default | Perimeter |
|---|---|---|---|
`)
	for _, p := range peerFlags {
		peerFlagNames[p.name] = true
		f := fs.Lookup(p.name)
		var perim string
		switch {
		case p.builtin:
			perim = "✓; " + p.note
		case p.refused:
			if f != nil {
				bad("flag %s is marked refused but Perimeter accepts it", config.FlagSyntax(p.name))
			}
			perim = "✗ " + p.note
		case f == nil:
			bad("flag %s of the peer is not accepted", config.FlagSyntax(p.name))
			continue
		default:
			if r, ok := config.NoEffectReason(p.name); ok {
				perim = "accepted, no effect: " + r
			} else {
				perim = "✓"
				if len(p.name) > 1 && !sameDefault(f.DefValue, p.v110) && !sameDefault(f.DefValue, p.v3) {
					perim += " default `" + f.DefValue + "`"
				}
			}
			if p.note != "" {
				perim += "; " + p.note
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", config.FlagSyntax(p.name), flagDefault(p.v110), flagDefault(p.v3), cell(perim))
	}
	var own []string
	fs.VisitAll(func(f *flag.Flag) {
		if !peerFlagNames[f.Name] {
			if !isAlias(f.Name) {
				own = append(own, "`"+config.FlagSyntax(f.Name)+"`")
			}
		}
	})
	fmt.Fprintf(&b, "\nPerimeter's own flags ([configuration.md](configuration.md)): %s.\n", strings.Join(own, ", "))

	b.WriteString(`
## Every ConfigMap key and annotation of the HAProxy Kubernetes Ingress Controller

Scopes: c ConfigMap, i Ingress, s Service; "—": the peer's line lacks the
key. ✓: same meaning, at the scopes shown; ≈: supported with the difference
given; ✗: not supported, and why. Annotations take the prefixes
` + prefixes() + `.

| key | v1.10 | 3.x | Perimeter |
|---|---|---|---|
`)
	settings := model.Settings()
	byName := map[string]model.Setting{}
	for _, st := range settings {
		if len(st.Prefixes) > 0 {
			continue // Perimeter's extensions: never a peer key
		}
		for _, n := range append([]string{st.Name}, st.Aliases...) {
			byName[n] = st
		}
	}
	peerKeyNames := map[string]bool{}
	for _, k := range peerKeys {
		peerKeyNames[k.name] = true
		st, found := byName[k.name]
		var perim string
		switch {
		case found:
			have := scopeLetters(st.Scopes)
			var missing []string
			for _, sc := range strings.Split(union(k.v110, k.v3), ",") {
				if !slices.Contains(strings.Split(have, ","), sc) {
					missing = append(missing, scopeWord[sc])
				}
			}
			perim = "✓ " + have
			if len(missing) > 0 || k.note != "" {
				perim = "≈ " + have
			}
			if len(missing) > 0 {
				perim += "; not read on the " + strings.Join(missing, " or the ")
			}
			if k.note != "" {
				perim += "; " + k.note
			}
		case k.outside:
			perim = "✓ " + union(k.v110, k.v3)
			if k.note != "" {
				perim += "; " + k.note
			}
		case k.notNeeded:
			perim = "not needed: " + k.note
		case k.note == "":
			bad("key %s of the peer: Perimeter lacks it and no reason is given", k.name)
			continue
		default:
			perim = "✗ " + k.note
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k.name, orDash(k.v110), orDash(k.v3), cell(perim))
	}
	var extra []string
	for _, st := range settings {
		if !peerKeyNames[st.Name] {
			name := st.Name
			if len(st.Prefixes) > 0 {
				name = st.Prefixes[0] + name
			}
			extra = append(extra, "`"+name+"` ("+scopeLetters(st.Scopes)+")")
		}
	}
	fmt.Fprintf(&b, "\nPerimeter's own keys ([annotations.md](annotations.md)): %s.\n", strings.Join(extra, ", "))

	b.WriteString(`
## The peer's custom resources

Perimeter watches no custom resources; the ` + "`cr-*`" + ` keys are not read.

| resource | use instead |
|---|---|
`)
	for _, r := range peerResources {
		fmt.Fprintf(&b, "| %s | %s |\n", r.kind, cell(r.instead))
	}
	return b.String(), problems
}

// isAlias: another name of a flag (-e of --external), not a flag of its own.
func isAlias(name string) bool {
	for _, k := range config.Keys() {
		if k.Name == name {
			return k.Alias != ""
		}
	}
	return false
}

var scopeWord = map[string]string{"c": "ConfigMap", "i": "Ingress", "s": "Service"}

func scopeLetters(s model.Scope) string {
	var out []string
	for _, x := range []struct {
		s model.Scope
		l string
	}{{model.ScopeConfigMap, "c"}, {model.ScopeIngress, "i"}, {model.ScopeService, "s"}} {
		if s&x.s != 0 {
			out = append(out, x.l)
		}
	}
	return strings.Join(out, ",")
}

// union of two scope lists, in c, i, s order.
func union(a, b string) string {
	var out []string
	for _, l := range []string{"c", "i", "s"} {
		if slices.Contains(strings.Split(a, ","), l) || slices.Contains(strings.Split(b, ","), l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, ",")
}

func prefixes() string {
	var out []string
	for _, p := range model.AnnotationPrefixes {
		out = append(out, "`"+p+"`")
	}
	return strings.Join(out, ", ")
}

// sameDefault compares defaults as values: 10m0s is 10m.
func sameDefault(perim, peer string) bool {
	if perim == peer {
		return true
	}
	a, errA := time.ParseDuration(perim)
	b, errB := time.ParseDuration(peer)
	return errA == nil && errB == nil && a == b
}

func flagDefault(v string) string {
	switch v {
	case absent:
		return "—"
	case "":
		return "✓"
	}
	return "`" + v + "`"
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
