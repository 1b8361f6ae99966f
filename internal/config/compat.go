package config

import (
	"flag"
	"sort"
	"time"
)

// Flags of the HAProxy Kubernetes Ingress Controller (v1.10 and 3.x) that
// Perimeter accepts so that a unit or manifest written for it starts
// unchanged. Those that apply are implemented (publish-service,
// configmap-patternfiles, disable-config-snippets, cache-resync-period,
// pprof); the others are
// flag-only and logged at start as having no effect, with why.

// noEffect is every accepted flag that changes nothing here, with the
// reason the log line and the reference give.
var noEffect = map[string]string{
	"t":                                    "the peer's test mode runs echo instead of HAProxy; Perimeter always runs and checks the real HAProxy",
	"prometheus":                           "the daemon's /metrics is always served on the controller port",
	"default-backend-port":                 "unmatched requests get HAProxy's built-in 404 (or --default-backend-service); no extra listener is opened",
	"localpeer-port":                       "no peers section: stick tables are not shared between edges",
	"channel-size":                         "changes are coalesced, there is no event channel to size",
	"initial-sync-period":                  "the first configuration is applied as soon as the caches are synced",
	"http-bind-thread":                     "binds are served by every HAProxy thread",
	"https-bind-thread":                    "binds are served by every HAProxy thread",
	"healthz-bind-thread":                  "binds are served by every HAProxy thread",
	"stats-bind-thread":                    "binds are served by every HAProxy thread",
	"gateway-controller-name":              "the Gateway API is not implemented",
	"disable-quic":                         "QUIC is never configured (HAProxy 2.6)",
	"quic-bind-port":                       "QUIC needs HAProxy 2.8 or newer; Perimeter targets 2.6 and never configures it",
	"quic-announce-port":                   "QUIC needs HAProxy 2.8 or newer; Perimeter targets 2.6 and never configures it",
	"disable-writing-only-if-reload":       "files are written whenever their content changes, reload or not",
	"with-s6-overlay":                      "the daemon starts and reloads HAProxy itself (master-worker, under systemd)",
	"with-pebble":                          "the daemon starts and reloads HAProxy itself (master-worker, under systemd)",
	"with-gopherd":                         "the daemon starts and reloads HAProxy itself (master-worker, under systemd)",
	"experimental":                         "no experimental features (use-ingress-merge: each Ingress keeps its own rules)",
	"custom-validation-rules":              "custom annotations and their ValidationRules resources are not supported",
	"enable-custom-annotations-on-ingress": "custom annotations are not supported",
}

// jobModes are the peer's one-shot modes: the daemon ends at once instead
// of serving (cmd/perimeter).
var jobModes = map[string]bool{"job-check-crd": true, "input-file": true, "output-file": true}

// compatFlags holds the values of the no-effect flags: parsed so that the
// peer's command lines are accepted, and otherwise unread.
type compatFlags struct {
	test, prometheus, disableQUIC, disableWritingOnlyIfReload bool
	s6, pebble, gopherd, customOnIngress                      bool
	jobCheckCRD                                               bool
	defaultBackendPort, localPeerPort, channelSize            int
	quicBindPort, quicAnnouncePort                            int
	initialSync                                               time.Duration
	httpThread, httpsThread, healthzThread, statsThread       string
	gatewayController, experimental, customRules              string
	inputFile, outputFile                                     string
}

func (c *Config) compatFlagSet(fs *flag.FlagSet) {
	p := &c.compat
	fs.BoolVar(&c.External, "e", true, "")
	fs.BoolVar(&c.Version, "v", false, "")
	fs.BoolVar(&c.Pprof, "p", false, "")
	fs.BoolVar(&p.test, "t", false, "the peer's test mode")
	fs.BoolVar(&p.prometheus, "prometheus", false, "the peer's switch for the controller's /metrics")
	fs.IntVar(&p.defaultBackendPort, "default-backend-port", 6061, "the peer's local default backend port")
	fs.IntVar(&p.localPeerPort, "localpeer-port", 10000, "the peer's HAProxy peers port")
	fs.IntVar(&p.channelSize, "channel-size", 600, "the peer's event channel size")
	fs.DurationVar(&p.initialSync, "initial-sync-period", 0, "the peer's delay of the first sync")
	fs.StringVar(&p.httpThread, "http-bind-thread", "", "the peer's thread range of the HTTP bind")
	fs.StringVar(&p.httpsThread, "https-bind-thread", "", "the peer's thread range of the HTTPS bind")
	fs.StringVar(&p.healthzThread, "healthz-bind-thread", "", "the peer's thread range of the healthz bind")
	fs.StringVar(&p.statsThread, "stats-bind-thread", "", "the peer's thread range of the stats bind")
	fs.StringVar(&p.gatewayController, "gateway-controller-name", "", "the peer's Gateway API controller name")
	fs.BoolVar(&p.disableQUIC, "disable-quic", false, "the peer's switch to turn QUIC off")
	fs.IntVar(&p.quicBindPort, "quic-bind-port", 0, "the peer's QUIC port")
	fs.IntVar(&p.quicAnnouncePort, "quic-announce-port", 0, "the peer's QUIC port in alt-svc")
	fs.BoolVar(&p.disableWritingOnlyIfReload, "disable-writing-only-if-reload", false, "the peer's switch for delayed file writes")
	fs.BoolVar(&p.s6, "with-s6-overlay", false, "the peer's s6 process control")
	fs.BoolVar(&p.pebble, "with-pebble", false, "the peer's pebble process control")
	fs.BoolVar(&p.gopherd, "with-gopherd", false, "the peer's gopherd process control")
	fs.StringVar(&p.experimental, "experimental", "", "the peer's experimental features")
	fs.StringVar(&p.customRules, "custom-validation-rules", "", "the peer's ValidationRules resource, NAMESPACE/NAME")
	fs.BoolVar(&p.customOnIngress, "enable-custom-annotations-on-ingress", false, "the peer's switch for custom annotations on Ingresses")
	fs.BoolVar(&p.jobCheckCRD, "job-check-crd", false, "the peer's job mode installing its custom resource definitions: prints that there are none and exits 0")
	fs.StringVar(&p.inputFile, "input-file", "", "the peer's custom resource converter input: refused")
	fs.StringVar(&p.outputFile, "output-file", "", "the peer's custom resource converter output: refused")
}

// Notice is a flag given on the command line that has no effect, and why.
type Notice struct{ Flag, Reason string }

// NoEffect lists the flags of the command line that Perimeter accepts for
// compatibility and ignores, in name order, for the daemon to log.
func (s *Source) NoEffect() []Notice {
	var out []Notice
	for name := range s.set {
		if r, ok := noEffect[name]; ok {
			out = append(out, Notice{Flag: FlagSyntax(name), Reason: r})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Flag < out[j].Flag })
	return out
}

// JobCheckCRD reports --job-check-crd: the peer's one-shot job mode.
func (c *Config) JobCheckCRD() bool { return c.compat.jobCheckCRD }

// ConvertsCRD reports --input-file/--output-file: the peer's custom
// resource converter, which has nothing to convert here.
func (c *Config) ConvertsCRD() bool { return c.compat.inputFile != "" || c.compat.outputFile != "" }

// SnippetKinds are the config snippet kinds enabled: --config-snippets
// without those --disable-config-snippets names ("all" names every kind).
func (c *Config) SnippetKinds() []string {
	off := map[string]bool{}
	for _, k := range c.DisableConfigSnippets {
		off[k] = true
	}
	if off["all"] {
		return nil
	}
	var out []string
	for _, k := range c.ConfigSnippets {
		if !off[k] {
			out = append(out, k)
		}
	}
	return out
}

// FlagSyntax is how the command line writes a flag: -e for the peer's
// one-letter forms, --name for the others.
func FlagSyntax(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

const compatTitle = "Accepted from the HAProxy Kubernetes Ingress Controller, without effect"

// compatOrder is the order of the no-effect flags in the reference.
var compatOrder = []string{"t", "prometheus", "default-backend-port", "localpeer-port", "channel-size",
	"initial-sync-period", "http-bind-thread", "https-bind-thread", "healthz-bind-thread", "stats-bind-thread",
	"gateway-controller-name", "disable-quic", "quic-bind-port", "quic-announce-port", "disable-writing-only-if-reload",
	"with-s6-overlay", "with-pebble", "with-gopherd", "experimental", "custom-validation-rules",
	"enable-custom-annotations-on-ingress", "job-check-crd", "input-file", "output-file"}

// NoEffectReason says why a flag accepted from the peer changes nothing,
// or false when the flag does something (or does not exist).
func NoEffectReason(name string) (string, bool) {
	r, ok := noEffect[name]
	return r, ok
}
