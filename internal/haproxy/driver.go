// Package haproxy renders and drives a local HAProxy (2.6 or newer) in
// master-worker mode: it writes haproxy.cfg and the map files, applies what
// the Runtime API can change at once (server slot addresses and states, map
// entries) and reloads through the master CLI only when the structure of the
// configuration changes. It also supervises the HAProxy process.
//
// The files on disk always describe what HAProxy runs (or will run at its next
// start): every runtime change is written to them first, so neither a reload
// nor a restart loses it.
package haproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// DefaultStatsBindPort is the stats/metrics port the daemon's flags default
// to; in Options a zero port means "disabled".
const DefaultStatsBindPort = 1024

// Options configure the Driver. They are fixed for its lifetime: changing any
// of them means a new Driver.
type Options struct {
	// Program is the haproxy binary; empty looks up "haproxy" in PATH and
	// then /usr/sbin/haproxy.
	Program string
	// ConfigDir holds haproxy.cfg and maps/; RuntimeDir the sockets and the
	// pid file. Both are created when missing.
	ConfigDir, RuntimeDir string

	// HTTPBindPort is the port of the http frontend (default 80).
	HTTPBindPort int
	// HTTPSBindPort is the port of the https frontend; 0 disables it. It
	// is served once the Desired has a default certificate (tls.go).
	HTTPSBindPort int
	// IPv4BindAddress and IPv6BindAddress default to "0.0.0.0" and "::".
	IPv4BindAddress, IPv6BindAddress      string
	DisableHTTP, DisableIPv4, DisableIPv6 bool
	// AnnounceAddresses are bound as well when the bind address of their
	// family is not the wildcard (the ingress addresses of ha.md).
	AnnounceAddresses []string

	// StatsBindAddress defaults to 127.0.0.1. StatsBindPort serves /stats and
	// /metrics (Prometheus); 0 disables it (the daemon's flag default is
	// DefaultStatsBindPort).
	StatsBindAddress string
	StatsBindPort    int
	// HealthzBindPort serves HAProxy's monitor-uri /healthz on the stats
	// address; 0 disables it.
	HealthzBindPort int

	// TrustForwardedFor keeps the X-Forwarded-For header a client sends,
	// for an edge that sits behind proxies the operator trusts; otherwise
	// a backend with forwarded-for gets only the address HAProxy saw.
	TrustForwardedFor bool

	// FDLimit is the RLIMIT_NOFILE HAProxy inherits (RaiseFDLimit); when
	// set, maxconn and health checks are sized to fit in it (fdbudget.go).
	FDLimit int

	// MinReloadInterval is the coalescing window: a structural change that
	// comes sooner after the previous reload is deferred (Result.RetryAfter)
	// while runtime-applicable changes still go out at once.
	MinReloadInterval time.Duration
	// StopTimeout bounds the soft stop on shutdown before HAProxy is
	// stopped hard (default 10s).
	StopTimeout time.Duration
	// ReloadTimeout bounds the wait for a reload to be confirmed (default 30s).
	ReloadTimeout time.Duration
	// MaxConfigSize bounds haproxy.cfg in bytes (0: no bound): the new or
	// changed backends of a change that would exceed it keep their last
	// good version, largest first, with a ConfigTooLarge problem.
	MaxConfigSize int

	Logger *slog.Logger
}

// Result says what one Apply did.
type Result struct {
	// Reloaded is true when HAProxy was reloaded with a new configuration.
	Reloaded bool
	// Reason describes the decision in a few words, for logs and tests.
	Reason string
	// RuntimeOps counts the Runtime API commands sent.
	RuntimeOps int
	// RuntimeOpsByKind counts the commands of the runtime change by kind
	// (RuntimeKinds), RuntimeResult says how the change went (ResultOK,
	// ResultFailed; empty without a runtime change).
	RuntimeOpsByKind map[string]int
	RuntimeResult    string
	// ReloadReason is why HAProxy was (or was to be) reloaded, one of the
	// Reload* constants; empty when no reload was attempted.
	ReloadReason string
	// RetryAfter is set when a reload was deferred (by MinReloadInterval,
	// or until changes pause to give spare backends back): call Apply
	// again (with the newest Desired) after this long.
	RetryAfter time.Duration
	// Quarantined lists what HAProxy rejected (or would: configuration
	// size): backends keep their last good version (or stay empty when
	// new), certificates are left out, while the rest is applied.
	Quarantined []model.Problem
	// Dropped lists the values the driver's own checks refused before
	// HAProxy saw them.
	Dropped []model.Problem
}

// Version is what `haproxy -vv` reported.
type Version struct {
	Major, Minor, Patch int
	// Raw is the full version string, e.g. "2.6.12-1+deb12u4".
	Raw string
	// Features holds the "Feature list" flags that are on (e.g. "PROMEX").
	Features map[string]bool
}

// AtLeast reports whether the version is major.minor or newer.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || (v.Major == major && v.Minor >= minor)
}

// Driver renders and drives one HAProxy. Apply is meant to be called from one
// goroutine and Run from another; both may run at once.
type Driver struct {
	opts    Options
	log     *slog.Logger
	version Version
	paths   paths
	rend    renderer
	// sandbox restricts HAProxy and haproxy -c (sandbox.go).
	sandbox *sandbox
	cache   *renderCache // used under mu

	// Edges, replaced by fakes in unit tests.
	rt      runtimeAPI
	master  masterAPI
	checker configChecker
	now     func() time.Time

	// memo keeps desiredState's costliest checks (used under mu).
	memo checkMemo
	// fdNote is what the descriptor budget last gave up, for logging
	// changes only (used under mu).
	fdNote string

	// mu serialises everything that touches the files on disk or the live
	// HAProxy: Apply, process start and the transition to running.
	mu sync.Mutex
	// cur is what the files on disk hold; nil until the first write.
	cur *state
	// disk is what the writer knows of the files (files.go).
	disk diskFiles
	// fromApply is true once the files on disk came from Apply.
	fromApply bool
	// live names, for each backend the live HAProxy serves through a
	// spare (spare.go), that spare; nil after a reload or start.
	live map[string]string
	// spareTaken is when a spare was last taken.
	spareTaken time.Time
	// cfgStale: haproxy.cfg lags behind cur in server addresses and
	// states, which the live HAProxy has from the Runtime API (writeFiles).
	cfgStale bool
	// mapsStale: map files lag behind cur in entries the live HAProxy
	// has from the Runtime API (writeFiles).
	mapsStale bool
	// flushReq asks Run to write haproxy.cfg and the map files soon
	// (buffered, one); flushAsked says it was sent since the last
	// flushConfig, and lastStale when cfgStale or mapsStale was last set
	// (UnixNano): later changes move the flush without waking Run (used
	// under mu, but lastStale).
	flushReq   chan struct{}
	flushAsked bool
	lastStale  atomic.Int64
	// diskGen counts file writes; loadedGen is the generation the live
	// HAProxy loaded (at start or at the last confirmed reload).
	diskGen, loadedGen uint64
	// emptyGen is the generation of the empty configuration writeInitial
	// wrote for HAProxy's start (servesNothing).
	emptyGen uint64
	// dirty is set when the live HAProxy may run something else than the
	// files on disk (a failed runtime change or reload): the next Apply
	// reloads.
	dirty      bool
	lastReload time.Time
	// rejected remembers backend versions HAProxy refused, so the same
	// version is quarantined again without another `haproxy -c`.
	rejected map[string]rejection
	// certVerdicts remembers what HAProxy said of each certificate content
	// it was asked to load (tls_trial.go); nil until the first check.
	certVerdicts map[[32]byte]certVerdict

	// running is true while a ready HAProxy runs. It is set under mu, but
	// cleared without it so that a dying master never waits for an Apply.
	running atomic.Bool
	serving atomic.Bool
	// handOver leaves HAProxy running when Run ends (adopt.go).
	handOver atomic.Bool
	// adopted is set while the running HAProxy is one a previous daemon
	// handed over.
	adopted atomic.Bool
	// changed is signalled (without blocking) when running changes.
	changed chan struct{}
}

type paths struct {
	config, mapsDir, masterSock, adminSock, pidFile string
}

// New checks the options and probes the HAProxy binary. A missing or too old
// binary is a fatal error.
func New(o Options) (*Driver, error) {
	o, err := checkedOptions(o)
	if err != nil {
		return nil, err
	}
	prog, err := findProgram(o.Program)
	if err != nil {
		return nil, err
	}
	o.Program = prog
	v, err := probe(prog)
	if err != nil {
		return nil, err
	}
	if !v.AtLeast(2, 6) {
		return nil, fmt.Errorf("haproxy %s is too old: 2.6 or newer is needed", v.Raw)
	}
	for _, dir := range []string{o.ConfigDir, filepath.Join(o.ConfigDir, "maps")} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create config directory: %w", err)
		}
	}
	if err := os.MkdirAll(o.RuntimeDir, 0o700); err != nil {
		return nil, fmt.Errorf("create runtime directory: %w", err)
	}
	p := pathsFor(o)
	sb := newSandbox(o.Logger, prog, o.ConfigDir, o.RuntimeDir)
	if w := sb.Warning(); w != "" {
		o.Logger.Warn(w)
	}
	d := &Driver{
		sandbox:  sb,
		changed:  make(chan struct{}, 1),
		flushReq: make(chan struct{}, 1),
		opts:     o,
		log:      o.Logger,
		version:  v,
		paths:    p,
		rend:     newRenderer(o, p, v),
		cache:    &renderCache{},
		rt:       &socketRuntime{path: p.adminSock},
		master:   &masterSocket{path: p.masterSock},
		checker:  &programChecker{program: prog, sandbox: sb},
		now:      time.Now,
		rejected: map[string]rejection{},
	}
	d.log.Info("haproxy found", "program", prog, "version", v.Raw, "promex", v.Features["PROMEX"])
	return d, nil
}

func pathsFor(o Options) paths {
	return paths{
		config:     filepath.Join(o.ConfigDir, "haproxy.cfg"),
		mapsDir:    filepath.Join(o.ConfigDir, "maps"),
		masterSock: filepath.Join(o.RuntimeDir, "master.sock"),
		adminSock:  filepath.Join(o.RuntimeDir, "admin.sock"),
		pidFile:    filepath.Join(o.RuntimeDir, "haproxy.pid"),
	}
}

// checkedOptions fills in the defaults and checks the options.
func checkedOptions(o Options) (Options, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.HTTPBindPort == 0 {
		o.HTTPBindPort = 80
	}
	if o.IPv4BindAddress == "" {
		o.IPv4BindAddress = "0.0.0.0"
	}
	if o.IPv6BindAddress == "" {
		o.IPv6BindAddress = "::"
	}
	if o.StatsBindAddress == "" {
		o.StatsBindAddress = "127.0.0.1"
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 10 * time.Second
	}
	if o.ReloadTimeout <= 0 {
		o.ReloadTimeout = 30 * time.Second
	}
	if err := checkOptions(&o); err != nil {
		return o, err
	}
	return o, nil
}

func checkOptions(o *Options) error {
	if o.ConfigDir == "" || o.RuntimeDir == "" {
		return errors.New("haproxy: ConfigDir and RuntimeDir are required")
	}
	var err error
	if o.ConfigDir, err = filepath.Abs(o.ConfigDir); err != nil {
		return fmt.Errorf("config directory: %w", err)
	}
	if o.RuntimeDir, err = filepath.Abs(o.RuntimeDir); err != nil {
		return fmt.Errorf("runtime directory: %w", err)
	}
	// Both paths end up in haproxy.cfg and on the master's command line.
	for _, dir := range []string{o.ConfigDir, o.RuntimeDir} {
		if !safePath(dir) {
			return fmt.Errorf("haproxy: directory %q has characters haproxy.cfg cannot carry", dir)
		}
	}
	// sun_path is 108 bytes.
	if len(o.RuntimeDir)+len("/master.sock") >= 108 {
		return fmt.Errorf("haproxy: runtime directory %q is too long for a unix socket path", o.RuntimeDir)
	}
	for _, port := range []int{o.HTTPBindPort, o.StatsBindPort, o.HealthzBindPort} {
		if port < 0 || port > 65535 {
			return fmt.Errorf("haproxy: port %d out of range", port)
		}
	}
	if o.StatsBindPort != 0 && o.StatsBindPort == o.HealthzBindPort {
		return fmt.Errorf("haproxy: stats and healthz both on port %d", o.StatsBindPort)
	}
	if ip := net.ParseIP(o.IPv4BindAddress); ip == nil || ip.To4() == nil {
		return fmt.Errorf("haproxy: IPv4 bind address %q is not an IPv4 address", o.IPv4BindAddress)
	}
	if ip := net.ParseIP(o.IPv6BindAddress); ip == nil || ip.To4() != nil {
		return fmt.Errorf("haproxy: IPv6 bind address %q is not an IPv6 address", o.IPv6BindAddress)
	}
	if net.ParseIP(o.StatsBindAddress) == nil {
		return fmt.Errorf("haproxy: stats bind address %q is not an IP address", o.StatsBindAddress)
	}
	return nil
}

func findProgram(p string) (string, error) {
	if p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("haproxy program %q: %w", p, err)
		}
		return path, nil
	}
	if path, err := exec.LookPath("haproxy"); err == nil {
		return path, nil
	}
	if path, err := exec.LookPath("/usr/sbin/haproxy"); err == nil {
		return path, nil
	}
	return "", errors.New("haproxy program not found in PATH nor at /usr/sbin/haproxy")
}

// ConfigPath is the haproxy.cfg the Driver writes.
func (d *Driver) ConfigPath() string { return d.paths.config }

// Serving reports whether HAProxy runs a configuration that came from Apply.
func (d *Driver) Serving() bool { return d.serving.Load() }

// Changed is signalled when HAProxy stops or becomes ready, for a watcher
// that must react at once (the ingress address announcement).
func (d *Driver) Changed() <-chan struct{} { return d.changed }

func (d *Driver) signalChanged() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// Running reports whether a ready HAProxy runs, whatever its configuration.
func (d *Driver) Running() bool { return d.running.Load() }

// Adopted reports whether the running HAProxy was handed over by a previous
// daemon.
func (d *Driver) Adopted() bool { return d.running.Load() && d.adopted.Load() }
