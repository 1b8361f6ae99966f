package e2e

// The same router test with Debian's FRR 8.4 (zebra and bgpd) in place of
// BIRD: the configuration docs/ha.md shows.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

var frrBGP = template.Must(template.New("frr").Parse(`frr defaults datacenter
hostname router
log file {{.Dir}}/bgpd.log debugging
router bgp {{.RouterAS}}
 bgp router-id {{.RouterID}}
 bgp graceful-restart
 bgp bestpath as-path multipath-relax
 neighbor EDGES peer-group
 neighbor EDGES remote-as {{.EdgeAS}}
 neighbor EDGES timers 1 {{.Hold}}
 neighbor EDGES passive
{{- range .Edges}}
 neighbor {{.}} peer-group EDGES
{{- end}}
 address-family ipv4 unicast
  maximum-paths 8
  neighbor EDGES route-map EDGE-IN in
  neighbor EDGES route-map DENY out
 exit-address-family
exit
ip prefix-list ANNOUNCE seq 5 permit {{.Announce}}
route-map EDGE-IN permit 10
 match ip address prefix-list ANNOUNCE
exit
route-map DENY deny 10
exit
`))

// frrRouter runs zebra and bgpd in the router namespace, with every path
// in dir.
type frrRouter struct {
	dir   string
	procs []*exec.Cmd
}

func requireFRR(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t)
	for _, bin := range []string{"/usr/lib/frr/zebra", "/usr/lib/frr/bgpd", "vtysh"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("needs %s (apt-get install frr)", bin)
		}
	}
}

func (l *haLab) startFRR() *frrRouter {
	t := l.e.t
	t.Helper()
	requireFRR(t)
	// The daemons drop to Debian's frr user: their directory is its.
	f := &frrRouter{dir: filepath.Join(l.dir, "frr")}
	u, err := user.Lookup("frr")
	if err != nil {
		t.Fatalf("frr user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// Traversable, not listable, for the frr user.
	if err := os.Chmod(l.dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(f.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f.dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	var edges []string
	for _, ed := range l.edges {
		edges = append(edges, ed.addr)
	}
	var b bytes.Buffer
	if err := frrBGP.Execute(&b, map[string]any{"Dir": f.dir, "RouterAS": haRouterAS, "RouterID": haRouterAddr, "EdgeAS": haEdgeAS,
		"Hold": int(haHoldTime.Seconds()), "Edges": edges, "Announce": haAnnounce + "/32"}); err != nil {
		t.Fatal(err)
	}
	bgpConf := filepath.Join(f.dir, "bgpd.conf")
	zebraConf := filepath.Join(f.dir, "zebra.conf")
	for name, data := range map[string][]byte{bgpConf: b.Bytes(), zebraConf: []byte("hostname router\n")} {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	zsock := filepath.Join(f.dir, "zserv.api")
	common := func(name string) []string {
		return []string{"--vty_socket", f.dir, "-i", filepath.Join(f.dir, name+".pid"),
			"-z", zsock, "-P", "0", "--log", "file:" + filepath.Join(f.dir, name+".out")}
	}
	start := func(args ...string) {
		cmd := l.router.Command(context.Background(), args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, err := os.Create(filepath.Join(f.dir, filepath.Base(args[0])+".stdout"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = cmd.Wait(); out.Close() }()
		f.procs = append(f.procs, cmd)
	}
	t.Cleanup(func() {
		for i := len(f.procs) - 1; i >= 0; i-- {
			_ = f.procs[i].Process.Kill()
		}
		if t.Failed() {
			for _, n := range []string{"zebra.out", "bgpd.out", "bgpd.log", "zebra.stdout", "bgpd.stdout"} {
				b, _ := os.ReadFile(filepath.Join(f.dir, n))
				t.Logf("FRR %s:\n%s", n, tail(string(b), 20))
			}
		}
	})
	start(append([]string{"/usr/lib/frr/zebra", "-f", zebraConf}, common("zebra")...)...)
	testenv.Eventually(t, 10*time.Second, func() error { _, err := os.Stat(zsock); return err })
	start(append([]string{"/usr/lib/frr/bgpd", "-f", bgpConf}, common("bgpd")...)...)
	testenv.Eventually(t, 10*time.Second, func() error {
		_, err := f.vtysh("show bgp summary")
		return err
	})
	return f
}

func (f *frrRouter) vtysh(cmd string) (string, error) {
	out, err := exec.Command("vtysh", "--vty_socket", f.dir, "-c", cmd).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("vtysh %q: %w: %s", cmd, err, out)
	}
	return string(out), nil
}

// TestHAWithFRR: with FRR as the router, both edges announce and take
// flows, a graceful stop fails no request outside the rehash, and a
// rolling hand-over restart keeps the address routed to both.
func TestHAWithFRR(t *testing.T) {
	e := newEnv(t)
	l := newHALabRouter(e, 2, "frr")
	pods := l.pods("ha", 2)
	e.service("web", nil, pods...)
	e.ingress("web", nil, rule{host: haHost, path: "/", service: "web"})
	for _, ed := range l.edges {
		ed.start()
	}
	l.waitNextHops(30*time.Second, l.edges...)
	if got, err := l.frr.routes(); err != nil || !slices.Equal(got, l.addrs(l.edges...)) {
		t.Fatalf("FRR routes %s via %v (%v), want both edges", haAnnounce, got, err)
	}
	before := []int{l.edges[0].requests(), l.edges[1].requests()}
	load := l.startLoad(haHost, haFresh, 0)
	load.waitSent(t, 400)
	load.finish()
	for i, ed := range l.edges {
		if ed.requests() <= before[i] {
			t.Errorf("edge %d took no flow behind FRR", i)
		}
	}
	g := haGraceful(t, l)
	t.Logf("FRR, %s", g)
	if g.stopFailed > 0 || g.returnFailed > haClients {
		t.Fatalf("graceful stop behind FRR: %d failed during the stop, %d when the edge came back: %v", g.stopFailed, g.returnFailed, g.errs)
	}
	rf, rs, gaps := haRolling(t, l)
	t.Logf("FRR, rolling hand-over: %d requests, %d failed", rs, rf)
	if rf > 0 || len(gaps) > 0 {
		t.Fatalf("rolling hand-over behind FRR: %d failed, withdrawn: %v", rf, gaps)
	}
}

// routes reads from FRR's RIB which edges the announce address is routed to.
func (f *frrRouter) routes() ([]string, error) {
	out, err := f.vtysh("show ip route " + haAnnounce + "/32 json")
	if err != nil {
		return nil, err
	}
	var rib map[string][]struct {
		Selected bool `json:"selected"`
		Nexthops []struct {
			IP     string `json:"ip"`
			Active bool   `json:"active"`
		} `json:"nexthops"`
	}
	if err := json.Unmarshal([]byte(out), &rib); err != nil {
		return nil, fmt.Errorf("%w: %s", err, out)
	}
	var via []string
	for _, r := range rib[haAnnounce+"/32"] {
		if !r.Selected {
			continue
		}
		for _, nh := range r.Nexthops {
			if nh.Active {
				via = append(via, nh.IP)
			}
		}
	}
	slices.Sort(via)
	return via, nil
}
