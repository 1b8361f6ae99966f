package nspawn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	linkRange = "198.19.96.0/24"
	podIP     = "198.18.96.10" // behind the machine, a static route
	appHost   = "app.nspawn.test"
	// A node's pod block, which the machine learns over BGP.
	podPool   = "198.18.97.0/24"
	nodeBlock = "198.18.97.0/26"
	nodePodIP = "198.18.97.10"
	nodeHost  = "node.nspawn.test"
	bgpAS     = 64512
)

// machine is the booted Debian machine with helpers for the test.
type machine struct {
	t *testing.T
	*testenv.Machine
}

// run runs a shell command in the machine and fails the test on error.
func (m *machine) run(script string) string {
	m.t.Helper()
	out, err := m.try(script)
	if err != nil {
		m.t.Fatal(err)
	}
	return out
}

func (m *machine) try(script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return m.Exec(ctx, nil, "/bin/sh", "-ec", script)
}

// write installs a file in the machine with owner and mode.
func (m *machine) write(path, owner, mode string, data []byte) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	user, group, _ := strings.Cut(owner, ":")
	if _, err := m.Exec(ctx, bytes.NewReader(data), "install", "-D", "-m", mode, "-o", user, "-g", group, "/dev/stdin", path); err != nil {
		m.t.Fatal(err)
	}
}

// show returns properties of the unit (systemctl show).
func (m *machine) show(props ...string) map[string]string {
	m.t.Helper()
	out := m.run("systemctl show perimeter.service -p " + strings.Join(props, ","))
	vals := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			vals[k] = v
		}
	}
	return vals
}

// journal returns the unit's journal of this boot.
func (m *machine) journal() string {
	m.t.Helper()
	return m.run("journalctl -b -u perimeter.service --no-pager -o cat")
}

func TestPackageUnderSystemd(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"systemd-nspawn", "debootstrap", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: apt-get install systemd-container debootstrap util-linux", tool)
		}
	}
	started := time.Now()
	phase := started
	var report []string
	note := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		line = fmt.Sprintf("%s (%.1fs)", line, time.Since(phase).Seconds())
		phase = time.Now()
		report = append(report, line)
		t.Log(line)
	}
	defer func() {
		if !t.Failed() {
			writeReport(t, append(report, fmt.Sprintf("total %.0fs", time.Since(started).Seconds())))
		}
	}()

	// The packages build while the machine boots and the cluster starts.
	debs := make(chan [2]string, 1)
	debErr := make(chan error, 1)
	var made []string
	built := make(chan struct{})
	t.Cleanup(func() {
		<-built // a test that failed early still removes what the build makes
		for _, f := range made {
			_ = os.Remove(f)
		}
	})
	go func() {
		defer close(built)
		pkgs, files, err := buildPackages()
		made = files
		if err != nil {
			debErr <- err
			return
		}
		debs <- pkgs
	}()
	rootReady := make(chan error, 1)
	go func() { _, err := testenv.DebianRoot(); rootReady <- err }()

	c := testenv.SharedCluster(t)
	testenv.GuardRoutes(t)
	ns := c.Namespace(t)
	if err := <-rootReady; err != nil {
		t.Fatal(err)
	}
	note("machine root ready, cluster up")

	mns := testenv.NewNetns(t, "machine")
	uplink := testenv.Veth(t, testenv.VethOptions{PeerNS: mns, PeerName: "host0", LinkRange: linkRange})
	m := &machine{t: t, Machine: testenv.BootMachine(t, testenv.MachineOptions{Netns: mns})}
	note("machine %s booted", m.Name)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := m.try("journalctl -b -u perimeter.service --no-pager -o short-precise | tail -n 60")
			t.Logf("journal of perimeter.service (end):\n%s", out)
		}
	})

	pod := testenv.StartPod(t, testenv.PodOptions{Name: "web-0", IP: podIP, LinkRange: linkRange, Parent: mns})
	c.CreateService(t, testenv.ServiceSpec{Namespace: ns, Name: "web", Endpoints: []testenv.Endpoint{pod.Endpoint()}})
	createIngress(t, c, ns, appHost, "web")

	// A Kubernetes node whose BIRD is configured the way calico-node
	// configures it for an external BGPPeer (the machine), with a pod in
	// its block: the machine reaches it only through the learned route.
	node := testenv.NewNetns(t, "node")
	if err := node.Sysctl("net/ipv4/ip_forward", "1"); err != nil {
		t.Fatal(err)
	}
	nodeLink := testenv.Veth(t, testenv.VethOptions{NS: mns, PeerNS: node, LinkRange: linkRange})
	edgeAddr, nodeAddr := nodeLink.Addr.Addr().String(), nodeLink.PeerAddr.Addr().String()
	nodePod := testenv.StartPod(t, testenv.PodOptions{Name: "node-web-0", IP: nodePodIP, LinkRange: linkRange, Parent: node})
	c.CreateService(t, testenv.ServiceSpec{Namespace: ns, Name: "node-web", Endpoints: []testenv.Endpoint{nodePod.Endpoint()}})
	createIngress(t, c, ns, nodeHost, "node-web")
	birdConf, err := testenv.CalicoBirdConfig(testenv.CalicoNode{
		Address: nodeAddr, AS: bgpAS, Pools: []string{podPool}, Blocks: []string{nodeBlock},
		Peers: []testenv.CalicoPeer{{Address: edgeAddr, AS: bgpAS}},
	})
	if err != nil {
		t.Fatal(err)
	}
	birdDir, err := os.MkdirTemp("", "pm-bird-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(birdDir) })
	if err := testenv.NewCalicoBird(t, node, birdDir, "node").Start(birdConf); err != nil {
		t.Fatal(err)
	}
	// The daemon's settings: the test's namespace only, fast syncs, and BGP
	// with the node. Learned routes stay when the daemon stops, so that the
	// purge has routes to remove.
	daemonConfig := func(logLevel string) string {
		return fmt.Sprintf(`# written by the nspawn end-to-end test
namespace-whitelist: %s
election-id: perimeter-%s
sync-period: 100ms
log: %s
bgp-local-as: %d
bgp-listen-address: %s
bgp-router-id: %s
bgp-peer: %s
pod-cidr: %s
bgp-keep-routes-on-exit: true
`, ns, ns, logLevel, bgpAS, edgeAddr, edgeAddr, nodeAddr, podPool)
	}
	machineURL := "http://" + uplink.PeerAddr.Addr().String() + "/"

	// The API server listens on loopback of this namespace; the machine
	// reaches it through a forwarder on the link, and checks its
	// certificate against the name the certificate carries.
	apiAddr := forwardAPI(t, uplink.Addr.Addr().String(), strings.TrimPrefix(c.Host, "https://"))
	kubeconfig := daemonKubeconfig(t, c, "https://"+apiAddr)

	var oldDeb, newDeb string
	select {
	case d := <-debs:
		oldDeb, newDeb = d[0], d[1]
	case err := <-debErr:
		t.Fatal(err)
	}
	note("packages %s, %s", filepath.Base(oldDeb), filepath.Base(newDeb))

	// Install: enabled, not started.
	install(t, m, oldDeb)
	if st := m.show("UnitFileState", "ActiveState"); st["UnitFileState"] != "enabled" || st["ActiveState"] != "inactive" {
		t.Fatalf("after install: %v, want enabled and inactive", st)
	}
	files := strings.Split(strings.TrimSpace(m.run("dpkg-query -L perimeter")), "\n")
	if out := m.run("stat -c '%a %U:%G' /etc/perimeter"); strings.TrimSpace(out) != "750 root:perimeter" {
		t.Errorf("/etc/perimeter: %s, want 750 root:perimeter", strings.TrimSpace(out))
	}
	note("installed %s: enabled, inactive", filepath.Base(oldDeb))

	m.write("/etc/perimeter/kubeconfig", "root:perimeter", "0640", kubeconfig)
	m.write("/etc/perimeter/perimeter.yaml", "root:perimeter", "0640", []byte(daemonConfig("info")))

	// READY means serving: the first request after `systemctl start`
	// returns is answered by the pod, without waiting.
	m.run("systemctl start perimeter.service")
	st := m.show("ActiveState", "SubState", "StatusText", "MainPID")
	if st["ActiveState"] != "active" || st["SubState"] != "running" {
		t.Fatalf("after start: %v", st)
	}
	if err := (&load{}).one(context.Background(), http.DefaultClient, machineURL, appHost, pod.Name); err != nil {
		t.Fatalf("first request right after READY: %v (status %q)", err, st["StatusText"])
	}
	note("started: %s/%s, status %q, first request served", st["ActiveState"], st["SubState"], st["StatusText"])
	m.run("pgrep -u perimeter -x haproxy >/dev/null")
	// HAProxy keeps CAP_NET_BIND_SERVICE (bit 10) and not the daemon's
	// CAP_NET_ADMIN (bit 12).
	for _, pid := range strings.Fields(m.run("pgrep -u perimeter -x haproxy")) {
		caps := m.run("grep -E '^Cap(Eff|Amb):' /proc/" + pid + "/status")
		for _, line := range strings.Split(strings.TrimSpace(caps), "\n") {
			f := strings.Fields(line)
			v, err := strconv.ParseUint(f[len(f)-1], 16, 64)
			if err != nil {
				t.Fatalf("HAProxy %s: %q: %v", pid, line, err)
			}
			if v&(1<<12) != 0 || v&(1<<10) == 0 {
				t.Errorf("HAProxy %s: %s, want CAP_NET_BIND_SERVICE and not CAP_NET_ADMIN", pid, line)
			}
		}
	}
	note("HAProxy runs with CAP_NET_BIND_SERVICE only")
	// The unit's sandbox denies system calls with EPERM rather than
	// killing: what HAProxy or the daemon were refused shows as warnings.
	j := m.journal()
	for _, bad := range []string{"not permitted", "FD limit", "Landlock", "sandbox"} {
		if strings.Contains(j, bad) {
			t.Errorf("the unit's sandbox refused something (%q in the journal):\n%s", bad, tail(j, 30))
			break
		}
	}

	// BGP in the sandbox: the speaker binds its port, learns the node's
	// block and installs it (CAP_NET_ADMIN); HAProxy reaches the node's pod
	// over it.
	testenv.Eventually(t, 60*time.Second, func() error {
		if out := m.run("ip -N route show " + nodeBlock + " proto 201"); !strings.Contains(out, "via "+nodeAddr) {
			return fmt.Errorf("no route to %s via %s of protocol 201 in the machine: %q", nodeBlock, nodeAddr, out)
		}
		return (&load{}).one(context.Background(), http.DefaultClient, machineURL, nodeHost, nodePod.Name)
	})
	note("BGP: %s learned from the node, its pod served", nodeBlock)

	security := m.run("systemd-analyze security --no-pager perimeter.service || true")
	t.Logf("systemd-analyze security perimeter.service:\n%s", security)
	for _, line := range strings.Split(security, "\n") {
		if strings.Contains(line, "Overall exposure level") {
			note("systemd-analyze security: %s", strings.TrimSpace(strings.TrimPrefix(line, "→")))
		}
	}

	l := startLoad(machineURL, appHost, pod.Name)
	defer l.stop()
	underLoad := func(what string, action func()) {
		t.Helper()
		if err := l.wait(200, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		ok0, failed0 := l.ok.Load(), l.failed.Load()
		master := m.haproxyMaster()
		action()
		if err := l.wait(300, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		// The daemon changed hands; HAProxy did not stop.
		if now := m.haproxyMaster(); now != master {
			t.Errorf("%s: HAProxy master %s replaced by %s, want it adopted", what, master, now)
		}
		ok, failed := l.ok.Load()-ok0, l.failed.Load()-failed0
		note("%s under load: %d requests, %d failed", what, ok+failed, failed)
		if failed > 0 {
			_, _, errs := l.stop()
			t.Fatalf("%s: %d of %d requests failed; first: %s\njournal:\n%s", what, failed, ok+failed, strings.Join(errs, "\n"), tail(m.journal(), 40))
		}
	}

	// Restart: a hand-over, the new daemon adopts the running HAProxy.
	pid0 := st["MainPID"]
	underLoad("systemctl restart", func() {
		m.run("systemctl restart perimeter.service")
		if st := m.show("ActiveState", "MainPID"); st["ActiveState"] != "active" || st["MainPID"] == pid0 {
			t.Fatalf("after restart: %v (MainPID before %s)", st, pid0)
		}
	})

	// Upgrade: the new package's maintainer scripts hand over the same way.
	underLoad("upgrade to "+filepath.Base(newDeb), func() {
		pid := m.show("MainPID")["MainPID"]
		install(t, m, newDeb)
		st := m.show("ActiveState", "MainPID")
		if st["ActiveState"] != "active" || st["MainPID"] == pid {
			t.Fatalf("after upgrade: %v (MainPID before %s), want a restarted daemon", st, pid)
		}
		if v, want := m.run("dpkg-query -W -f '${Version}' perimeter"), debVersion(t, newDeb); v != want {
			t.Fatalf("installed version %q after upgrade, want %q", v, want)
		}
	})

	// Reload: a changed file is applied, a broken one is refused and the
	// daemon keeps running with what it had.
	underLoad("systemctl reload (changed, then broken file)", func() {
		m.write("/etc/perimeter/perimeter.yaml", "root:perimeter", "0640", []byte(daemonConfig("debug")))
		m.run("systemctl reload perimeter.service")
		testenv.Eventually(t, 20*time.Second, func() error {
			if j := m.journal(); !strings.Contains(j, "log changed") || !strings.Contains(j, "configuration reloaded") {
				return fmt.Errorf("the journal does not show the changed log level:\n%s", tail(j, 10))
			}
			if st := m.show("StatusText"); st["StatusText"] != "serving" {
				return fmt.Errorf("status after a changed file: %q", st["StatusText"])
			}
			return nil
		})
		m.write("/etc/perimeter/perimeter.yaml", "root:perimeter", "0640", []byte(strings.Replace(daemonConfig("debug"), "sync-period: 100ms", "sync-period: soon", 1)))
		m.run("systemctl reload perimeter.service")
		testenv.Eventually(t, 20*time.Second, func() error {
			st := m.show("StatusText", "ActiveState")
			if st["ActiveState"] != "active" || !strings.Contains(st["StatusText"], "/etc/perimeter/perimeter.yaml:") {
				return fmt.Errorf("after a broken file: %v", st)
			}
			if j := m.journal(); !strings.Contains(j, "configuration file refused") {
				return fmt.Errorf("the journal does not show the refused file:\n%s", tail(j, 10))
			}
			return nil
		})
		t.Logf("a broken file: %s", m.show("StatusText")["StatusText"])
		m.write("/etc/perimeter/perimeter.yaml", "root:perimeter", "0640", []byte(daemonConfig("info")))
		m.run("systemctl reload perimeter.service")
		testenv.Eventually(t, 20*time.Second, func() error {
			if st := m.show("StatusText"); st["StatusText"] != "serving" {
				return fmt.Errorf("status after the file was fixed: %q", st["StatusText"])
			}
			return nil
		})
	})

	// Watchdog: a frozen daemon is killed and started again by systemd while
	// HAProxy, which it left running, keeps serving.
	m.write("/etc/systemd/system/perimeter.service.d/watchdog.conf", "root:root", "0644",
		[]byte("[Service]\nWatchdogSec=5s\n"))
	m.run("systemctl daemon-reload && systemctl restart perimeter.service")
	underLoad("watchdog (daemon frozen with SIGSTOP)", func() {
		st := m.show("MainPID", "NRestarts")
		m.run("kill -STOP " + st["MainPID"])
		frozen := time.Now()
		testenv.Eventually(t, 90*time.Second, func() error {
			now := m.show("MainPID", "NRestarts", "ActiveState", "SubState")
			if now["NRestarts"] == st["NRestarts"] || now["ActiveState"] != "active" || now["SubState"] != "running" {
				return fmt.Errorf("not restarted: %v (before %v)", now, st)
			}
			return nil
		})
		j := m.run("journalctl -b -u perimeter.service --no-pager -o short-precise | grep -E 'Watchdog|SIGABRT|SIGKILL|Main process exited|Scheduled restart|Started|Killing' || true")
		if !strings.Contains(j, "Watchdog timeout") {
			t.Errorf("journal does not show the watchdog timeout:\n%s", j)
		}
		t.Logf("systemd on the frozen daemon:\n%s", tail(j, 8))
		t.Logf("restarted by the watchdog %.1fs after SIGSTOP", time.Since(frozen).Seconds())
	})
	m.run("rm -r /etc/systemd/system/perimeter.service.d && systemctl daemon-reload")

	ok, failed, errs := l.stop()
	if failed > 0 {
		t.Fatalf("%d of %d requests failed: %s", failed, ok+failed, strings.Join(errs, "\n"))
	}

	// Stop takes HAProxy along.
	m.run("systemctl stop perimeter.service")
	if out := m.run("pgrep -a -u perimeter || true; pgrep -a -x haproxy | grep /run/perimeter || true"); strings.TrimSpace(out) != "" {
		t.Fatalf("processes left after stop:\n%s", out)
	}
	if out := m.run("ip -N route show proto 201"); !strings.Contains(out, nodeBlock) {
		t.Fatalf("bgp-keep-routes-on-exit: no route of protocol 201 left after stop: %q", out)
	}
	note("stopped: no HAProxy left, learned routes kept (bgp-keep-routes-on-exit)")

	// Purge leaves nothing behind: no file of the package (a directory only
	// if another package owns it), no state, user or route.
	m.run("apt-get purge -y -q perimeter")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	left, err := m.Exec(ctx, strings.NewReader(strings.Join(append(files, "/etc/perimeter", "/var/lib/perimeter", "/run/perimeter"), "\n")+"\n"),
		"/bin/sh", "-c", `while read -r f; do
	if [ -d "$f" ]; then dpkg-query -S "$f" >/dev/null 2>&1 || echo "$f"
	elif [ -e "$f" ] || [ -L "$f" ]; then echo "$f"; fi
done`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(left) != "" {
		t.Errorf("left after purge:\n%s", left)
	}
	for _, db := range []string{"passwd", "group"} {
		if out, err := m.try("getent " + db + " perimeter"); err == nil {
			t.Errorf("%s entry left after purge: %s", db, out)
		}
	}
	if out := m.run("ip route show table all proto 201; ip -6 route show table all proto 201"); strings.TrimSpace(out) != "" {
		t.Errorf("routes of protocol 201 left after purge:\n%s", out)
	}
	note("purged: no file, user or route left")
}

// haproxyMaster is the pid of the oldest HAProxy of the service's user: the
// master.
func (m *machine) haproxyMaster() string {
	m.t.Helper()
	return strings.TrimSpace(m.run("pgrep -o -u perimeter -x haproxy"))
}

// install installs a package file the way a user does, with apt resolving
// its dependencies, unattended: a configuration file the admin changed is
// kept, as automation installing upgrades does.
func install(t *testing.T, m *machine, deb string) {
	t.Helper()
	data, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	in := "/root/" + filepath.Base(deb)
	m.write(in, "root:root", "0644", data)
	m.run("cd /root && apt-get install -y -q --no-install-recommends " +
		"-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold ./" + filepath.Base(deb))
}

func createIngress(t *testing.T, c *testenv.Cluster, ns, host, service string) {
	t.Helper()
	pt := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: ns},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
			Host: host,
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
				Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &pt, Backend: networkingv1.IngressBackend{
					Service: &networkingv1.IngressServiceBackend{Name: service, Port: networkingv1.ServiceBackendPort{Number: 80}},
				}}},
			}},
		}}},
	}
	if _, err := c.Admin.NetworkingV1().Ingresses(ns).Create(context.Background(), ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// daemonKubeconfig is the least-privilege identity of packaging/rbac.yaml,
// with the API server at server and the certificate checked for the name
// it was issued to.
func daemonKubeconfig(t *testing.T, c *testenv.Cluster, server string) []byte {
	t.Helper()
	tc := c.DaemonConfig.TLSClientConfig
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: tc.CAData, TLSServerName: "localhost"}
	cfg.AuthInfos["perimeter"] = &clientcmdapi.AuthInfo{ClientCertificateData: tc.CertData, ClientKeyData: tc.KeyData}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "perimeter"}
	cfg.CurrentContext = "testenv"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// forwardAPI listens on addr (port chosen by the kernel) and copies each
// connection to target; it returns the address it listens on.
func forwardAPI(t *testing.T, addr, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp4", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = true
		} else {
			delete(conns, c)
		}
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			track(in, true)
			track(out, true)
			wg.Add(2)
			for _, pair := range [][2]net.Conn{{in, out}, {out, in}} {
				go func(dst, src net.Conn) {
					defer wg.Done()
					_, _ = io.Copy(dst, src)
					// Half-close so the other direction ends too.
					if tc, ok := dst.(*net.TCPConn); ok {
						_ = tc.CloseWrite()
					}
					track(src, false)
				}(pair[0], pair[1])
			}
		}
	}()
	return ln.Addr().String()
}

// buildPackages builds two packages with `make package`, the second with a
// higher version, for the install and the upgrade, and returns them and
// every file `make package` made (to remove: they are the test's, not a
// release's).
func buildPackages() (debs [2]string, made []string, err error) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return debs, nil, err
	}
	out := &debs
	for i, v := range []string{"0.0.0+nspawn1", "0.0.0+nspawn2"} {
		cmd := exec.Command("make", "--no-print-directory", "package", "VERSION="+v)
		cmd.Dir = root
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		err := cmd.Run()
		// The Debian revision is the packaging's business: take the files
		// `make package` says it made.
		for _, line := range strings.Fields(buf.String()) {
			if strings.HasPrefix(line, "dist/perimeter") && strings.Contains(line, v) {
				made = append(made, filepath.Join(root, line))
				if strings.HasSuffix(line, ".deb") {
					out[i] = filepath.Join(root, line)
				}
			}
		}
		if err != nil {
			return debs, made, fmt.Errorf("make package VERSION=%s: %w\n%s", v, err, buf.String())
		}
		if out[i] == "" {
			return debs, made, fmt.Errorf("make package VERSION=%s named no .deb:\n%s", v, buf.String())
		}
		if _, err := os.Stat(out[i]); err != nil {
			return debs, made, fmt.Errorf("make package VERSION=%s: %w", v, err)
		}
	}
	return debs, made, nil
}

// debVersion reads the package's version from the file.
func debVersion(t *testing.T, deb string) string {
	t.Helper()
	out, err := exec.Command("dpkg-deb", "--field", deb, "Version").Output()
	if err != nil {
		t.Fatalf("dpkg-deb --field %s Version: %v", deb, err)
	}
	return strings.TrimSpace(string(out))
}

// writeReport puts the measured numbers where `make test` prints them
// ($PERIMETER_TEST_REPORT): the output of a passing package is not shown.
// Appended in one write, so reports of packages running at once do not mix.
func writeReport(t *testing.T, lines []string) {
	text := "nspawn end-to-end (Debian 12 under systemd, the .deb of make package):\n  " + strings.Join(lines, "\n  ") + "\n"
	t.Log(text)
	path := os.Getenv("PERIMETER_TEST_REPORT")
	if path == "" {
		return
	}
	err := os.MkdirAll(filepath.Dir(path), 0o755)
	if err == nil {
		var f *os.File
		if f, err = os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, err = f.WriteString(text)
			err = errors.Join(err, f.Close())
		}
	}
	if err != nil {
		t.Error(err)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
