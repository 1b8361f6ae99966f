package haproxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// A certificate HAProxy refuses must never reach the crt-list: the bind
// line then fails every later `haproxy -c` (stalling every tenant's
// changes) and a restarted HAProxy cannot load its files at all. So every
// certificate HAProxy does not run yet is first loaded alone: one
// `haproxy -c` on a tiny configuration with a bind line per candidate,
// whose alerts name the files it refused. The verdicts are kept by
// content, so a refused Secret costs one check, not one per sync.

// certVerdict is what HAProxy said of one certificate content: "" when it
// loaded it, its reason otherwise.
type certVerdict = string

// trialCandidate is one certificate to load.
type trialCandidate struct {
	name string // certificate name, model.DefaultCertificateName for the default
	c    *tlsCert
	sum  [32]byte
}

// screenCerts drops from target every certificate HAProxy would refuse
// (trial-loading those it does not run yet) and returns the problems to
// report. Certificates cur holds with the same content were loaded
// already.
func (d *Driver) screenCerts(ctx context.Context, cur, target *state) []model.Problem {
	if d.certVerdicts == nil {
		d.certVerdicts = map[[32]byte]certVerdict{}
	}
	var all, todo []trialCandidate
	add := func(name string, c, old *tlsCert) {
		if c == nil || (old != nil && bytes.Equal(c.pem, old.pem)) {
			return
		}
		tc := trialCandidate{name: name, c: c, sum: sha256.Sum256(c.pem)}
		all = append(all, tc)
		if _, known := d.certVerdicts[tc.sum]; !known {
			todo = append(todo, tc)
		}
	}
	add(model.DefaultCertificateName, target.tls.defaultCert, cur.tls.defaultCert)
	for _, name := range slices.Sorted(maps.Keys(target.tls.certs)) {
		add(name, target.tls.certs[name], cur.tls.certs[name])
	}
	if len(todo) > 0 {
		if err := d.trialLoad(ctx, todo); err != nil {
			// Without a verdict the full check still stands guard.
			d.log.Warn("certificates not trial-loaded", "error", err)
		}
	}
	var problems []model.Problem
	keep := map[[32]byte]bool{}
	for _, tc := range all {
		keep[tc.sum] = true
		if reason := d.certVerdicts[tc.sum]; reason != "" {
			problems = append(problems, d.dropCert(cur, target, tc.name, reason)...)
		}
	}
	// Only the verdicts of what is still wanted are worth keeping.
	maps.DeleteFunc(d.certVerdicts, func(k [32]byte, _ certVerdict) bool { return !keep[k] })
	return problems
}

// trialLoad runs one `haproxy -c` loading every candidate on a bind line
// of its own and records a verdict for each.
func (d *Driver) trialLoad(ctx context.Context, todo []trialCandidate) error {
	dir := d.rend.certsDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create certificate directory: %w", err)
	}
	files := make(map[string]int, len(todo))
	var cfg strings.Builder
	cfg.WriteString("defaults\n\tmode http\n\ttimeout client 1s\n\ttimeout server 1s\n\ttimeout connect 1s\n\nfrontend trial\n")
	for i, tc := range todo {
		// Not a .pem name, and not a file the state needs: one a crash
		// leaves behind is removed by the next write (syncFiles).
		p := filepath.Join(dir, ".trial-"+strconv.Itoa(i))
		if err := writeFileAtomic(p, tc.c.pem, 0o600); err != nil {
			return err
		}
		defer os.Remove(p)
		files[p] = i
		// -c binds nothing; the address only has to parse.
		fmt.Fprintf(&cfg, "\tbind 127.0.0.1:1 ssl crt %s\n", p)
	}
	cfgPath := filepath.Join(dir, ".trial.cfg")
	if err := writeFileAtomic(cfgPath, []byte(cfg.String()), 0o600); err != nil {
		return err
	}
	defer os.Remove(cfgPath)
	err := d.checker.Check(ctx, cfgPath)
	var ce *checkError
	switch {
	case err == nil:
		for _, tc := range todo {
			d.certVerdicts[tc.sum] = ""
		}
		return nil
	case !errors.As(err, &ce):
		return err
	}
	refused := map[int]string{}
	for _, a := range ce.Alerts {
		i, ok := -1, false
		for _, m := range quotedRE.FindAllStringSubmatch(a, -1) {
			if i, ok = files[m[1]]; ok {
				break
			}
		}
		if !ok {
			// An alert about something else: no verdict can be trusted.
			return fmt.Errorf("trial load: %s", a)
		}
		refused[i] = certReason(a)
	}
	for i, tc := range todo {
		d.certVerdicts[tc.sum] = refused[i]
		if r := refused[i]; r != "" {
			d.log.Warn("certificate refused by haproxy", "certificate", tc.name, "reason", r)
		}
	}
	return nil
}

var quotedRE = regexp.MustCompile(`'([^']+)'`)

// certReason keeps HAProxy's words about a certificate, without the
// location and the file name (a path of this host).
func certReason(alert string) string {
	_, _, reason := blame("", alert)
	if i := strings.Index(reason, "' : "); i >= 0 && strings.HasPrefix(reason, "'bind") {
		reason = reason[i+4:]
	}
	reason = strings.TrimPrefix(reason, "'crt-list' : ")
	reason = quotedRE.ReplaceAllString(reason, "")
	reason = strings.TrimSpace(strings.TrimRight(strings.TrimSpace(reason), "."))
	if i := strings.Index(reason, " : "); i >= 0 && strings.HasPrefix(reason, "error processing line") {
		reason = reason[i+3:]
	}
	if reason == "" {
		reason = "refused"
	}
	return reason
}

// dropCert takes a refused certificate out of target: an SNI certificate
// goes (its hosts get the default certificate), a default certificate
// gives way to the one cur runs.
func (d *Driver) dropCert(cur, target *state, name, reason string) []model.Problem {
	var c *tlsCert
	if name == model.DefaultCertificateName {
		c = target.tls.defaultCert
		target.tls.defaultCert = cur.tls.defaultCert
		target.tls.head.enabled = target.tls.defaultCert != nil
	} else {
		c = target.tls.certs[name]
		delete(target.tls.certs, name)
	}
	if c == nil {
		return nil
	}
	var objs []model.ObjectRef
	secret := "the default certificate"
	fallback := "the previous default certificate is kept"
	if c.src != nil {
		objs = append(objs, c.src.Ingresses...)
		if c.src.Secret.Name != "" {
			objs = append(objs, c.src.Secret)
			secret = "the certificate of Secret " + c.src.Secret.Name
		}
	}
	if name != model.DefaultCertificateName {
		fallback = "hosts " + strings.Join(c.hosts, ",") + " get the default certificate"
	}
	if len(objs) == 0 {
		objs = []model.ObjectRef{{Kind: "ConfigMap"}}
	}
	out := make([]model.Problem, 0, len(objs))
	for _, o := range objs {
		out = append(out, model.Problem{
			Object:  o,
			Reason:  model.ReasonInvalidSecret,
			Message: fmt.Sprintf("haproxy refused %s: %s; %s", secret, reason, fallback),
		})
	}
	return out
}

// certInAlert names the certificate an ALERT is about (a crt-list line or
// a bind's crt), "" when it names none.
func (d *Driver) certInAlert(alert string) string {
	prefix := d.rend.certsDir + string(filepath.Separator)
	for _, m := range quotedRE.FindAllStringSubmatch(alert, -1) {
		rel, ok := strings.CutPrefix(m[1], prefix)
		if !ok || strings.Contains(rel, string(filepath.Separator)) {
			continue
		}
		if name, ok := strings.CutSuffix(rel, ".pem"); ok {
			return name
		}
	}
	return ""
}

// blameCert handles an ALERT of a full check that names a certificate of
// target: the certificate is dropped and remembered as refused.
func (d *Driver) blameCert(cur, target *state, alert string) ([]model.Problem, bool) {
	name := d.certInAlert(alert)
	var c *tlsCert
	switch {
	case name == "":
		return nil, false
	case name == model.DefaultCertificateName:
		if target.tls.defaultCert.equal(cur.tls.defaultCert) {
			return nil, false
		}
		c = target.tls.defaultCert
	default:
		if c = target.tls.certs[name]; c == nil {
			return nil, false
		}
	}
	reason := certReason(alert)
	if d.certVerdicts == nil {
		d.certVerdicts = map[[32]byte]certVerdict{}
	}
	d.certVerdicts[sha256.Sum256(c.pem)] = reason
	d.log.Warn("certificate refused by haproxy", "certificate", name, "reason", reason)
	return d.dropCert(cur, target, name, reason), true
}

// dropRefusedCert handles a runtime change HAProxy refused: when the
// refused command was about a certificate of next, that certificate is
// dropped from next and remembered as refused.
func (d *Driver) dropRefusedCert(cur, next *state, rtErr error) []model.Problem {
	var re *runtimeError
	if !errors.As(rtErr, &re) {
		return nil
	}
	p, _ := d.blameCert(cur, next, "'"+strings.TrimSpace(lastField(re.Command))+"' "+re.Response)
	return p
}

func lastField(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}
