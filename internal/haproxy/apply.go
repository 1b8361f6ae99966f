package haproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// A map diff larger than this is sent as one atomic replacement
// (prepare map / add map @ver / commit map) instead of entry by entry.
const bulkMapOps = 100

// rejection is a backend version HAProxy refused.
type rejection struct {
	spec   backendSpec
	reason string
	// tooLarge: refused for the configuration size (budget.go).
	tooLarge bool
}

// Apply brings HAProxy to want: through the Runtime API when only
// endpoints and map entries changed, through a checked reload otherwise. It
// may be called before Run: the files are then written for Run to start
// with.
func (d *Driver) Apply(ctx context.Context, want *model.Desired) (Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()

	// Unchanged backends keep the entries of what the files hold, unless
	// the descriptor budget rewrote those (their checks turned off).
	from := d.cur
	if d.fdNote != "" {
		from = nil
	}
	target, problems := desiredStateMemo(want, &d.memo, from, d.rejected)
	for _, p := range problems {
		d.log.Debug("desired value dropped", "object", p.Object.String(), "message", p.Message)
	}
	res := Result{Dropped: problems}
	cur := d.cur
	if cur == nil {
		cur = emptyState()
	}
	res.Quarantined = append(res.Quarantined, d.quarantineKnown(cur, target)...)
	res.Quarantined = append(res.Quarantined, d.screenCerts(ctx, cur, target)...)
	d.fitFDs(target)
	withSlots(cur, target)
	target.spares = cur.spares

	p := plan(d.cur, target, d.rend, d.dirty)
	if !p.reload() {
		due, wait := d.spareRefresh()
		if !due {
			res.RetryAfter = wait
			return d.applyRuntime(ctx, cur, target, p, res, "")
		}
		// A reload carries every change, so the plan has no commands.
		p = changePlan{spares: true, changes: []change{{ReloadBackends, fmt.Sprintf("%d backends on spare backends take their own names", len(d.live))}}}
	}
	if sp, live, ok := d.spareCommands(cur, target); ok {
		var taken []string
		for _, n := range slices.Sorted(maps.Keys(live)) {
			if _, before := d.live[n]; !before {
				taken = append(taken, n+" as "+live[n])
			}
		}
		d.live, d.spareTaken = live, d.now()
		if _, wait := d.spareRefresh(); wait > 0 {
			res.RetryAfter = wait
		}
		return d.applyRuntime(ctx, cur, target, sp, res, "served through spare backends: "+strings.Join(taken, ", "))
	}
	if d.running.Load() && d.cur != nil && d.opts.MinReloadInterval > 0 && !d.lastReload.IsZero() {
		if wait := d.opts.MinReloadInterval - d.now().Sub(d.lastReload); wait > 0 {
			res.RetryAfter = wait
			why := fmt.Sprintf("reload deferred %s: %s", wait.Round(time.Millisecond), p.summary())
			sub := runtimeSubset(cur, target)
			return d.applyRuntime(ctx, cur, sub, plan(cur, sub, d.rend, false), res, why)
		}
	}
	return d.applyReload(ctx, cur, target, p, res)
}

// applyRuntime moves HAProxy from cur to next with the commands of p, a
// plan without reload, and writes next to disk.
func (d *Driver) applyRuntime(ctx context.Context, cur, next *state, p changePlan, res Result, why string) (Result, error) {
	if p.empty() && sameFiles(cur, next) {
		res.Reason = why
		if why == "" {
			res.Reason = "no change"
			d.log.Debug("no change")
		} else {
			d.log.Info("no runtime change", "reason", why, "retry_after", res.RetryAfter)
		}
		// The files (and a running HAProxy) already hold what Apply wants.
		d.fromApply = true
		if d.cur != nil && next != d.cur {
			// next is what the files hold as much as d.cur is, and it is
			// the state the memo now starts from: without it the next
			// change would check every backend again (tens of
			// milliseconds at 10,000 backends, after each start).
			committed(d.cur, next)
			d.cur = next
		}
		d.serving.Store(d.running.Load() && !d.dirty)
		return res, nil
	}
	summary := p.runtimeSummary()
	if why != "" {
		summary = why + "; " + summary
	}

	if !d.running.Load() {
		if err := d.writeFiles(next, "", len(p.servers) > 0 || p.cfgChanged, false); err != nil {
			return res, err
		}
		res.Reason = "files written, haproxy not running: " + summary
		d.log.Info("files written for the next start", "changes", summary)
		return res, nil
	}

	// The Runtime API goes first: that is the latency that matters, and d.mu
	// keeps a restart or reload from reading the files in between.
	start := time.Now()
	certs, rtErr := d.execCerts(ctx, p.tlsPre)
	n := 0
	if rtErr == nil {
		n, rtErr = d.execRuntime(ctx, next, p.servers, p.maps, p.bulk)
	}
	if rtErr == nil {
		var post int
		post, rtErr = d.execCerts(ctx, p.tlsPost)
		certs += post
	}
	res.RuntimeOps = n + certs
	res.RuntimeOpsByKind = map[string]int{}
	for kind, n := range map[string]int{RuntimeServer: len(p.servers), RuntimeMap: len(p.maps) + len(p.bulk), RuntimeCert: certs} {
		if n > 0 {
			res.RuntimeOpsByKind[kind] = n
		}
	}
	res.RuntimeResult = ResultOK
	if rtErr != nil {
		res.RuntimeResult = ResultFailed
	}
	if rtErr != nil {
		// The files must never hold what HAProxy refused: a refused
		// certificate is dropped, and the rest goes through a checked
		// reload, which also brings the partly changed live HAProxy back
		// in line with the files.
		d.log.Warn("runtime change failed, reloading instead", "error", rtErr, "changes", summary)
		res.Quarantined = append(res.Quarantined, d.dropRefusedCert(cur, next, rtErr)...)
		d.dirty = true
		res, err := d.applyReload(ctx, cur, next, plan(cur, next, d.rend, true), res)
		if err != nil {
			return res, fmt.Errorf("runtime change failed (%v), and so did the reload: %w", rtErr, err)
		}
		if res.Reloaded {
			res.Reason = "reload after runtime failure: " + rtErr.Error()
		}
		return res, nil
	}
	if err := d.writeFiles(next, "", len(p.servers) > 0 || p.cfgChanged, true); err != nil {
		// The live HAProxy is ahead of the files: forget what the files
		// hold so the next Apply renders, checks and reloads everything.
		d.cur = nil
		d.dirty = true
		return res, err
	}
	d.loadedGen = d.diskGen
	d.serving.Store(true)
	res.Reason = "runtime: " + summary
	d.log.Info("applied at runtime", "changes", summary, "ops", n, "took", time.Since(start).Round(time.Microsecond), "retry_after", res.RetryAfter)
	return res, nil
}

// sameFiles reports whether the map and certificate files of a and b,
// which have the same structure, are the same.
func sameFiles(a, b *state) bool {
	for _, name := range mapNames {
		if !sameEntries(a, b, name) {
			return false
		}
	}
	return a.tls.defaultCert.equal(b.tls.defaultCert) &&
		maps.EqualFunc(a.tls.certs, b.tls.certs, (*tlsCert).equal) &&
		maps.EqualFunc(a.tls.files, b.tls.files, bytes.Equal)
}

// applyReload checks target (quarantining the backends HAProxy refuses),
// writes it and reloads; p is the plan from cur to target.
func (d *Driver) applyReload(ctx context.Context, cur, target *state, p changePlan, res Result) (Result, error) {
	res.ReloadReason = p.reason()
	target.spares = chooseSpares(target)
	cfg, checked := d.uncheckedConfig(target)
	if checked {
		var quarantined []model.Problem
		var err error
		target, quarantined, cfg, err = d.validated(ctx, cur, target)
		res.Quarantined = append(res.Quarantined, quarantined...)
		if err != nil {
			d.log.Error("configuration rejected, the running one stays", "error", err)
			// The candidate's crt-list and certificates must not stay on
			// disk for a restart to load: back to what cur holds.
			if werr := d.sync(d.rend.checkFiles(cur), true); werr != nil {
				d.log.Error("restore certificate files", "error", werr)
			}
			return res, err
		}
		// Quarantine may have taken back what made the reload necessary
		// (unless that is giving the spares back).
		if np := plan(d.cur, target, d.rend, d.dirty); np.reload() {
			p = np
		} else if !p.spares {
			// The live HAProxy keeps its spares.
			target.spares = cur.spares
			return d.applyRuntime(ctx, cur, target, np, res, "structural change quarantined")
		}
	}
	if err := d.writeFiles(target, cfg, true, false); err != nil {
		// What is on disk is now neither cur nor target: the next Apply
		// writes everything and reloads to recover.
		d.cur = nil
		d.dirty = true
		return res, err
	}
	if !d.running.Load() {
		res.Reason = "files written, haproxy not running: " + p.summary()
		d.log.Info("files written for the next start", "changes", p.summary())
		return res, nil
	}
	start := time.Now()
	if err := d.reload(ctx); err != nil {
		d.dirty = true
		if !checked && errors.Is(err, errReloadRefused) {
			// HAProxy refused it and still serves nothing: the check
			// finds whom to hold back (dirty: this time it runs, and
			// whatever it keeps is written and reloaded).
			d.log.Warn("first configuration refused; checking it to find why", "error", err)
			return d.applyReload(ctx, cur, target, p, res)
		}
		return res, err
	}
	res.Reloaded = true
	res.Reason = "reload: " + p.summary()
	d.serving.Store(true)
	d.log.Info("reloaded", "changes", p.summary(), "took", time.Since(start).Round(time.Millisecond), "checked", checked)
	return res, nil
}

// servesNothing: the live HAProxy runs the empty configuration it was
// started with (not one a previous daemon handed over), so a reload can
// take nothing away from anyone.
func (d *Driver) servesNothing() bool {
	return d.running.Load() && !d.adopted.Load() && !d.dirty && d.emptyGen != 0 && d.loadedGen == d.emptyGen
}

// uncheckedConfig renders target for loading without `haproxy -c`
// first; checked is true when the check must run. While HAProxy serves
// nothing (servesNothing) the reload is as good a check: a refused
// configuration leaves the empty one running, and applyReload then checks
// it to find whom to blame. At 10,000 Ingresses this spares the first full
// configuration one of its two parses, about 2 s of a start.
func (d *Driver) uncheckedConfig(target *state) (cfg string, checked bool) {
	if !d.servesNothing() || len(d.rejected) > 0 {
		return "", true
	}
	cfg, err := d.rend.config(target, d.cache)
	if err != nil || d.opts.MaxConfigSize > 0 && len(cfg) > d.opts.MaxConfigSize {
		return "", true
	}
	return cfg, false
}

// quarantineKnown gives backends whose desired version HAProxy already
// refused their fallback at once, without another `haproxy -c`.
func (d *Driver) quarantineKnown(cur, target *state) []model.Problem {
	var out []model.Problem
	for name, r := range d.rejected {
		tb, ok := target.backends[name]
		if !ok || tb.spec != r.spec {
			delete(d.rejected, name)
			continue
		}
		// Not a rewrite: the next quick desiredState makes every refused
		// backend afresh (reuseBackends).
		tb = detachEntry(cur, target, name)
		target.patched = append(target.patched, name)
		tb.spec = fallbackSpec(cur, tb.spec)
		if r.tooLarge {
			out = append(out, sizeProblem(cur, r.spec, r.reason))
			continue
		}
		out = append(out, quarantineProblem(cur, r.spec, tb.spec, r.reason))
	}
	slices.SortFunc(out, func(a, b model.Problem) int { return strings.Compare(a.Message, b.Message) })
	return out
}

// detach gives target its own entry for backend name before it is changed
// in place: an unchanged backend's entry is shared with cur.
func detach(cur, target *state, name string) *backend {
	target.rewritten = true
	return detachEntry(cur, target, name)
}

// detachEntry is detach for a change the next quick desiredState undoes.
func detachEntry(cur, target *state, name string) *backend {
	tb := target.backends[name]
	if cur != nil && cur.backends[name] == tb {
		c := *tb
		tb = &c
		target.backends[name] = tb
	}
	return tb
}

// fallbackSpec is the last good version of a backend, or an empty backend
// without servers when it never loaded.
func fallbackSpec(cur *state, spec backendSpec) backendSpec {
	if spec.Snippet != "" {
		// A snippet is the likely culprit: drop it alone first.
		spec.Snippet = ""
		return spec
	}
	if cb, ok := cur.backends[spec.Name]; ok {
		return cb.spec
	}
	return backendSpec{Name: spec.Name, Namespace: spec.Namespace, Service: spec.Service}
}

func quarantineProblem(cur *state, spec, fallback backendSpec, reason string) model.Problem {
	kept := "its last good version is kept"
	obj := model.ObjectRef{Kind: "Service", Namespace: spec.Namespace, Name: spec.Service}
	switch {
	case spec.Snippet != "" && fallback.Snippet == "" && fallback.Slots == spec.Slots:
		kept = "its backend-config-snippet is disabled, the rest is applied"
		if spec.SnippetFrom != (model.ObjectRef{}) {
			obj = spec.SnippetFrom
		}
	case cur.backends[spec.Name] == nil:
		kept = "it has no servers until fixed"
	}
	return model.Problem{
		Object:  obj,
		Reason:  ReasonConfigRejected,
		Message: fmt.Sprintf("haproxy rejected backend %s: %s; %s", spec.Name, strings.TrimRight(reason, ". "), kept),
	}
}

// validated renders and checks target; each backend HAProxy blames gets its
// fallback version and the rest is checked again. Anything HAProxy blames
// outside the model's backends fails the whole change.
func (d *Driver) validated(ctx context.Context, cur, target *state) (*state, []model.Problem, string, error) {
	var problems []model.Problem
	for range len(target.backends) + len(target.tls.certs) + 3 {
		cfg, err := d.check(ctx, target)
		if err == nil {
			return target, problems, cfg, nil
		}
		var se *sizeError
		if errors.As(err, &se) {
			p, shrunk := d.shrinkToBudget(cfg, se, cur, target)
			problems = append(problems, p...)
			if !shrunk {
				problems = append(problems, model.Problem{
					Object:  model.ObjectRef{Kind: "ConfigMap"},
					Reason:  ReasonConfigTooLarge,
					Message: se.Error() + " with no new or changed backend left to hold back; the running configuration stays",
				})
				return nil, problems, "", err
			}
			continue
		}
		var ce *checkError
		if !errors.As(err, &ce) {
			return nil, problems, "", err
		}
		blamed := false
		for _, alert := range ce.Alerts {
			if p, ok := d.blameCert(cur, target, alert); ok {
				problems = append(problems, p...)
				blamed = true
				continue
			}
			kind, name, reason := blame(cfg, alert)
			switch {
			case kind == "backend" && strings.HasPrefix(name, sparePrefix) && target.spares.count > 0:
				// The spares copy the settings of real backends, which
				// take the blame themselves; without spares, the next
				// check says.
				d.log.Warn("spare backends left out", "reason", reason)
				target.spares = spareSet{}
				blamed = true
			case kind == "backend" && target.backends[name] != nil:
				tb := target.backends[name]
				fb := fallbackSpec(cur, tb.spec)
				if tb.spec == fb {
					continue // already the last good version: not its fault
				}
				// A version without its snippet that fails too keeps
				// the original rejection, so the next Apply starts from
				// the snippet-less version again.
				if _, ok := d.rejected[name]; !ok {
					d.rejected[name] = rejection{spec: tb.spec, reason: reason}
				}
				problems = append(problems, quarantineProblem(cur, tb.spec, fb, reason))
				d.log.Warn("backend quarantined", "backend", name, "service", tb.spec.Namespace+"/"+tb.spec.Service, "reason", reason)
				tb = detach(cur, target, name)
				tb.spec = fb
				var prev []slot
				if cb, ok := cur.backends[name]; ok {
					prev = cb.slots
				}
				tb.slots = assignSlots(prev, tb.endpoints, fb.Slots)
				blamed = true
			case (kind == "global" || kind == "defaults" || kind == "frontend") && target.global != cur.global:
				// A frontend rejected while the global settings change:
				// the frontend and stats snippets are global settings.
				problems = append(problems, model.Problem{
					Object:  model.ObjectRef{Kind: "ConfigMap"},
					Reason:  ReasonConfigRejected,
					Message: fmt.Sprintf("haproxy rejected the global settings: %s; the previous ones are kept", reason),
				})
				d.log.Warn("global settings quarantined", "reason", reason)
				target.global = cur.global
				blamed = true
			}
		}
		if !blamed {
			return nil, problems, "", fmt.Errorf("haproxy rejected the configuration: %s", strings.Join(ce.Alerts, "; "))
		}
	}
	return nil, problems, "", errors.New("haproxy kept rejecting the configuration after quarantining backends")
}

// writeFiles makes the config directory hold next; cfg is the rendered
// next when already at hand, and renderCfg says haproxy.cfg may have
// changed (with the same structure and slots it does not). With lazy, a
// haproxy.cfg that differs from next in server addresses and states only
// is left to flushConfig.
//
// Why lazy: at thousands of backends, rendering and writing the whole
// haproxy.cfg (megabytes) was most of an endpoint change's cost, while the
// live HAProxy has the change from the Runtime API already and reads the
// file only when it reloads or starts. The file is therefore written off
// the hot path (flushDelay) and always before a reload or start
// (reload, start), so neither ever loads a stale one. A server-state-file
// would keep the addresses out of haproxy.cfg instead, but then the file
// alone would no longer describe what HAProxy serves, and HAProxy applies
// such a file only where server names and ids line up.
//
// The map files that changed are left to flushConfig too when lazy: at
// thousands of hosts, rendering a map file (every entry, sorted) cost more
// than the rest of a new host's way through the driver.
func (d *Driver) writeFiles(next *state, cfg string, renderCfg, lazy bool) error {
	stale := d.cfgStale || renderCfg || d.cur == nil
	lazy = lazy && d.cur != nil
	if cfg == "" && stale && !lazy {
		var err error
		if cfg, err = d.rend.config(next, d.cache); err != nil {
			return err
		}
	}
	files, mapsStale := d.rend.stateFilesLazy(next, cfg, d.cache, lazy)
	if err := d.sync(files, true); err != nil {
		return err
	}
	committed(d.cur, next)
	d.cur = next
	d.fromApply = true
	d.diskGen++
	d.cfgStale = cfg == "" && stale
	d.mapsStale = mapsStale
	if d.cfgStale || d.mapsStale {
		d.lastStale.Store(time.Now().UnixNano())
		// Run is woken once per flush, not on every endpoint change:
		// each wake-up took the CPU from the change's own pass.
		if !d.flushAsked {
			d.flushAsked = true
			select {
			case d.flushReq <- struct{}{}:
			default:
			}
		}
	}
	return nil
}

// flushConfig writes the haproxy.cfg and map files that writeFiles left
// for later.
func (d *Driver) flushConfig() error {
	d.flushAsked = false
	if d.cur == nil {
		return nil
	}
	if d.mapsStale {
		start := time.Now()
		if err := d.sync(d.rend.mapFiles(d.cur, d.cache), false); err != nil {
			return err
		}
		d.mapsStale = false
		d.log.Debug("map files written with the entries applied at runtime", "took", time.Since(start).Round(time.Microsecond))
	}
	if !d.cfgStale {
		return nil
	}
	start := time.Now()
	cfg, err := d.rend.config(d.cur, d.cache)
	if err != nil {
		return err
	}
	if err := d.sync(map[string]file{configFile: configFileOf(cfg)}, false); err != nil {
		return err
	}
	d.cfgStale = false
	d.log.Debug("haproxy.cfg written with the server addresses applied at runtime", "bytes", len(cfg), "took", time.Since(start).Round(time.Microsecond))
	return nil
}

// sync runs the one writer on the config directory. After a failure what
// the directory holds is unknown: the next sync compares with the files.
func (d *Driver) sync(want map[string]file, prune bool) error {
	if d.disk == nil {
		d.disk = diskFiles{}
	}
	err := syncFiles(d.opts.ConfigDir, want, d.disk, prune)
	if err != nil {
		d.disk = nil
	}
	return err
}

// serverCommands moves the slots of cur to those of next (same structure).
func serverCommands(cur, next *state) []string {
	// withSlots hands an unchanged backend its current assignment itself:
	// only the others are compared and sorted, not thousands of backends.
	var changed []string
	names, ok := next.changedSince(cur)
	if !ok {
		names = slices.Collect(maps.Keys(next.backends))
	}
	for _, name := range names {
		cb, nb := cur.backends[name], next.backends[name]
		if cb == nil || cb == nb || sameSlots(cb.slots, nb.slots) {
			continue
		}
		changed = append(changed, name)
	}
	slices.Sort(changed)
	var cmds []string
	for _, name := range changed {
		nb, cb := next.backends[name], cur.backends[name]
		for i, n := range nb.slots {
			var o slot
			if i < len(cb.slots) {
				o = cb.slots[i]
			}
			if o == n {
				continue
			}
			srv := name + "/" + serverName(i)
			if !n.used() {
				cmds = append(cmds, "set server "+srv+" state maint")
				continue
			}
			if !o.used() || o.Addr != n.Addr || o.Port != n.Port {
				cmds = append(cmds, "set server "+srv+" addr "+n.Addr+" port "+strconv.Itoa(n.Port))
			}
			if n.Draining {
				cmds = append(cmds, "set server "+srv+" state drain")
			} else {
				cmds = append(cmds, "set server "+srv+" state ready")
			}
		}
	}
	return cmds
}

// sameSlots reports whether a and b are the same assignment, by identity
// first (the common case), by content otherwise.
func sameSlots(a, b []slot) bool {
	if len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) {
		return true
	}
	return slices.Equal(a, b)
}

// execRuntime sends the server commands, then the map commands (so a new
// route finds its servers ready), then the bulk map replacements.
func (d *Driver) execRuntime(ctx context.Context, next *state, srvCmds, mapCmds, bulk []string) (int, error) {
	n := 0
	if cmds := d.liveCommands(append(slices.Clip(srvCmds), mapCmds...)); len(cmds) > 0 {
		out, err := d.rt.Execute(ctx, cmds)
		n += len(out)
		if err != nil {
			return n, err
		}
	}
	for _, name := range bulk {
		path := d.rend.mapPath(name)
		out, err := d.rt.Execute(ctx, []string{"prepare map " + path})
		n += len(out)
		if err != nil {
			return n, err
		}
		ver, ok := strings.CutPrefix(strings.TrimSpace(out[0]), "New version created:")
		if !ok {
			return n, fmt.Errorf("prepare map %s: unexpected answer %q", name, out[0])
		}
		ver = "@" + strings.TrimSpace(ver)
		m := next.maps[name]
		cmds := make([]string, 0, len(m)+1)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			cmds = append(cmds, d.liveCommand("add map "+ver+" "+path+" "+k+" "+m[k]))
		}
		cmds = append(cmds, "commit map "+ver+" "+path)
		out, err = d.rt.Execute(ctx, cmds)
		n += len(out)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// errReloadRefused: the new worker did not start, HAProxy refused the
// configuration.
var errReloadRefused = errors.New("haproxy kept the previous configuration")

// reload asks the master to reload and waits until a new worker with the
// new configuration answers on the stats socket. HAProxy keeps the old
// worker when the new configuration fails to load; that is an error here.
func (d *Driver) reload(ctx context.Context) error {
	if err := d.flushConfig(); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.ReloadTimeout)
	defer cancel()
	before, err := d.master.ShowProc(ctx)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	if err := d.master.Reload(ctx); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("reload not confirmed: %w (last: %v)", ctx.Err(), lastErr)
			}
			return fmt.Errorf("reload not confirmed: %w", ctx.Err())
		case <-tick.C:
		}
		if !d.running.Load() {
			// The master died: Run restarts it from the files, which
			// already hold the new configuration.
			return errors.New("reload not confirmed: haproxy stopped")
		}
		// The master re-executes itself: its socket may refuse for a while.
		now, err := d.master.ShowProc(ctx)
		if err != nil {
			lastErr = err
			continue
		}
		if now.Failed > before.Failed {
			return fmt.Errorf("reload failed (show proc: failed %d -> %d): %w", before.Failed, now.Failed, errReloadRefused)
		}
		if now.Reloads <= before.Reloads && now.MasterPID == before.MasterPID {
			continue
		}
		worker := 0
		for _, w := range now.Workers {
			if !slices.Contains(before.Workers, w) {
				worker = w
			}
		}
		if worker == 0 {
			continue
		}
		// Until the old worker stops listening, it may still answer on the
		// stats socket, and runtime commands would go to it.
		pid, err := d.rt.WorkerPID(ctx)
		if err != nil {
			lastErr = err
			continue
		}
		if pid != worker {
			continue
		}
		d.lastReload = d.now()
		d.loadedGen = d.diskGen
		d.dirty = false
		d.live = nil
		return nil
	}
}
