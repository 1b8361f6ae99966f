package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/config"
	"github.com/perimeter-ingress/perimeter/internal/haproxy"
	"github.com/perimeter-ingress/perimeter/internal/kube"
	"github.com/perimeter-ingress/perimeter/internal/model"
)

// desired reads the cluster once, as the daemon does at start, and builds
// the desired state with the same model code.
func desired(ctx context.Context, c *config.Config) (*model.Desired, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	_, cs, err := kube.Connect(ctx, c.Kubeconfig, "perimeter/"+Version)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := kube.NewWatcher(cs, WatchOptions(c), slog.New(slog.DiscardHandler))
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	opts := ModelOptions(c)
	// The daemon serves a certificate it generates at start when no Secret
	// gives one; so does this preview (its content is never printed).
	if opts.DefaultCertificate, err = selfSignedCertificate(time.Now()); err != nil {
		return nil, err
	}
	want := model.Build(w.Snapshot(), opts)
	// Secrets are watched only once something references them.
	if len(want.SecretRefs) > 0 {
		w.WatchSecrets(want.SecretRefs)
		for !w.Synced() {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-w.Changed():
			}
		}
		want = model.Build(w.Snapshot(), opts)
	}
	return want, nil
}

// Render prints the haproxy.cfg and map files the daemon would apply for
// the cluster's current state, without touching HAProxy.
func Render(ctx context.Context, c *config.Config, out io.Writer) error {
	want, err := desired(ctx, c)
	if err != nil {
		return err
	}
	opts := HAProxyOptions(c, slog.New(slog.DiscardHandler))
	// The limit the daemon would raise itself to, so that maxconn and the
	// health checks come out as it would write them.
	if limit, err := haproxy.RaiseFDLimit(); err == nil {
		opts.FDLimit = limit
	}
	files, err := haproxy.Render(opts, want)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(out, "# ---- %s\n%s", n, files[n])
		if !strings.HasSuffix(string(files[n]), "\n") {
			fmt.Fprintln(out)
		}
	}
	for _, p := range want.Problems {
		fmt.Fprintf(out, "# problem: %s %s/%s: %s: %s\n", p.Object.Kind, p.Object.Namespace, p.Object.Name, p.Reason, p.Message)
	}
	return nil
}

// Explain says which Ingress rule and backend a request for host and path
// reaches, using the lookup order the HAProxy frontend uses.
func Explain(ctx context.Context, c *config.Config, host, path string, out io.Writer) error {
	want, err := desired(ctx, c)
	if err != nil {
		return err
	}
	r, ok := model.Match(want, host, path)
	if !ok {
		fmt.Fprintf(out, "%s%s: no rule matches and there is no default backend: HAProxy answers 404\n", host, path)
		return nil
	}
	if r.Host == "" && r.Path == "" {
		src := "--default-backend-service"
		if r.Ingress.Name != "" {
			src = fmt.Sprintf("defaultBackend of Ingress %s/%s", r.Ingress.Namespace, r.Ingress.Name)
		}
		fmt.Fprintf(out, "%s%s: no rule matches; default backend %s (%s)\n", host, path, r.Backend, src)
	} else {
		h := r.Host
		if h == "" {
			h = "(any host)"
		}
		fmt.Fprintf(out, "%s%s: Ingress %s/%s, rule host %s path %s (%s), backend %s\n",
			host, path, r.Ingress.Namespace, r.Ingress.Name, h, r.Path, r.PathType, r.Backend)
		if c, w, ok := model.Canary(want, r.Backend); ok {
			fmt.Fprintf(out, "  canary: %d%% of these requests go to backend %s instead\n", w, c)
		}
	}
	for _, b := range want.Backends {
		if b.Name != r.Backend {
			continue
		}
		if len(b.Endpoints) == 0 {
			fmt.Fprintf(out, "  Service %s/%s port %s has no ready endpoints: HAProxy answers 503\n", b.Namespace, b.Service, b.Port)
		}
		for _, ep := range b.Endpoints {
			state := "ready"
			if ep.Draining {
				state = "draining"
			}
			fmt.Fprintf(out, "  endpoint %s:%d %s\n", ep.Address, ep.Port, state)
		}
	}
	return nil
}
