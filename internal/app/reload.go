package app

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/perimeter-ingress/perimeter/internal/bgp"
	"github.com/perimeter-ingress/perimeter/internal/config"
	"github.com/perimeter-ingress/perimeter/internal/model"
	"github.com/perimeter-ingress/perimeter/internal/systemd"
)

// Reload is how the daemon re-reads its configuration: on each value of
// Signals (SIGHUP, `systemctl reload`) it calls Load, applies the keys that
// can change live (config.Reload says which) and reports the others as
// needing a restart. A file Load refuses changes nothing.
type Reload struct {
	Signals <-chan os.Signal
	Load    func() (*config.Config, error)
	// Level is the daemon's log level, which --log changes live.
	Level *slog.LevelVar
}

type reloadKey struct{}

// WithReload makes Run re-read its configuration as r says.
func WithReload(ctx context.Context, r Reload) context.Context {
	return context.WithValue(ctx, reloadKey{}, &r)
}

func reloadRequests(ctx context.Context) *Reload {
	r, _ := ctx.Value(reloadKey{}).(*Reload)
	return r
}

// serve handles reload requests until ctx ends. opts hands the sync loop
// the model options of each applied configuration; ready says whether
// systemd was told READY=1 already (a reload before that is applied
// without RELOADING=1, which would otherwise end the start-up).
func (r *Reload) serve(ctx context.Context, running *config.Config, ready *atomic.Bool, opts chan model.Options, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.Signals:
		}
		notify := ready.Load()
		if notify {
			systemd.Reloading()
		}
		var status string
		running, status = r.once(running, opts, log)
		if notify {
			systemd.Reloaded(status)
		} else {
			systemd.Status(status)
		}
	}
}

// once reloads one time and returns the configuration now running and the
// status line that says what happened.
func (r *Reload) once(running *config.Config, opts chan model.Options, log *slog.Logger) (*config.Config, string) {
	loaded, err := r.Load()
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), "\n", "; ")
		log.Error("configuration file refused: the running settings stay", "err", msg)
		return running, "serving with the previous settings: " + msg
	}
	next, live, restart := config.Reload(running, loaded)
	for _, ch := range live {
		log.Info(ch.Key+" changed", "from", ch.From, "to", ch.To)
	}
	var pending []string
	for _, ch := range restart {
		log.Warn(ch.Key+" changed: needs a restart", "running", ch.From, "file", ch.To)
		pending = append(pending, ch.Key)
	}
	if level, err := next.LogLevel(); err == nil && r.Level != nil {
		r.Level.Set(level)
	}
	if len(live) > 0 {
		// The loop takes the newest options; an older pending value is
		// dropped, not queued behind.
		select {
		case <-opts:
		default:
		}
		opts <- ModelOptions(next)
	}
	log.Info("configuration reloaded", "applied", len(live), "needs_restart", strings.Join(pending, ","))
	if len(pending) > 0 {
		return next, "serving; needs a restart for: " + strings.Join(pending, ", ")
	}
	return next, "serving"
}

// Check refuses the values the BGP speaker would refuse, before it starts
// and on reload, so that the configuration file's line is named.
func Check(c *config.Config) error {
	var errs []error
	bad := func(key, got, item string, err error) {
		errs = append(errs, &config.KeyError{Key: key, Got: strconv.Quote(got), Item: item, Reason: err.Error()})
	}
	for _, p := range c.BGP.Peers {
		if _, err := bgp.ParsePeerFlag(p); err != nil {
			bad("bgp-peer", p, p, err)
		}
	}
	for _, s := range c.BGP.PassivePrefixes {
		if _, err := bgp.ParsePassivePeerFlag(s); err != nil {
			bad("bgp-passive-prefix", s, s, err)
		}
	}
	for _, a := range []struct{ key, v string }{{"bgp-router-id", c.BGP.RouterID}, {"bgp-listen-address", c.BGP.ListenAddress}} {
		if a.v == "" {
			continue
		}
		if _, err := netip.ParseAddr(a.v); err != nil {
			bad(a.key, a.v, "", err)
		}
	}
	if len(errs) == 0 && c.BGP.Enabled() {
		cfg, err := BGPConfig(c)
		if err == nil {
			// The daemon connects the speaker to the cluster; here only
			// the settings are checked.
			cfg.Source = noSource{}
			err = cfg.Validate()
		}
		if err != nil {
			errs = append(errs, &config.KeyError{Key: "bgp-local-as", Reason: "BGP: " + strings.ReplaceAll(err.Error(), "\n", "; ")})
		}
	}
	return errors.Join(errs...)
}

// noSource stands for the cluster connection when only checking settings.
type noSource struct{}

func (noSource) Run(context.Context, func(bgp.ClusterState)) error { return nil }
