package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"
)

// Bird is a BIRD 2 daemon in a network namespace: the test bed's stand-in
// for calico-node's BGP speaker. The BGP tests, the end-to-end tests and
// `make lab` all run their nodes through it.
type Bird struct {
	Name string
	NS   *Netns
	Conf string // configuration file
	Ctl  string // control socket, for birdc
	Log  string // what BIRD prints

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// RequireBird fails the test when BIRD 2 is missing (root and not -short
// are required first): CI installs it, so a missing one is a broken machine,
// not a reason to skip.
func RequireBird(tb testing.TB) {
	tb.Helper()
	RequireRoot(tb)
	for _, bin := range []string{"bird", "birdc"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Fatalf("needs %s (apt-get install bird2)", bin)
		}
	}
}

// NewBird prepares a BIRD named name in ns, with its files in dir (which must
// be short: the control socket path is limited to 107 bytes). Start runs it;
// the test's end kills it and, when the test failed, logs its last lines.
func NewBird(tb testing.TB, ns *Netns, dir, name string) *Bird {
	tb.Helper()
	RequireBird(tb)
	b := newBird(ns, dir, name)
	tb.Cleanup(func() {
		b.Stop(syscall.SIGKILL)
		if tb.Failed() {
			tb.Logf("BIRD %s (tail):\n%s", name, tailFile(b.Log, 30))
		}
	})
	return b
}

func newBird(ns *Netns, dir, name string) *Bird {
	return &Bird{Name: name, NS: ns,
		Conf: filepath.Join(dir, name+".conf"),
		Ctl:  filepath.Join(dir, name+".ctl"),
		Log:  filepath.Join(dir, name+".log")}
}

// NewBirdCtx is NewBird for programs: the caller must Stop it.
func NewBirdCtx(ns *Netns, dir, name string) *Bird { return newBird(ns, dir, name) }

// Start writes conf and runs BIRD until it answers on its control socket.
func (b *Bird) Start(conf string) error {
	if err := os.WriteFile(b.Conf, []byte(conf), 0o600); err != nil {
		return err
	}
	logf, err := os.OpenFile(b.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := b.NS.Command(context.Background(), "bird", "-f", "-c", b.Conf, "-s", b.Ctl)
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the test binary dies before its cleanups, BIRD dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start bird %s: %w", b.Name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	b.mu.Lock()
	b.cmd, b.exited = cmd, exited
	b.mu.Unlock()
	var died error
	err = Poll(context.Background(), 10*time.Second, func() error {
		select {
		case <-exited:
			died = fmt.Errorf("bird %s exited at start:\n%s", b.Name, tailFile(b.Log, 20))
			return nil // waiting cannot help
		default:
		}
		_, err := b.Birdc("show", "status")
		return err
	})
	if died != nil {
		return died
	}
	return err
}

// Birdc runs a birdc command against this BIRD.
func (b *Bird) Birdc(args ...string) (string, error) {
	out, err := exec.Command("birdc", append([]string{"-s", b.Ctl}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("birdc %s on %s: %w: %s", strings.Join(args, " "), b.Name, err, out)
	}
	return string(out), nil
}

// Reconfigure writes conf and makes the running BIRD load it.
func (b *Bird) Reconfigure(conf string) error {
	if err := os.WriteFile(b.Conf, []byte(conf), 0o600); err != nil {
		return err
	}
	_, err := b.Birdc("configure")
	return err
}

// Signal sends sig to BIRD; SIGSTOP and SIGCONT freeze and thaw it.
func (b *Bird) Signal(sig syscall.Signal) {
	b.mu.Lock()
	cmd := b.cmd
	b.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// Stop signals BIRD and waits until it has exited: SIGTERM sends Cease to its
// peers (a node shut down), SIGKILL just drops the sessions (a crash).
func (b *Bird) Stop(sig syscall.Signal) {
	b.mu.Lock()
	cmd, exited := b.cmd, b.exited
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(sig)
	_ = cmd.Process.Signal(syscall.SIGCONT) // a frozen BIRD cannot act on sig
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Running reports whether BIRD is running.
func (b *Bird) Running() bool {
	b.mu.Lock()
	exited := b.exited
	b.mu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// CalicoNode describes one calico-node for CalicoBirdConfig: the values
// Calico's confd feeds its BIRD templates (bird.cfg, bird_aggr.cfg,
// bird_ipam.cfg) for a node in BGP mode.
type CalicoNode struct {
	Address string   // the node's IPv4 address: router id, source address, next hop
	AS      uint32   // BGPConfiguration asNumber (default 64512)
	Pools   []string // IPPool CIDRs in BGP mode
	Blocks  []string // the node's confirmed BlockAffinities: exported as blackholes
	Mesh    []string // the other nodes, when nodeToNodeMeshEnabled
	Peers   []CalicoPeer
	Log     string // log file; "" logs to stderr
}

// CalicoPeer is a BGPPeer that selects the node (an external peer: the edge).
type CalicoPeer struct {
	Address  string
	Port     int // 0: 179
	AS       uint32
	Password string
}

// CalicoBirdConfig renders a node's BIRD configuration the way calico-node
// does, translated to BIRD 2 syntax (Calico runs its BIRD 1.6 fork): kernel
// routes learned, one blackhole per affine block, /32s inside its own blocks
// kept local, the mesh passive on one side, external peers multihop from the
// node's address, and everything inside a pool exported.
func CalicoBirdConfig(n CalicoNode) (string, error) {
	if n.AS == 0 {
		n.AS = 64512
	}
	var b bytes.Buffer
	err := calicoBird.Execute(&b, map[string]any{"N": n, "MeshPeers": meshPeers(n)})
	return b.String(), err
}

type meshPeer struct {
	Name, Address string
	Passive       bool
}

// meshPeers: like confd, the node with the higher address is passive, so
// each pair has one session.
func meshPeers(n CalicoNode) []meshPeer {
	var out []meshPeer
	for _, m := range n.Mesh {
		if m == n.Address {
			continue
		}
		out = append(out, meshPeer{Name: "Mesh_" + strings.NewReplacer(".", "_", ":", "_").Replace(m), Address: m,
			Passive: ipLess(m, n.Address)})
	}
	return out
}

func ipLess(a, b string) bool {
	pa, errA := netip.ParseAddr(a)
	pb, errB := netip.ParseAddr(b)
	if errA != nil || errB != nil {
		return a < b
	}
	return pa.Less(pb)
}

var calicoBird = template.Must(template.New("calico").Funcs(template.FuncMap{
	"proto": func(s string) string { return strings.NewReplacer(".", "_", ":", "_").Replace(s) },
}).Parse(`# Rendered like calico-node's confd templates (BGP mode), for BIRD 2.
router id {{.N.Address}};
{{- if .N.Log}}
log "{{.N.Log}}" all;
{{- else}}
log stderr all;
{{- end}}

function calico_aggr() {
{{- range .N.Blocks}}
	# Block {{.}} is confirmed
	if ( net = {{.}} ) then { accept; }
	if ( net ~ {{.}} ) then { reject; }
{{- end}}
}

function calico_export_to_bgp_peers() {
	calico_aggr();
{{- range .N.Pools}}
	if ( net ~ {{.}} ) then { accept; }
{{- end}}
	reject;
}

protocol device { scan time 2; }

protocol direct { ipv4; interface -"cali*", "*"; }

protocol kernel {
	learn;
	persist;
	scan time 2;
	graceful restart;
	merge paths on;
	ipv4 { import all; export all; };
}

protocol static blocks {
	ipv4;
{{- range .N.Blocks}}
	route {{.}} blackhole;
{{- end}}
}

template bgp bgp_template {
	local as {{.N.AS}};
	graceful restart;
	connect delay time 2;
	connect retry time 5;
	error wait time 5, 30;
}
{{range .MeshPeers}}
protocol bgp {{.Name}} from bgp_template {
	neighbor {{.Address}} as {{$.N.AS}};
	source address {{$.N.Address}};
{{- if .Passive}}
	passive on;
{{- end}}
	ipv4 { gateway recursive; add paths on; import all; export filter { calico_export_to_bgp_peers(); }; };
}
{{end}}
{{- range .N.Peers}}
protocol bgp Global_{{proto .Address}} from bgp_template {
	multihop;
	neighbor {{.Address}}{{if .Port}} port {{.Port}}{{end}} as {{.AS}};
	source address {{$.N.Address}};
{{- if .Password}}
	password "{{.Password}}";
{{- end}}
	ipv4 { gateway recursive; add paths on; import all; export filter { calico_export_to_bgp_peers(); }; };
}
{{end}}`))
