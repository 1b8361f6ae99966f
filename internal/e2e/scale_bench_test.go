package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// BenchmarkScale runs the large-cluster scenario on the real stack: n
// Ingresses (one host each), n Services and 10n endpoints, then measures
// start-up, the endpoint, new-host and new-backend paths, memory, Ingress
// status and a reload under load. BENCH_SCALE=20000 (or "1000,50000") picks
// other sizes. The endpoints' addresses are spread over four pods that
// accept any address of their /20, so 100,000 endpoints need four servers.
func BenchmarkScale(b *testing.B) {
	sizes := []int{1000, 10000}
	if s := os.Getenv("BENCH_SCALE"); s != "" {
		sizes = nil
		for f := range strings.SplitSeq(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("BENCH_SCALE=%q: want sizes like 20000 or 1000,50000", s)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("ingresses=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				runScale(b, n)
			}
		})
	}
}

// servedPoll is how often a change is checked for while the clock runs:
// the change's own time is a few milliseconds, of which Converge's
// millisecond between two checks, and the timer's slack, were a third.
const servedPoll = 200 * time.Microsecond

const (
	scalePods      = 4
	scaleEndpoints = 10 // per Service
	scalePort      = 9090
)

// scalePod is a test pod that answers on every address of its /20 (an
// AnyIP local route), with X-Addr naming the address the request reached.
type scalePod struct {
	*testenv.Pod
	block netip.Prefix
}

func scaleAddr(pod, off int) string {
	base := netip.MustParseAddr("198.18.128.0").As4()
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(pod)<<12 + uint32(off)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
}

// endpointAddr spreads the endpoints of all Services over the pods'
// blocks; addresses repeat across Services beyond 16,000 endpoints, which
// HAProxy does not mind.
func endpointAddr(svc, ep int) string {
	g := svc*scaleEndpoints + ep
	return scaleAddr(g%scalePods, 2+(g/scalePods)%4000)
}

func startScalePods(b testing.TB) []*scalePod {
	var pods []*scalePod
	for k := 0; k < scalePods; k++ {
		p := testenv.StartPod(b, testenv.PodOptions{Name: fmt.Sprintf("scale-%d", k), IP: scaleAddr(k, 1)})
		sp := &scalePod{Pod: p, block: netip.PrefixFrom(netip.MustParseAddr(scaleAddr(k, 0)), 20)}
		if err := p.Netns.AnyIP(sp.block); err != nil {
			b.Fatal(err)
		}
		host, err := netlink.LinkByName(p.Link.Name)
		if err != nil {
			b.Fatal(err)
		}
		r := &netlink.Route{LinkIndex: host.Attrs().Index, Dst: ipNet(sp.block), Gw: net.IP(p.Link.PeerAddr.Addr().AsSlice())}
		if err := netlink.RouteAdd(r); err != nil {
			b.Fatalf("route %s: %v", sp.block, err)
		}
		b.Cleanup(func() { _ = netlink.RouteDel(r) })
		var ln net.Listener
		if err := p.Netns.Do(func() (err error) {
			ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", scalePort))
			return err
		}); err != nil {
			b.Fatal(err)
		}
		name := p.Name
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Pod", name)
			if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
				host, _, _ := net.SplitHostPort(a.String())
				w.Header().Set("X-Addr", host)
			}
			_, _ = w.Write([]byte(name))
		})}
		go func() { _ = srv.Serve(ln) }()
		b.Cleanup(func() { _ = srv.Close() })
		pods = append(pods, sp)
	}
	return pods
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// scaleIngress is one Ingress with one host routed to one Service.
func scaleIngress(ns, name, host, svc string) *networkingv1.Ingress {
	pt := networkingv1.PathTypePrefix
	return &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: host,
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &pt,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
					Name: svc, Port: networkingv1.ServiceBackendPort{Number: 80}}},
			}}}}}}},
	}
}

// scaleObjects creates Services s<i>, their slices and Ingresses s<i>
// (host s<i>.test) for i in [from, to), with parallel clients.
func (e *env) scaleObjects(ctx context.Context, from, to, endpoints int) error {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for w := 0; w < 32; w++ {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				if _, err := e.scaleService(ctx, i, endpoints); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (e *env) scaleService(ctx context.Context, i, endpoints int) (*testenv.Service, error) {
	name := fmt.Sprintf("s%d", i)
	eps := make([]testenv.Endpoint, endpoints)
	for j := range eps {
		eps[j] = testenv.Endpoint{IP: endpointAddr(i, j)}
	}
	svc, err := e.c.CreateServiceCtx(ctx, testenv.ServiceSpec{Namespace: e.ns, Name: name,
		Ports: []testenv.ServicePort{{TargetPort: scalePort}}, Endpoints: eps, Headless: true})
	if err != nil {
		return nil, err
	}
	_, err = e.c.Admin.NetworkingV1().Ingresses(e.ns).Create(ctx, scaleIngress(e.ns, name, name+".test", name), metav1.CreateOptions{})
	return svc, err
}

// scaleRow is one figure of the table.
type scaleRow struct {
	name, value string
}

func runScale(b *testing.B, n int) {
	e := newEnv(b)
	ctx := context.Background()
	startScalePods(b)
	var rows []scaleRow
	row := func(name, format string, args ...any) {
		rows = append(rows, scaleRow{name, fmt.Sprintf(format, args...)})
		fmt.Printf("scale %d: %s: %s\n", n, name, fmt.Sprintf(format, args...))
	}
	var nofile unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile)
	row("RLIMIT_NOFILE (as inherited)", "soft %d, hard %d", nofile.Cur, nofile.Max)

	start := time.Now()
	svc0, err := e.scaleService(ctx, 0, scaleEndpoints)
	if err != nil {
		b.Fatal(err)
	}
	if err := e.scaleObjects(ctx, 1, n, scaleEndpoints); err != nil {
		b.Fatal(err)
	}
	row("objects created", "%d Services, %d EndpointSlices (%d endpoints), %d Ingresses in %v",
		n, n, n*scaleEndpoints, n, time.Since(start).Round(time.Millisecond))

	// 100,000 TCP checks every 2 s would measure the four test pods, not
	// the edge: checks are off for the whole run.
	e.configMap("perimeter", map[string]string{"check": "false"})
	args := []string{"--configmap=" + e.ns + "/perimeter", "--log=info"}
	profDir := os.Getenv("BENCH_SCALE_PROFILE")
	if profDir != "" {
		// With the profiles, the daemon's debug log (daemon-N.log): when
		// each pass started and what it took.
		args = append(args, "--pprof", "--log=debug")
	}
	perimeterBinary(b) // built before the clock starts
	start = time.Now()
	d := e.launchDaemon(args...)
	// The profile starts as soon as the controller port serves, before
	// the caches are filled: it shows where start-up time goes.
	stopStartProf := d.profile(b, profDir, fmt.Sprintf("start-%d", n))
	d.waitReady(5 * time.Minute)
	ready := time.Since(start)
	for _, i := range []int{0, n / 2, n - 1} {
		d.expect(fmt.Sprintf("s%d.test", i), "/", 200, "")
	}
	b.ReportMetric(ready.Seconds(), "start-ready-s")
	row("daemon start -> ready (first full config served)", "%v (target <= 10 s)", ready.Round(time.Millisecond))
	row("where the start went", "%s", d.startTimeline(start))

	// Ingress status of all n, written by this first start. Who used the
	// two cores meanwhile shows what bounds it.
	statusStart := start
	apiPID, etcdPID := e.c.PIDs()
	cpuOf := func() [4]time.Duration {
		return [4]time.Duration{cpuTime(apiPID), cpuTime(etcdPID), cpuTime(d.cmd.Process.Pid), cpuTime(os.Getpid())}
	}
	cpuBefore, writesStart := cpuOf(), time.Now()
	var statusTook time.Duration
	if err := e.waitStatuses(ctx, n, 10*time.Minute); err != nil {
		b.Fatal(err)
	}
	statusTook = time.Since(statusStart)
	cpuAfter, writesTook := cpuOf(), time.Since(writesStart)
	stopStartProf()
	b.ReportMetric(statusTook.Seconds(), "status-all-s")
	row("Ingress status for all after start", "%v (target <= 30 s)", statusTook.Round(time.Millisecond))
	row("CPU while the statuses were written", "%v from ready: API server %v (%.2f ms a write), etcd %v, daemon %v, this benchmark %v",
		writesTook.Round(time.Millisecond), (cpuAfter[0] - cpuBefore[0]), float64((cpuAfter[0]-cpuBefore[0]).Microseconds())/1000/float64(n),
		cpuAfter[1]-cpuBefore[1], cpuAfter[2]-cpuBefore[2], cpuAfter[3]-cpuBefore[3])

	// The latency rows measure changes on a settled system: the status
	// writes end with the echoes of the last of them still arriving and
	// the writer checking every Ingress once more.
	row("settled after the status writes", "in %v", settle(apiPID, etcdPID, d.cmd.Process.Pid).Round(time.Millisecond))

	// One endpoint change -> served: s0's only endpoint moves to a new
	// address each time; served when a request reaches that address.
	before := d.reloads()
	var took, api []time.Duration
	stopProf := d.profile(b, profDir, fmt.Sprintf("endpoint-%d", n))
	for c := 0; c < 100; c++ {
		addr := scaleAddr(c%scalePods, 4001+c%90)
		start, acked := svc0.WriteEndpointsAcked(b, testenv.Endpoint{IP: addr})
		api = append(api, acked.Sub(start))
		testenv.ConvergeEvery(b, 30*time.Second, servedPoll, func() error {
			r, err := d.get("s0.test", "/")
			if err != nil {
				return err
			}
			if got := r.header.Get("X-Addr"); got != addr {
				return fmt.Errorf("s0.test answered from %q, want %s", got, addr)
			}
			return nil
		})
		took = append(took, time.Since(start))
	}
	stopProf()
	reloads := d.reloads() - before
	q := quantiles(took)
	b.ReportMetric(ms(q(0.99)), "endpoint-p99-ms")
	qa, qr := quantiles(api), quantiles(less(took, api))
	row("one endpoint change -> served", "p50 %v, p90 %v, p99 %v, max %v over %d changes; reloads %d (target p99 <= 10 ms); of which the API server's answer to the write: p50 %v, p99 %v, max %v; and from that answer to served: p50 %v, p99 %v, max %v",
		q(0.5), q(0.9), q(0.99), q(1), len(took), reloads, qa(0.5), qa(0.99), qa(1), qr(0.5), qr(0.99), qr(1))

	// A new host on an existing Service: a map change.
	before = d.reloads()
	took, api = took[:0], api[:0]
	stopProf = d.profile(b, profDir, fmt.Sprintf("new-host-%d", n))
	for c := 0; c < 50; c++ {
		host := fmt.Sprintf("new%d.test", c)
		svc := fmt.Sprintf("s%d", (c*7919)%n)
		start := time.Now()
		if _, err := e.c.Admin.NetworkingV1().Ingresses(e.ns).Create(ctx, scaleIngress(e.ns, fmt.Sprintf("new%d", c), host, svc), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		api = append(api, time.Since(start))
		d.served(host, 30*time.Second)
		took = append(took, time.Since(start))
	}
	stopProf()
	reloads = d.reloads() - before
	q, qa, qr = quantiles(took), quantiles(api), quantiles(less(took, api))
	b.ReportMetric(ms(q(0.99)), "new-host-p99-ms")
	b.ReportMetric(float64(reloads), "new-host-reloads")
	row("a new Ingress host on an existing Service -> served", "p50 %v, p90 %v, p99 %v, max %v over %d hosts; reloads %d (target p99 <= 50 ms, 0 reloads); of which the API server's answer to the create: p50 %v, p90 %v, p99 %v, max %v; and from that answer to served: p50 %v, p99 %v, max %v",
		q(0.5), q(0.9), q(0.99), q(1), len(took), reloads, qa(0.5), qa(0.9), qa(0.99), qa(1), qr(0.5), qr(0.99), qr(1))

	// A new Service + Ingress needs a new backend: a spare backend at
	// run time while there are free ones, a reload otherwise. One at a
	// time, then ten at once to see them coalesce.
	before = d.reloads()
	took = took[:0]
	for c := 0; c < 10; c++ {
		i := n + c
		start := time.Now()
		if _, err := e.scaleService(ctx, i, scaleEndpoints); err != nil {
			b.Fatal(err)
		}
		d.served(fmt.Sprintf("s%d.test", i), time.Minute)
		took = append(took, time.Since(start))
	}
	reloads = d.reloads() - before
	q = quantiles(took)
	before = d.reloads()
	start = time.Now()
	if err := e.scaleObjects(ctx, n+10, n+20, scaleEndpoints); err != nil {
		b.Fatal(err)
	}
	for i := n + 10; i < n+20; i++ {
		d.served(fmt.Sprintf("s%d.test", i), time.Minute)
	}
	burst := time.Since(start)
	// Log lines after this come after the last change's pass.
	afterChanges := len(d.out.String())
	burstReloads := d.reloads() - before
	b.ReportMetric(ms(q(0.99)), "new-backend-p99-ms")
	row("a new Service + Ingress -> served", "p50 %v, p99 %v, max %v over %d one at a time (%d reloads); 10 at once: all served in %v with %d reloads (target p99 <= 1 s, coalesced)",
		q(0.5), q(0.99), q(1), len(took), reloads, burst.Round(time.Millisecond), burstReloads)

	// Memory once the workers the reloads replaced have left: the master
	// and one worker.
	testenv.Eventually(b, time.Minute, func() error {
		if pids := haproxyPIDs(d.runtimeDir); len(pids) != 2 {
			return fmt.Errorf("%d HAProxy processes, waiting for the master and one worker", len(pids))
		}
		return nil
	})
	daemonRSS := rssMiB(d.cmd.Process.Pid)
	anonRSS, fileRSS := statusMiB(d.cmd.Process.Pid, "RssAnon:"), statusMiB(d.cmd.Process.Pid, "RssFile:")
	d.heapProfile(b, profDir, fmt.Sprintf("heap-%d", n))
	var workersRSS, masterRSS float64
	for _, pid := range haproxyPIDs(d.runtimeDir) {
		if parentPID(pid) == d.cmd.Process.Pid {
			masterRSS += rssMiB(pid)
		} else {
			workersRSS += rssMiB(pid)
		}
	}
	// Once changes pause the daemon gives the garbage of its last full
	// Builds back (app/memory.go): the RSS of an idle daemon.
	testenv.Eventually(b, time.Minute, func() error {
		if !strings.Contains(d.out.String()[afterChanges:], "memory returned to the system") {
			return errors.New("the daemon has not returned the free memory of the last changes yet")
		}
		return nil
	})
	idleRSS := rssMiB(d.cmd.Process.Pid)
	b.ReportMetric(idleRSS, "daemon-idle-rss-MiB")
	row("daemon RSS once idle (free memory returned)", "%.0f MiB: anonymous %.0f, file %.0f", idleRSS,
		statusMiB(d.cmd.Process.Pid, "RssAnon:"), statusMiB(d.cmd.Process.Pid, "RssFile:"))
	b.ReportMetric(daemonRSS, "daemon-rss-MiB")
	b.ReportMetric(workersRSS, "haproxy-workers-rss-MiB")
	b.ReportMetric(masterRSS, "haproxy-master-rss-MiB")
	row("daemon RSS", "%.0f MiB: anonymous %.0f, file %.0f (target <= 300 MiB)", daemonRSS, anonRSS, fileRSS)
	row("HAProxy RSS", "worker %.0f MiB, master %.0f MiB (target <= 1 GiB for the workers)", workersRSS, masterRSS)

	// A reload under 2,000 req/s, half on kept-alive connections, half on
	// new ones.
	failed, sent, rate := d.reloadUnderLoad(b, e, n+20, 2000)
	b.ReportMetric(float64(failed), "reload-failed-requests")
	row("a reload under load", "%d failed of %d requests at %.0f req/s (keep-alive and new connections; target 0 failed)", failed, sent, rate)

	// A second start finds every status right: no write.
	rvs := ingressVersions(b, e)
	d.stop()
	if profDir != "" {
		if err := os.WriteFile(filepath.Join(profDir, fmt.Sprintf("daemon-%d.log", n)), []byte(d.out.String()), 0o644); err != nil {
			b.Error(err)
		}
	}
	start = time.Now()
	d = e.startDaemonWithin(5*time.Minute, args...)
	restart := time.Since(start)
	d.served("s0.test", time.Minute)
	written := d.statusPass(b, n, 5*time.Minute)
	changed := 0
	for name, rv := range ingressVersions(b, e) {
		if rvs[name] != rv {
			changed++
		}
	}
	if written != 0 || changed != 0 {
		b.Fatalf("second start wrote status of %d Ingresses (%d changed resourceVersion) whose status was already right", written, changed)
	}
	row("restart with every status right", "ready in %v, status writes 0, Ingresses changed 0", restart.Round(time.Millisecond))
	writeScaleReport(b, n, rows)
}

// waitStatuses waits until n Ingresses of the namespace have a status. It
// watches rather than lists over and over: a list of 10,000 Ingresses
// every 50 ms would take the API server's time from the very writes being
// measured.
func (e *env) waitStatuses(ctx context.Context, n int, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	// Protobuf, as the daemon speaks: 10,000 events in JSON cost the API
	// server and this process more than the writes they tell of.
	cfg := rest.CopyConfig(e.c.AdminConfig)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ings := cs.NetworkingV1().Ingresses(e.ns)
	for {
		list, err := ings.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		has := map[string]bool{}
		for _, ing := range list.Items {
			if len(ing.Status.LoadBalancer.Ingress) > 0 {
				has[ing.Name] = true
			}
		}
		w, err := ings.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			return err
		}
		for len(has) < n {
			ev, ok := <-w.ResultChan()
			if !ok {
				break // the watch ended: list again
			}
			ing, isIng := ev.Object.(*networkingv1.Ingress)
			if !isIng {
				continue
			}
			if ev.Type != watch.Deleted && len(ing.Status.LoadBalancer.Ingress) > 0 {
				has[ing.Name] = true
			} else {
				delete(has, ing.Name)
			}
		}
		w.Stop()
		if len(has) >= n {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%d of %d Ingresses have a status: %w", len(has), n, ctx.Err())
		}
	}
}

// startTimeline tells when, after start, the daemon logged each step of
// its start: the caches filled, the first configuration loaded by HAProxy
// (with how long the load took), ready.
func (d *daemon) startTimeline(start time.Time) string {
	out := d.out.String()
	var parts []string
	for _, step := range []struct{ msg, name string }{
		{"caches synced", "caches synced"},
		{"reloaded", "first configuration loaded"},
		{"ready: HAProxy serves the first full configuration", "ready"},
	} {
		for line := range strings.Lines(out) {
			if !strings.Contains(line, "msg="+step.msg+" ") && !strings.Contains(line, `msg="`+step.msg+`"`) {
				continue
			}
			f := strings.Fields(line)
			if len(f) == 0 || !strings.HasPrefix(f[0], "time=") {
				break
			}
			at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(f[0], "time="))
			if err != nil {
				break
			}
			part := fmt.Sprintf("%s at %v", step.name, at.Sub(start).Round(10*time.Millisecond))
			if m := tookField.FindStringSubmatch(line); m != nil {
				part += " (took " + m[1] + ")"
			}
			parts = append(parts, part)
			break
		}
	}
	return strings.Join(parts, ", ")
}

var tookField = regexp.MustCompile(`took=(\S+)`)

// profile records the daemon's CPU profile (--pprof) into dir/name.prof
// and an execution trace of the first seconds into dir/name.trace (go
// tool trace: where a slow change waited) until the returned function is
// called; with dir "" it does nothing.
func (d *daemon) profile(b *testing.B, dir, name string) (stop func()) {
	if dir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	wg.Go(func() { d.savePprof(b, "profile?seconds=20", filepath.Join(dir, name+".prof")) })
	wg.Go(func() { d.savePprof(b, "trace?seconds=5", filepath.Join(dir, name+".trace")) })
	return wg.Wait
}

// heapProfile records the daemon's heap profile (--pprof) into
// dir/name.prof, to see what the RSS figure is made of.
func (d *daemon) heapProfile(b *testing.B, dir, name string) {
	if dir != "" {
		d.savePprof(b, "heap", filepath.Join(dir, name+".prof"))
		// The text form ends with the runtime's MemStats: what of the
		// RSS is not live heap.
		d.savePprof(b, "heap?debug=1", filepath.Join(dir, name+".txt"))
	}
}

// savePprof writes what the daemon's /debug/pprof/<what> answers to file.
func (d *daemon) savePprof(b *testing.B, what, file string) {
	var resp *http.Response
	// A daemon just launched may not listen yet.
	if err := testenv.Poll(context.Background(), 30*time.Second, func() (err error) {
		resp, err = http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/%s", d.ctrlPort, what))
		return err
	}); err != nil {
		b.Error(err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		b.Error(err)
		return
	}
	defer f.Close()
	if _, err := f.ReadFrom(resp.Body); err != nil {
		b.Error(err)
	}
}

// served polls until host answers 200.
func (d *daemon) served(host string, within time.Duration) {
	d.t.Helper()
	testenv.ConvergeEvery(d.t, within, servedPoll, func() error {
		r, err := d.get(host, "/")
		if err != nil {
			return err
		}
		if r.status != 200 {
			return fmt.Errorf("%s: status %d", host, r.status)
		}
		return nil
	})
}

var statusPassLine = regexp.MustCompile(`ingress status pass.*served\W+(\d+).*written\W+(\d+)`)

// statusPass waits for the status writer's first pass over at least
// served Ingresses and returns how many it wrote.
func (d *daemon) statusPass(b testing.TB, served int, within time.Duration) int {
	var written int
	testenv.Eventually(b, within, func() error {
		for _, m := range statusPassLine.FindAllStringSubmatch(d.out.String(), -1) {
			if n, _ := strconv.Atoi(m[1]); n >= served {
				written, _ = strconv.Atoi(m[2])
				return nil
			}
		}
		return fmt.Errorf("no status pass over %d Ingresses logged yet", served)
	})
	return written
}

func ingressVersions(b *testing.B, e *env) map[string]string {
	list, err := e.c.Admin.NetworkingV1().Ingresses(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	out := make(map[string]string, len(list.Items))
	for _, ing := range list.Items {
		out[ing.Name] = ing.ResourceVersion
	}
	return out
}

// reloadUnderLoad sends rate req/s over 100 hosts, half on kept-alive
// connections and half on new ones, and makes a reload (a new Service +
// Ingress) in the middle. It returns failed and sent requests and the rate
// reached.
//
// The load is open-loop: requests leave on a fixed schedule whatever the
// answers take, each in a goroutine of its own, so that slow answers
// around a reload show as latency or failures, not as a lower rate.
func (d *daemon) reloadUnderLoad(b *testing.B, e *env, i, rate int) (failed, sent int64, reached float64) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var nFailed, nSent atomic.Int64
	var firstOnce sync.Once
	var firstErr error
	kept := &http.Transport{MaxIdleConns: 1000, MaxIdleConnsPerHost: 1000}
	fresh := &http.Transport{DisableKeepAlives: true}
	defer kept.CloseIdleConnections()
	clients := []*http.Client{{Timeout: 5 * time.Second, Transport: kept}, {Timeout: 5 * time.Second, Transport: fresh}}
	send := func(k int64) {
		defer wg.Done()
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", d.httpPort), nil)
		req.Host = fmt.Sprintf("s%d.test", k%100)
		resp, err := clients[k%2].Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		if err != nil {
			nFailed.Add(1)
			firstOnce.Do(func() { firstErr = err })
		}
	}
	start := time.Now()
	var stopped time.Time
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				stopped = time.Now()
				return
			case now := <-tick.C:
				// Every request due by now leaves, however late the
				// tick came.
				for due := int64(now.Sub(start).Seconds() * float64(rate)); nSent.Load() < due; {
					k := nSent.Add(1) - 1
					wg.Add(1)
					go send(k)
				}
			}
		}
	}()
	// A second of load before the reload and one after it.
	loaded := func(n int64) {
		testenv.Eventually(b, time.Minute, func() error {
			if s := nSent.Load(); s < n {
				return fmt.Errorf("%d requests sent, waiting for %d", s, n)
			}
			return nil
		})
	}
	loaded(int64(rate))
	before := d.reloads()
	// More endpoints than the spare backends have slots: a reload.
	if _, err := e.scaleService(context.Background(), i, 2*scaleEndpoints); err != nil {
		b.Fatal(err)
	}
	d.served(fmt.Sprintf("s%d.test", i), time.Minute)
	testenv.Eventually(b, time.Minute, func() error {
		if d.reloads() == before {
			return errors.New("no reload yet")
		}
		return nil
	})
	loaded(nSent.Load() + int64(rate))
	cancel()
	wg.Wait()
	if firstErr != nil {
		fmt.Printf("reload under load: first failure: %v\n", firstErr)
	}
	return nFailed.Load(), nSent.Load(), float64(nSent.Load()) / stopped.Sub(start).Seconds()
}

// less is each whole time less its part.
func less(whole, part []time.Duration) []time.Duration {
	out := make([]time.Duration, len(whole))
	for i := range whole {
		out[i] = whole[i] - part[i]
	}
	return out
}

func quantiles(took []time.Duration) func(float64) time.Duration {
	s := slices.Clone(took)
	slices.Sort(s)
	return func(q float64) time.Duration { return s[int(q*float64(len(s)-1))].Round(10 * time.Microsecond) }
}

// parentPID reads a process's parent from /proc (0 when gone).
func parentPID(pid int) int {
	fields, err := testenv.ProcStat(pid)
	if err != nil {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// cpuTime reads the CPU time a process has used (0 when gone).
// settle waits, at most 30 s, until pids together used less than a tenth
// of a core between two samples 100 ms apart, and returns how long that
// took.
func settle(pids ...int) time.Duration {
	total := func() (t time.Duration) {
		for _, pid := range pids {
			t += cpuTime(pid)
		}
		return t
	}
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last, at := total(), start
	for now := range tick.C {
		cpu := total()
		if cpu-last < now.Sub(at)/10 || now.Sub(start) > 30*time.Second {
			break
		}
		last, at = cpu, now
	}
	return time.Since(start)
}

func cpuTime(pid int) time.Duration {
	t, _ := testenv.ProcCPU(pid)
	return t
}

// rssMiB reads a process's resident set size.
func rssMiB(pid int) float64 { return statusMiB(pid, "VmRSS:") }

// statusMiB reads a size of /proc/PID/status: of the daemon's RSS, the
// part that is its own memory (RssAnon) and the pages of its binary and
// other files (RssFile), which the kernel can drop and read again.
func statusMiB(pid int, field string) float64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}

// writeScaleReport appends the table to $PERIMETER_TEST_REPORT, in one
// write so that packages running at once do not mix their lines.
func writeScaleReport(b *testing.B, n int, rows []scaleRow) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "scale: %d Ingresses / %d Services / %d endpoints (BenchmarkScale):\n", n, n, n*scaleEndpoints)
	for _, r := range rows {
		fmt.Fprintf(&sb, "  %s: %s\n", r.name, r.value)
	}
	b.Log(sb.String())
	path := os.Getenv("PERIMETER_TEST_REPORT")
	if path == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Error(err)
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		b.Error(err)
		return
	}
	_, err = f.WriteString(sb.String())
	if err = errors.Join(err, f.Close()); err != nil {
		b.Error(err)
	}
}
