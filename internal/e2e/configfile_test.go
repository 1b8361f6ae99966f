package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// notifySocket stands in for systemd: it collects what the daemon sends to
// $NOTIFY_SOCKET (sd_notify(3)).
type notifySocket struct {
	path string
	mu   sync.Mutex
	msgs []string
}

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	n := &notifySocket{path: filepath.Join(shortTempDir(t), "notify.sock")}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			k, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.msgs = append(n.msgs, string(buf[:k]))
			n.mu.Unlock()
		}
	}()
	return n
}

// since returns the messages from the i-th on.
func (n *notifySocket) since(i int) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if i > len(n.msgs) {
		return nil
	}
	return append([]string(nil), n.msgs[i:]...)
}

// await waits for a message from the i-th on that has every line of want,
// and returns the index of the one after it.
func (n *notifySocket) await(t *testing.T, i int, want ...string) int {
	t.Helper()
	next := -1
	testenv.Eventually(t, 20*time.Second, func() error {
		msgs := n.since(i)
		for j, m := range msgs {
			lines := strings.Split(m, "\n")
			ok := true
			for _, w := range want {
				found := false
				for _, l := range lines {
					found = found || l == w
				}
				ok = ok && found
			}
			if ok {
				next = i + j + 1
				return nil
			}
		}
		return fmt.Errorf("no sd_notify message with %q among %q", want, msgs)
	})
	return next
}

// TestConfigFile runs the daemon from a configuration file, as the package
// does, and reloads it with SIGHUP (systemctl reload): a live key changes
// what is served and the log level, a restart-only key is reported in the
// log and in STATUS=, and a broken file leaves everything as it was, saying
// why.
func TestConfigFile(t *testing.T) {
	e := newEnv(t)
	pods := e.pods("cf", 97, 2)
	app := e.service("app", nil, pods[0])
	e.service("fallback", nil, pods[1])
	e.ingress("app", nil, rule{host: "app.test", path: "/", service: "app"})

	notify := listenNotify(t)
	d := &daemon{
		t:          t,
		httpPort:   testenv.FreePort(t),
		ctrlPort:   testenv.FreePort(t),
		statsPort:  testenv.FreePort(t),
		configDir:  t.TempDir(),
		runtimeDir: shortTempDir(t),
		out:        &syncBuffer{},
		done:       make(chan struct{}),
	}
	path := filepath.Join(t.TempDir(), "perimeter.yaml")
	// The file's http-bind-port is not the one served: the command line's
	// --http-bind-port wins.
	base := fmt.Sprintf(`# perimeter.yaml of the test
kubeconfig: %s
program: /usr/sbin/haproxy
config-dir: %s
runtime-dir: %s
http-bind-port: %d
https-bind-port: %d
ipv4-bind-address: 127.0.0.1
disable-ipv6: true
stats-bind-port: %d
healthz-bind-port: 0
controller-port: %d
election-id: perimeter-%s
namespace-whitelist:
  - %s
sync-period: 100ms
`, e.c.DaemonKubeconfig, d.configDir, d.runtimeDir, testenv.FreePort(t), testenv.FreePort(t),
		d.statsPort, d.ctrlPort, e.ns, e.ns)
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(base + "log: info\n")

	d.cmd = exec.Command(perimeterBinary(t), "--config="+path, "--http-bind-port="+strconv.Itoa(d.httpPort))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			d.cmd.Env = append(d.cmd.Env, kv)
		}
	}
	d.cmd.Env = append(d.cmd.Env, "NOTIFY_SOCKET="+notify.path)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exitErr = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("daemon output:\n%s", tail(d.out.String(), 80))
			t.Logf("sd_notify messages: %q", notify.since(0))
		}
	})
	alive := func() {
		t.Helper()
		select {
		case <-d.done:
			t.Fatalf("daemon exited: %v\n%s", d.exitErr, tail(d.out.String(), 40))
		default:
		}
	}
	testenv.Eventually(t, 60*time.Second, func() error { alive(); return d.ready() })
	next := notify.await(t, 0, "READY=1", "STATUS=serving")
	d.expect("app.test", "/", 200, "cf-0")
	d.expect("nothing.test", "/", 404, "")
	if strings.Contains(d.out.String(), "level=DEBUG") {
		t.Fatalf("debug lines with log: info from the file:\n%s", tail(d.out.String(), 20))
	}

	// A changed file: log and default-backend-service apply live,
	// sync-period needs a restart.
	mark := len(d.out.String())
	write(strings.Replace(base, "sync-period: 100ms\n", "sync-period: 2s\n", 1) +
		"log: debug\ndefault-backend-service: " + e.ns + "/fallback\n")
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	next = notify.await(t, next, "RELOADING=1")
	next = notify.await(t, next, "READY=1", "STATUS=serving; needs a restart for: sync-period")
	d.expect("nothing.test", "/", 200, "cf-1")
	d.expect("app.test", "/", 200, "cf-0")
	reloadLog := d.out.String()[mark:]
	for _, want := range []string{"sync-period changed: needs a restart", "default-backend-service changed", "log changed"} {
		if !strings.Contains(reloadLog, want) {
			t.Errorf("log after the reload lacks %q", want)
		}
	}
	// Debug now: an endpoint change is logged at debug level.
	app.SetEndpoints(t, pods[0].Endpoint(), pods[1].Endpoint())
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(d.out.String()[mark:], `level=DEBUG msg="endpoints refreshed"`) {
			return fmt.Errorf("no debug line after log: debug")
		}
		return nil
	})
	app.SetEndpoints(t, pods[0].Endpoint())

	// A broken file: the daemon keeps serving with what it has and says
	// why, in the log and in STATUS=.
	mark = len(d.out.String())
	broken := strings.Replace(base, "sync-period: 100ms\n", "sync-period: 2s\n", 1) +
		"log: loud\ndefault-backend-service: " + e.ns + "/fallback\n"
	write(broken)
	line := strings.Count(broken[:strings.Index(broken, "log: loud")], "\n") + 1
	reason := fmt.Sprintf(`%s:%d: log: want debug, info, warn or error, got "loud"`, path, line)
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	next = notify.await(t, next, "RELOADING=1")
	notify.await(t, next, "READY=1", "STATUS=serving with the previous settings: "+reason)
	alive()
	testenv.Eventually(t, 10*time.Second, func() error {
		logged := d.out.String()[mark:]
		if !strings.Contains(logged, "level=ERROR") || !strings.Contains(logged, "err="+strconv.Quote(reason)) {
			return fmt.Errorf("the log does not say why the file was refused")
		}
		return nil
	})
	d.expect("nothing.test", "/", 200, "cf-1")
	d.expect("app.test", "/", 200, "cf-0")
	if err := d.ready(); err != nil {
		t.Fatalf("not ready after a refused reload: %v", err)
	}
}
