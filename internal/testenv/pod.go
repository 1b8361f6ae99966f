package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// PodOptions describe a test pod: an HTTP server in its own network
// namespace, on an address from 198.18.0.0/15 held by the namespace's
// loopback, reached through a veth pair.
type PodOptions struct {
	Name string // answered as body and X-Pod; also names the namespace
	IP   string // 198.18.x.y
	Port int    // default 8080

	// LinkRange gives the veth its /31 (default DefaultLinkRange). Use your
	// package's own range.
	LinkRange string
	// Parent is where the veth's other end, and the route to the pod, go:
	// nil for the root namespace, or a "node" namespace of a BGP test (which
	// must forward: Sysctl("net/ipv4/ip_forward", "1")).
	Parent *Netns
	// NoHostRoute leaves out the /32 route to the pod in Parent, for tests
	// where the route comes from BGP.
	NoHostRoute bool
	// Handler replaces the standard handler (pod name, /healthz).
	Handler http.Handler
	// IP6 makes the pod dual-stack: an address from 2001:db8::/32 on its
	// eth0 (as a Calico pod has it), reached as Calico reaches it: a
	// device route in Parent (unless NoHostRoute) and the pod's default
	// route via fe80::1 on the host side. The server listens on both.
	IP6 string
}

// Pod is a running test pod. Its standard handler answers 200 with the pod
// name as body and header X-Pod, echoes X-Forwarded-For as
// X-Seen-Forwarded-For, and serves /healthz (503 after SetHealthy(false)).
type Pod struct {
	Name  string
	IP    netip.Addr
	IP6   netip.Addr // invalid unless PodOptions.IP6
	Port  int
	Netns *Netns
	Link  *VethPair // NS = Parent (host side), PeerNS = pod ("eth0")

	handler  http.Handler
	healthy  atomic.Bool
	requests atomic.Int64
	route    *netlink.Route
	release  func() error

	mu   sync.Mutex
	srv  *http.Server
	once sync.Once
}

// StartPod starts a pod for the test and removes it (server, namespace,
// link, route) when the test ends.
func StartPod(tb testing.TB, opts PodOptions) *Pod {
	tb.Helper()
	RequireRoot(tb)
	p, err := StartPodCtx(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Error(err)
		}
	})
	return p
}

// StartPodCtx starts a pod; the caller must Close it. It holds the leak
// guard until then.
func StartPodCtx(ctx context.Context, opts PodOptions) (p *Pod, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.Name == "" {
		return nil, errors.New("pod: no name")
	}
	ip, err := netip.ParseAddr(opts.IP)
	if err != nil || !ip.Is4() || !podSpace.Contains(ip) {
		return nil, fmt.Errorf("pod %s: IP %q must be an address in %s", opts.Name, opts.IP, podSpace)
	}
	p = &Pod{Name: opts.Name, IP: ip, Port: opts.Port, handler: opts.Handler}
	if p.Port == 0 {
		p.Port = 8080
	}
	if p.handler == nil {
		p.handler = http.HandlerFunc(p.serve)
	}
	p.healthy.Store(true)
	if p.release, err = AcquireGuard(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("pod %s: %w", opts.Name, err), p.Close())
			p = nil
		}
	}()
	if p.Netns, err = CreateNetns(strconv.FormatInt(nextSeq(), 36) + "-" + opts.Name); err != nil {
		return p, err
	}
	if p.Link, err = CreateVeth(VethOptions{
		NS: opts.Parent, PeerNS: p.Netns, PeerName: "eth0", LinkRange: opts.LinkRange,
	}); err != nil {
		return p, err
	}
	podNL, _ := p.Netns.Netlink()
	lo, err := podNL.LinkByName("lo")
	if err != nil {
		return p, fmt.Errorf("loopback: %w", err)
	}
	if err := podNL.AddrAdd(lo, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(ip, 32))}); err != nil {
		return p, fmt.Errorf("address %s on lo: %w", ip, err)
	}
	eth0, err := podNL.LinkByName("eth0")
	if err != nil {
		return p, err
	}
	// Connections the pod opens leave from its pod address, like a real pod's.
	if err := podNL.RouteAdd(&netlink.Route{
		LinkIndex: eth0.Attrs().Index,
		Gw:        net.IP(p.Link.Addr.Addr().AsSlice()),
		Src:       net.IP(ip.AsSlice()),
	}); err != nil {
		return p, fmt.Errorf("default route: %w", err)
	}
	if !opts.NoHostRoute {
		parentNL, err := opts.Parent.Netlink()
		if err != nil {
			return p, err
		}
		hostSide, err := parentNL.LinkByName(p.Link.Name)
		if err != nil {
			return p, err
		}
		r := &netlink.Route{
			LinkIndex: hostSide.Attrs().Index,
			Dst:       prefixNet(netip.PrefixFrom(ip, 32)),
			Gw:        net.IP(p.Link.PeerAddr.Addr().AsSlice()),
		}
		if err := parentNL.RouteAdd(r); err != nil {
			if errors.Is(err, unix.EEXIST) {
				return p, fmt.Errorf("route to %s in %s: already there (another pod with this IP?)", ip, opts.Parent.name())
			}
			return p, fmt.Errorf("route to %s in %s: %w", ip, opts.Parent.name(), err)
		}
		p.route = r
	}
	if opts.IP6 != "" {
		if err := p.addIPv6(opts); err != nil {
			return p, err
		}
	}
	return p, p.Start()
}

// addIPv6 sets up the pod's IPv6 address and the routes to and from it.
// DAD is off: the addresses are usable at once.
func (p *Pod) addIPv6(opts PodOptions) error {
	ip6, err := netip.ParseAddr(opts.IP6)
	if err != nil || !ip6.Is6() || !netip.MustParsePrefix(GuardRange6).Contains(ip6) {
		return fmt.Errorf("IPv6 address %q must be in %s", opts.IP6, GuardRange6)
	}
	p.IP6 = ip6
	podNL, err := p.Netns.Netlink()
	if err != nil {
		return err
	}
	parentNL, err := opts.Parent.Netlink()
	if err != nil {
		return err
	}
	eth0, err := podNL.LinkByName("eth0")
	if err != nil {
		return err
	}
	hostSide, err := parentNL.LinkByName(p.Link.Name)
	if err != nil {
		return err
	}
	gw := netip.MustParseAddr("fe80::1")
	if err := parentNL.AddrAdd(hostSide, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(gw, 64)), Flags: unix.IFA_F_NODAD}); err != nil {
		return fmt.Errorf("address %s on %s: %w", gw, p.Link.Name, err)
	}
	if err := podNL.AddrAdd(eth0, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(ip6, 128)), Flags: unix.IFA_F_NODAD}); err != nil {
		return fmt.Errorf("address %s on eth0: %w", ip6, err)
	}
	if err := podNL.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: prefixNet(netip.MustParsePrefix("::/0")),
		Gw: net.IP(gw.AsSlice()), Src: net.IP(ip6.AsSlice())}); err != nil {
		return fmt.Errorf("IPv6 default route: %w", err)
	}
	if opts.NoHostRoute {
		return nil
	}
	if err := parentNL.RouteAdd(&netlink.Route{LinkIndex: hostSide.Attrs().Index, Scope: netlink.SCOPE_LINK,
		Dst: prefixNet(netip.PrefixFrom(ip6, 128))}); err != nil {
		return fmt.Errorf("route to %s in %s: %w", ip6, opts.Parent.name(), err)
	}
	return nil
}

// Addr6 is "[IP6]:port".
func (p *Pod) Addr6() string { return netip.AddrPortFrom(p.IP6, uint16(p.Port)).String() }

// Addr is "IP:port".
func (p *Pod) Addr() string { return netip.AddrPortFrom(p.IP, uint16(p.Port)).String() }

// URL is the pod's base URL, "http://IP:port".
func (p *Pod) URL() string { return "http://" + p.Addr() }

// Endpoint is the pod as a ready EndpointSlice endpoint.
func (p *Pod) Endpoint() Endpoint { return Endpoint{IP: p.IP.String()} }

// SetHealthy makes /healthz answer 200 (true) or 503 (false).
func (p *Pod) SetHealthy(ok bool) { p.healthy.Store(ok) }

// Requests counts the requests the pod has answered, /healthz included.
func (p *Pod) Requests() int64 { return p.requests.Load() }

func (p *Pod) serve(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	h := w.Header()
	h.Set("X-Pod", p.Name)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	if r.URL.Path == "/healthz" {
		if !p.healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("unhealthy"))
			return
		}
		_, _ = w.Write([]byte("ok"))
		return
	}
	if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		h.Set("X-Seen-Forwarded-For", strings.Join(xff, ", "))
	}
	_, _ = w.Write([]byte(p.Name))
}

// Start (re)starts the pod's HTTP server after Stop. The listening socket is
// made inside the pod's namespace and stays there; no extra process.
func (p *Pod) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		return nil
	}
	var ln, ln6 net.Listener
	err := p.Netns.Do(func() error {
		var err error
		if ln, err = net.Listen("tcp4", p.Addr()); err != nil || !p.IP6.IsValid() {
			return err
		}
		if ln6, err = net.Listen("tcp6", p.Addr6()); err != nil {
			ln.Close()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("pod %s: listen: %w", p.Name, err)
	}
	srv := &http.Server{Handler: p.handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }() // returns when Stop closes the server
	if ln6 != nil {
		go func() { _ = srv.Serve(ln6) }()
	}
	p.srv = srv
	return nil
}

// Stop closes the listener and every open connection at once, like a
// crashed process: connections get reset or refused until Start.
func (p *Pod) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv == nil {
		return nil
	}
	err := p.srv.Close()
	p.srv = nil
	if err != nil {
		return fmt.Errorf("pod %s: stop: %w", p.Name, err)
	}
	return nil
}

// Close stops the server and removes the route, the link and the namespace,
// then releases the leak guard.
func (p *Pod) Close() error {
	var errs []error
	p.once.Do(func() {
		errs = append(errs, p.Stop())
		if p.route != nil && p.Link != nil {
			if h, err := p.Link.NS.Netlink(); err == nil {
				if err := h.RouteDel(p.route); err != nil && !errors.Is(err, unix.ESRCH) {
					errs = append(errs, fmt.Errorf("pod %s: delete route: %w", p.Name, err))
				}
			}
		}
		if p.Link != nil {
			errs = append(errs, p.Link.Close())
		}
		if p.Netns != nil {
			errs = append(errs, p.Netns.Close())
		}
		if p.release != nil {
			errs = append(errs, p.release())
		}
	})
	return errors.Join(errs...)
}
