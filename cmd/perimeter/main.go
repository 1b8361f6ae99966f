// Command perimeter is an external-mode ingress daemon for edge hosts: it
// watches a Kubernetes cluster and drives a local HAProxy (and, optionally,
// learns pod routes over BGP) so that traffic reaches pods directly.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/app"
	"github.com/perimeter-ingress/perimeter/internal/config"
)

const usage = `usage: perimeter [run] [flags]       run the daemon (default)
       perimeter render [flags]          print the haproxy.cfg and maps the daemon would apply
       perimeter explain --host H --path P [flags]
                                         say which Ingress, rule and backend a request reaches
       perimeter bgp status [flags]      peers and routes of the running daemon's BGP speaker
       perimeter routes flush [flags]    remove the routes the daemon installed
       perimeter version                 print the version
       perimeter config-reference [--format=markdown|yaml]
                                         print the reference of the configuration
                                         file, or the file with every key commented out
Run 'perimeter run -h' for the flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// Two-word commands: "bgp status", "routes flush".
	if (cmd == "bgp" || cmd == "routes") && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = cmd+" "+args[0], args[1:]
	}
	if cmd == "config-reference" {
		return configReference(args, stdout, stderr)
	}
	// SIGHUP (systemctl reload) re-reads the configuration file. Caught
	// from the start: its default action would end the daemon.
	var hup chan os.Signal
	if cmd == "run" {
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	var c config.Config
	fs := c.FlagSet("perimeter "+cmd, stderr)
	var host, path string
	switch cmd {
	case "run", "render", "bgp status", "routes flush":
	case "explain":
		fs.StringVar(&host, "host", "", "request host")
		fs.StringVar(&path, "path", "/", "request path")
	case "version":
		fmt.Fprintln(stdout, "perimeter", app.Version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "perimeter: unknown command %q\n%s", cmd, usage)
		return 2
	}
	// Flags, then the configuration file for what they leave unset.
	src, err := config.Parse(&c, fs, args, app.Check)
	if errors.Is(err, config.ErrUsage) {
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "perimeter:", oneLine(err))
		return 2
	}
	if c.Version {
		fmt.Fprintln(stdout, "perimeter", app.Version)
		return 0
	}
	// The peer's job modes: a Job written for it must neither start a
	// daemon nor report success for a conversion that did not happen.
	if c.JobCheckCRD() {
		fmt.Fprintln(stdout, "perimeter: --job-check-crd: Perimeter has no custom resource definitions to install")
		return 0
	}
	if c.ConvertsCRD() {
		fmt.Fprintln(stderr, "perimeter: --input-file/--output-file: Perimeter has no custom resources; translate them to annotations and ConfigMap keys (docs/migration.md)")
		return 2
	}
	var level slog.LevelVar
	if l, err := c.LogLevel(); err == nil {
		level.Set(l)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: &level}))
	for _, n := range src.NoEffect() {
		log.Warn("flag of the HAProxy Kubernetes Ingress Controller accepted without effect", "flag", n.Flag, "why", n.Reason)
	}

	switch cmd {
	case "render":
		err = app.Render(ctx, &c, stdout)
	case "bgp status":
		err = bgpStatus(&c, stdout)
	case "routes flush":
		err = app.FlushRoutes(&c, stdout)
	case "explain":
		err = app.Explain(ctx, &c, host, path, stdout)
	default:
		// SIGUSR1 is a hand-over restart: exit leaving HAProxy and the
		// routes for the next daemon (systemd's RestartKillSignal).
		handOver := make(chan os.Signal, 1)
		signal.Notify(handOver, syscall.SIGUSR1)
		rctx := app.WithReload(ctx, app.Reload{Signals: hup, Load: src.Load, Level: &level})
		err = app.Run(rctx, &c, log, handOver)
		signal.Stop(handOver)
	}
	if err != nil {
		fmt.Fprintln(stderr, "perimeter:", oneLine(err))
		return 1
	}
	return 0
}

// oneLine keeps a fatal error to the single line systemd shows in status.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// bgpStatus prints what the running daemon's speaker reports on its
// controller port, like `birdc show protocols` and `show route`.
func bgpStatus(c *config.Config, out io.Writer) error {
	url := "http://" + net.JoinHostPort(c.ControllerBindAddress, strconv.Itoa(c.ControllerPort)) + "/debug/bgp"
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return fmt.Errorf("daemon not reachable on its controller port: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return errors.New("the daemon runs without BGP (--bgp-local-as not set)")
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if _, err = io.Copy(out, resp.Body); err != nil {
		return err
	}
	// The upstream side (ha.md), when the daemon announces addresses.
	up, err := cl.Get(url + "/upstream")
	if err != nil {
		return err
	}
	defer up.Body.Close()
	if up.StatusCode != http.StatusOK {
		return nil
	}
	_, err = io.Copy(out, up.Body)
	return err
}

// configReference prints docs/configuration.md, or with --format=yaml the
// configuration file the packages install.
func configReference(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("perimeter config-reference", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "markdown", "markdown (the reference) or yaml (the file with every key commented out)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch *format {
	case "markdown", "md":
		fmt.Fprint(stdout, config.Markdown())
	case "yaml":
		fmt.Fprint(stdout, config.YAML())
	default:
		fmt.Fprintf(stderr, "perimeter config-reference: --format=%q: want markdown or yaml\n", *format)
		return 2
	}
	return 0
}
