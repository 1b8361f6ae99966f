package model

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
)

// Namespace tenants write Ingresses, Services and their annotations; the
// operator writes the controller ConfigMap and the flags. A tenantRule is
// what a setting's value must also satisfy when a tenant sets it, so that
// one tenant cannot reach into another's namespace or stall HAProxy for
// everyone (docs/security.md).
type tenantRule struct {
	reason string
	// doc is appended to the setting's documentation.
	doc   string
	check func(raw, namespace string) error
}

// Reasons of values refused at tenant scope.
const (
	ReasonCrossNamespaceSecret = "CrossNamespaceSecret"
	ReasonUnsafeRegex          = "UnsafeRegex"
	ReasonSecretNotWatched     = "SecretNotWatched"
)

// refusedValue stands for a value refused at tenant scope of a fail-closed
// setting: it is kept at its scope (so lower scopes do not apply) and no
// parser accepts it, so the backend fails closed.
const refusedValue = "\x00refused"

var ownSecretRule = &tenantRule{
	reason: ReasonCrossNamespaceSecret,
	doc:    "On an Ingress or a Service the Secret must be in the object's own namespace (NAME, or its own NAMESPACE/NAME); only the ConfigMap may name another namespace.",
	check: func(raw, ns string) error {
		if n, _, ok := strings.Cut(raw, "/"); ok && n != ns {
			return errors.New("an Ingress or a Service may only name Secrets of its own namespace; only the controller ConfigMap may name another namespace")
		}
		return nil
	},
}

var safeRegexDoc = "On an Ingress the regex must be in the safe subset of docs/security.md (no quantified groups other than `(...)?`, no ambiguous adjacent repetitions, anchored with ^ unless its only repetition is a final .*, at most " + fmt.Sprint(maxTenantRegexLen) + " characters)."

// tenantRules are the settings with a tenant rule, by name. Settings of
// other files get theirs here so the whole policy reads in one place.
var tenantRules = map[string]*tenantRule{
	"auth-secret": ownSecretRule,
	"server-ca":   ownSecretRule,
	"server-crt":  ownSecretRule,
	"path-rewrite": {
		reason: ReasonUnsafeRegex,
		doc:    safeRegexDoc,
		check: func(raw, _ string) error {
			for _, line := range strings.Split(raw, "\n") {
				if f := strings.Fields(line); len(f) == 2 {
					if err := checkSafeRegex(f[0]); err != nil {
						return err
					}
				}
			}
			return nil
		},
	},
	"cors-allow-origin": {
		reason: ReasonUnsafeRegex,
		doc:    safeRegexDoc,
		check: func(raw, _ string) error {
			if strings.HasPrefix(raw, "^") {
				return checkSafeRegex(raw)
			}
			return nil
		},
	},
}

// TenantRestriction says what the setting accepts less of on an Ingress or
// a Service than in the ConfigMap; "" when nothing.
func (s Setting) TenantRestriction() string {
	if s.tenant == nil {
		return ""
	}
	return s.tenant.doc
}

// The safe regex subset. HAProxy matches with PCRE2, a backtracking engine:
// a pattern that can match the same text in many ways costs time
// exponential (or polynomial of high degree) in the input, which a client
// chooses. The subset keeps every pattern linear, or within a small
// constant factor of it:
//
//   - at most maxTenantRegexLen characters;
//   - groups are ( ) and (?: ) only: no backreferences, lookaround, named,
//     atomic or conditional groups, no inline flags;
//   - escapes: \d \D \w \W \s \S \b \B and escaped punctuation only;
//   - a quantifier applies to one character, '.', an escape or a bracket
//     class; a group may only be made optional with '?', at most
//     maxOptionalGroups times, and not inside another optional group;
//   - an alternation's branches hold no quantifier;
//   - two repetitions (any quantifier but an exact {n}) may only follow
//     each other when what lies between them forces the first to stop: a
//     mandatory character the first cannot match, or a repetition of at
//     least one character of a set disjoint from it;
//   - a pattern not anchored with ^ is tried at every position, as if it
//     began with .*?: it may hold no repetition but a final one;
//   - a final .* (or .+) is exempt: paths and header values hold no
//     newline, so it always matches the rest and is never backtracked.
//
// So `/api/(.*)`, `^/api/v[0-9]+/(.*)`, `^/([^/]+)/(.*)` and `^/(.*)/(.*)$`
// are accepted, `(a+)+`, `a*a*`, `^.*.*=.*` and `/v[0-9]+/(.*)` are not.
const (
	maxTenantRegexLen = 256
	maxOptionalGroups = 4
	maxRepeatCount    = 255
)

// reNode is one element of a parsed pattern: an atom with its repeat
// bounds, a group, or a zero-width assertion.
type reNode struct {
	set      []rune // atom: sorted rune ranges, pairs lo..hi
	min, max int    // repeat bounds; max -1 = unbounded
	alts     [][]reNode
	group    bool
	zero     bool // assertion: ^ $ \b \B
	// tail marks a final .* (or .+): paths and header values hold no
	// newline, so it always matches the rest and is never backtracked into.
	tail bool
}

var anyButNewline = []rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune}

// markTail finds a final repetition of '.' (past trailing assertions and
// into a last plain group) and marks it.
func markTail(alts [][]reNode) {
	if len(alts) != 1 {
		return
	}
	seq := alts[0]
	for i := len(seq) - 1; i >= 0; i-- {
		n := &seq[i]
		switch {
		case n.zero:
			continue
		case n.group && !n.variable():
			markTail(n.alts)
		case !n.group && n.max == -1 && slices.Equal(n.set, anyButNewline):
			n.tail = true
		}
		return
	}
}

func (n reNode) variable() bool { return n.min != n.max }

// checkSafeRegex reports why re is outside the safe subset.
func checkSafeRegex(re string) error {
	if len(re) > maxTenantRegexLen {
		return fmt.Errorf("regex longer than %d characters", maxTenantRegexLen)
	}
	p := &reParser{s: re}
	alts, err := p.alternation(0)
	if err != nil {
		return fmt.Errorf("regex not in the safe subset: %v", err)
	}
	if p.i != len(re) {
		return errors.New("regex not in the safe subset: unbalanced ')'")
	}
	top := reNode{group: true, alts: alts, min: 1, max: 1}
	if err := checkStructure(top, false); err != nil {
		return fmt.Errorf("regex not in the safe subset: %v", err)
	}
	if p.optional > maxOptionalGroups {
		return fmt.Errorf("regex not in the safe subset: more than %d optional groups", maxOptionalGroups)
	}
	markTail(alts)
	// PCRE2 tries an unanchored pattern at every position: as if it began
	// with .*?, which any repetition overlaps.
	var pending []rune
	if !strings.HasPrefix(re, "^") {
		pending = anyButNewline
	}
	if _, err := ambiguity([]reNode{top}, pending); err != nil {
		return fmt.Errorf("regex not in the safe subset: %v (it could backtrack for a long time)", err)
	}
	return nil
}

type reParser struct {
	s        string
	i        int
	optional int
}

func (p *reParser) alternation(depth int) ([][]reNode, error) {
	if depth > 8 {
		return nil, errors.New("groups nested too deep")
	}
	var alts [][]reNode
	var cur []reNode
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch c {
		case '|':
			p.i++
			alts = append(alts, cur)
			cur = nil
			continue
		case ')':
			return append(alts, cur), nil
		case '^', '$':
			p.i++
			cur = append(cur, reNode{zero: true})
			continue
		case '*', '+', '?', '{':
			return nil, fmt.Errorf("quantifier %q with nothing to repeat (escape it)", c)
		}
		n, err := p.atom(depth)
		if err != nil {
			return nil, err
		}
		if err := p.quantifier(&n); err != nil {
			return nil, err
		}
		cur = append(cur, n)
	}
	return append(alts, cur), nil
}

func (p *reParser) atom(depth int) (reNode, error) {
	c := p.s[p.i]
	one := reNode{min: 1, max: 1}
	switch c {
	case '(':
		p.i++
		if strings.HasPrefix(p.s[p.i:], "?") {
			if !strings.HasPrefix(p.s[p.i:], "?:") {
				return reNode{}, errors.New("only ( ) and (?: ) groups are allowed")
			}
			p.i += 2
		}
		alts, err := p.alternation(depth + 1)
		if err != nil {
			return reNode{}, err
		}
		if p.i >= len(p.s) || p.s[p.i] != ')' {
			return reNode{}, errors.New("missing ')'")
		}
		p.i++
		one.group, one.alts = true, alts
		return one, nil
	case '.':
		p.i++
		one.set = anyButNewline
		return one, nil
	case '[':
		end, err := classEnd(p.s, p.i)
		if err != nil {
			return reNode{}, err
		}
		set, err := runeSet(p.s[p.i:end])
		if err != nil {
			return reNode{}, err
		}
		p.i = end
		one.set = set
		return one, nil
	case '\\':
		if p.i+1 >= len(p.s) {
			return reNode{}, errors.New("trailing backslash")
		}
		e := p.s[p.i+1]
		p.i += 2
		switch {
		case e == 'b' || e == 'B':
			return reNode{zero: true}, nil
		case strings.IndexByte("dDwWsS", e) >= 0:
			set, err := runeSet(`\` + string(e))
			one.set = set
			return one, err
		case e < 0x80 && !isAlnum(e):
			one.set = []rune{rune(e), rune(e)}
			return one, nil
		}
		return reNode{}, fmt.Errorf(`escape \%c is not allowed (only \d \D \w \W \s \S \b \B and escaped punctuation)`, e)
	}
	p.i++
	one.set = []rune{rune(c), rune(c)}
	return one, nil
}

// classEnd finds the end (after ']') of the bracket class starting at i.
func classEnd(s string, i int) (int, error) {
	j := i + 1
	if j < len(s) && s[j] == '^' {
		j++
	}
	if j < len(s) && s[j] == ']' {
		j++
	}
	for j < len(s) {
		switch {
		case s[j] == '\\':
			j += 2
			continue
		case strings.HasPrefix(s[j:], "[:"):
			k := strings.Index(s[j+2:], ":]")
			if k < 0 {
				return 0, errors.New("unterminated [: in a class")
			}
			j += k + 4
			continue
		case s[j] == ']':
			return j + 1, nil
		}
		j++
	}
	return 0, errors.New("missing ']'")
}

// runeSet reads the characters an atom matches with RE2's parser (the
// syntax of the subset means the same in PCRE2).
func runeSet(atom string) ([]rune, error) {
	re, err := syntax.Parse(atom, syntax.Perl)
	if err != nil {
		return nil, err
	}
	switch re.Op {
	case syntax.OpCharClass:
		return re.Rune, nil
	case syntax.OpLiteral:
		if len(re.Rune) == 1 {
			return []rune{re.Rune[0], re.Rune[0]}, nil
		}
	}
	return nil, fmt.Errorf("%q is not one character class", atom)
}

func (p *reParser) quantifier(n *reNode) error {
	if p.i >= len(p.s) {
		return nil
	}
	switch p.s[p.i] {
	case '*':
		n.min, n.max = 0, -1
	case '+':
		n.min, n.max = 1, -1
	case '?':
		n.min, n.max = 0, 1
	case '{':
		end := strings.IndexByte(p.s[p.i:], '}')
		if end < 0 {
			return errors.New("a literal '{' must be escaped")
		}
		body := p.s[p.i+1 : p.i+end]
		lo, hi, isRange := strings.Cut(body, ",")
		var err error
		if n.min, err = repeatCount(lo); err != nil {
			return err
		}
		n.max = n.min
		if isRange {
			if hi == "" {
				n.max = -1
			} else if n.max, err = repeatCount(hi); err != nil {
				return err
			}
			if n.max >= 0 && n.max < n.min {
				return fmt.Errorf("bad repeat {%s}", body)
			}
		}
		p.i += end
	default:
		return nil
	}
	p.i++
	if p.i < len(p.s) && p.s[p.i] == '?' {
		p.i++ // lazy: the same matches, tried in another order
	}
	if p.i < len(p.s) && strings.IndexByte("*+?{", p.s[p.i]) >= 0 {
		return errors.New("stacked quantifiers")
	}
	if n.group {
		if n.min != 0 || n.max != 1 {
			return errors.New("a group may only be made optional with '?': repeating a group (as in (a+)+ or (a|b)*) can backtrack exponentially")
		}
		p.optional++
	}
	return nil
}

func repeatCount(s string) (int, error) {
	if s == "" || len(s) > 3 || !allDigits(s) {
		return 0, fmt.Errorf("bad repeat count %q", s)
	}
	var n int
	fmt.Sscan(s, &n)
	if n > maxRepeatCount {
		return 0, fmt.Errorf("repeat count %d above %d", n, maxRepeatCount)
	}
	return n, nil
}

// checkStructure refuses optional groups inside optional groups and
// quantifiers inside alternations.
func checkStructure(n reNode, inOptional bool) error {
	if !n.group {
		return nil
	}
	optional := n.variable()
	if optional && inOptional {
		return errors.New("optional group inside an optional group")
	}
	for _, alt := range n.alts {
		for _, c := range alt {
			if len(n.alts) > 1 && (c.variable() || c.group) {
				return errors.New("alternatives may not hold quantifiers or groups")
			}
			if err := checkStructure(c, inOptional || optional); err != nil {
				return err
			}
		}
	}
	return nil
}

// ambiguity walks the pattern with the characters the repetitions since
// the last forced stop may still be consuming (pending) and refuses a
// repetition that could take over some of them.
func ambiguity(seq []reNode, pending []rune) ([]rune, error) {
	for _, n := range seq {
		switch {
		case n.zero:
		case n.group && n.variable(): // (...)?
			inner, err := ambiguity(n.alts[0], pending)
			if err != nil {
				return nil, err
			}
			pending = union(pending, inner)
		case n.group:
			var out []rune
			for _, alt := range n.alts {
				p, err := ambiguity(alt, pending)
				if err != nil {
					return nil, err
				}
				out = union(out, p)
			}
			pending = out
		case n.tail:
		case n.variable():
			if overlap(pending, n.set) {
				return nil, errors.New("a repetition directly follows another that can match the same characters")
			}
			if n.min >= 1 {
				pending = n.set
			} else {
				pending = union(pending, n.set)
			}
		case n.min >= 1 && !overlap(pending, n.set):
			pending = nil
		}
	}
	return pending, nil
}

func union(a, b []rune) []rune {
	return append(append([]rune(nil), a...), b...)
}

func overlap(a, b []rune) bool {
	for i := 0; i+1 < len(a); i += 2 {
		for j := 0; j+1 < len(b); j += 2 {
			if a[i] <= b[j+1] && b[j] <= a[i+1] {
				return true
			}
		}
	}
	return false
}

// refusedTLSSecrets reports the TLS Secrets the watcher refused (namespace
// filters, caps) on the objects that name them. They were treated as
// loading, so nothing reported them as missing; what they would give is
// missing all the same (default certificate, no client certificate, no
// servers for server-ca). Auth Secrets are reported by finishFeatures.
func (b *builder) refusedTLSSecrets() {
	refused := b.s.RefusedSecrets
	if len(refused) == 0 {
		return
	}
	report := func(obj ObjectRef, ref, what, fallback string) {
		why := refused[ref]
		if why == "" {
			return
		}
		name := ref
		if ns, n, _ := strings.Cut(ref, "/"); ns == obj.Namespace {
			name = n
		}
		b.problem(obj, ReasonSecretNotWatched, "%s %s is not read: %s; %s", what, name, why, fallback)
	}
	served := map[ObjectRef]bool{}
	for _, r := range b.d.Served {
		served[r] = true
	}
	for _, ing := range b.s.Ingresses {
		if ing == nil || !served[ingressRef(ing)] {
			continue
		}
		for _, tls := range ing.Spec.TLS {
			if tls.SecretName != "" {
				report(ingressRef(ing), ing.Namespace+"/"+tls.SecretName, "spec.tls Secret", "its hosts get the default certificate")
			}
		}
	}
	for _, be := range b.d.Backends {
		var objs []ObjectRef
		if st := b.backends[be.Name]; st != nil {
			for _, ing := range st.users {
				objs = append(objs, ingressRef(ing))
			}
			if st.fromFlag {
				objs = append(objs, serviceRef(st.namespace, st.service))
			}
		} else {
			// A TCP service: only its Service sets its TLS.
			objs = append(objs, serviceRef(be.Namespace, be.Service))
		}
		for _, x := range []struct{ setting, ref, fallback string }{
			{"server-ca", be.TLS.CASecret, "backend " + be.Name + " gets no servers"},
			{"server-crt", be.TLS.CertSecret, "backend " + be.Name + " connects without a client certificate"},
		} {
			if x.ref == "" {
				continue
			}
			k := secretKey(x.ref, be.Namespace)
			for _, o := range objs {
				report(o, k.ns+"/"+k.name, x.setting, x.fallback)
			}
		}
	}
	cm := ObjectRef{Kind: "Flag"}
	if c := b.s.ConfigMap; c != nil {
		cm = ObjectRef{Kind: "ConfigMap", Namespace: c.Namespace, Name: c.Name}
	}
	for _, h := range []*handle[string]{sslCertificate, clientCA} {
		if raw, ok := h.raw(b.cmValues); ok {
			k := secretKey(raw, "")
			report(cm, k.ns+"/"+k.name, h.setting().Name, "it is not used")
		}
	}
	if f := b.o.DefaultSSLCertificate; f != "" {
		report(ObjectRef{Kind: "Flag"}, f, "--default-ssl-certificate", "the generated certificate is served")
	}
}
