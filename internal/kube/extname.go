package kube

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// DefaultExternalNameInterval is how often the DNS names of ExternalName
// Services are looked up again, at most: a shorter TTL in the answer brings
// the next lookup forward, down to externalNameMinInterval.
const DefaultExternalNameInterval = 30 * time.Second

// externalNameMinInterval keeps a name with a TTL of 0 or 1 from being
// looked up in a loop.
const externalNameMinInterval = 5 * time.Second

// externalNameTimeout bounds one lookup, so a silent DNS server delays a
// name's next attempt rather than holding it forever.
const externalNameTimeout = 5 * time.Second

// nameResolver looks up the DNS names of ExternalName Services in the
// daemon, not in HAProxy: the addresses then reach the model like
// EndpointSlice addresses, through the same checks, and a change is a
// server change through the Runtime API rather than a reload. It is an
// input like an informer: each name has a goroutine that resolves it every
// interval and, when the answer changes, marks the Services naming it as
// changed for the next snapshot.
type nameResolver struct {
	r        *net.Resolver
	interval time.Duration
	// changed records the Services whose name resolved differently.
	changed func([]model.ServiceKey)

	mu    sync.Mutex
	ctx   context.Context
	names map[string]*resolvedName
}

type resolvedName struct {
	services map[model.ServiceKey]bool
	have     bool
	result   model.ResolvedName
	cancel   context.CancelFunc
}

// newNameResolver resolves with server (HOST:PORT) when set, else with the
// host's resolver configuration (/etc/resolv.conf, /etc/hosts).
func newNameResolver(server string, interval time.Duration, changed func([]model.ServiceKey)) *nameResolver {
	if interval <= 0 {
		interval = DefaultExternalNameInterval
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		if server != "" {
			address = server
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, address)
		// The resolver tells datagram from stream by the connection's
		// type, so only a UDP connection is wrapped, as one.
		if u, ok := c.(*net.UDPConn); ok && err == nil {
			if ttl, _ := ctx.Value(ttlKey{}).(*ttlCollector); ttl != nil {
				return &ttlConn{UDPConn: u, ttl: ttl}, nil
			}
		}
		return c, err
	}}
	return &nameResolver{r: r, interval: interval, changed: changed, names: map[string]*resolvedName{}}
}

// start lets names run their lookups until ctx ends; names wanted before
// start begin now.
func (n *nameResolver) start(ctx context.Context) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ctx = ctx
	for name, e := range n.names {
		if e.cancel == nil {
			n.run(name, e)
		}
	}
}

// want makes the set of names looked up those of svcs' ExternalName
// Services, and returns the current answers for them. Names no Service
// names any more stop being looked up.
func (n *nameResolver) want(svcs []*corev1.Service) map[string]model.ResolvedName {
	wanted := map[string]map[model.ServiceKey]bool{}
	for _, svc := range svcs {
		if svc.Spec.Type != corev1.ServiceTypeExternalName || svc.Spec.ExternalName == "" {
			continue
		}
		key := model.ExternalNameKey(svc.Spec.ExternalName)
		if wanted[key] == nil {
			wanted[key] = map[model.ServiceKey]bool{}
		}
		wanted[key][model.ServiceKey{Namespace: svc.Namespace, Name: svc.Name}] = true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for name, e := range n.names {
		if wanted[name] == nil {
			if e.cancel != nil {
				e.cancel()
			}
			delete(n.names, name)
		}
	}
	var out map[string]model.ResolvedName
	for name, services := range wanted {
		e := n.names[name]
		if e == nil {
			e = &resolvedName{}
			n.names[name] = e
			if n.ctx != nil {
				n.run(name, e)
			}
		}
		e.services = services
		if e.have {
			if out == nil {
				out = map[string]model.ResolvedName{}
			}
			out[name] = e.result
		}
	}
	return out
}

// current returns the answers for the names of svcs' ExternalName
// Services, leaving the set of names looked up as it is.
func (n *nameResolver) current(svcs []*corev1.Service) map[string]model.ResolvedName {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out map[string]model.ResolvedName
	for _, svc := range svcs {
		if svc.Spec.Type != corev1.ServiceTypeExternalName || svc.Spec.ExternalName == "" {
			continue
		}
		key := model.ExternalNameKey(svc.Spec.ExternalName)
		if e := n.names[key]; e != nil && e.have {
			if out == nil {
				out = map[string]model.ResolvedName{}
			}
			out[key] = e.result
		}
	}
	return out
}

// run starts name's lookups; n.mu is held.
func (n *nameResolver) run(name string, e *resolvedName) {
	ctx, cancel := context.WithCancel(n.ctx)
	e.cancel = cancel
	go func() {
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			t.Reset(n.next(n.lookup(ctx, name, e)))
		}
	}()
}

// next is the wait before the next lookup of a name whose answer had ttl
// (negative: unknown).
func (n *nameResolver) next(ttl time.Duration) time.Duration {
	if ttl < 0 {
		return n.interval
	}
	return min(n.interval, max(ttl, min(externalNameMinInterval, n.interval)))
}

// lookup resolves name once and records the answer; it returns the
// answer's smallest address TTL, negative when unknown.
func (n *nameResolver) lookup(ctx context.Context, name string, e *resolvedName) time.Duration {
	ttl := &ttlCollector{}
	var found []netip.Addr
	var err error
	if a, perr := netip.ParseAddr(name); perr == nil {
		// The API accepts an IPv4 address as an ExternalName; it is its
		// own answer, and goes through the model's checks like any.
		found = []netip.Addr{a}
	} else {
		lctx, cancel := context.WithTimeout(context.WithValue(ctx, ttlKey{}, ttl), externalNameTimeout)
		// The trailing dot makes the name absolute: an ExternalName is a
		// DNS name, never relative to the edge host's search domains.
		found, err = n.r.LookupNetIP(lctx, "ip", name+".")
		cancel()
	}
	if ctx.Err() != nil {
		return -1
	}
	var res model.ResolvedName
	var dnsErr *net.DNSError
	switch {
	case err == nil:
		for _, a := range found {
			res.Addrs = append(res.Addrs, a.Unmap())
		}
		slices.SortFunc(res.Addrs, netip.Addr.Compare)
		res.Addrs = slices.Compact(res.Addrs)
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		res.Err = "no such host"
	default:
		// A timeout or a server failure says nothing about the name:
		// the last answer keeps serving until one comes.
		n.mu.Lock()
		keep := e.have && e.result.Err == ""
		n.mu.Unlock()
		if keep {
			return -1
		}
		res.Err = err.Error()
		if errors.As(err, &dnsErr) {
			res.Err = dnsErr.Err
		}
	}
	n.mu.Lock()
	same := e.have && res.Err == e.result.Err && slices.Equal(res.Addrs, e.result.Addrs)
	e.have, e.result = true, res
	var services []model.ServiceKey
	if !same && n.names[name] == e {
		for k := range e.services {
			services = append(services, k)
		}
	}
	n.mu.Unlock()
	if len(services) > 0 {
		n.changed(services)
	}
	if err != nil {
		return -1
	}
	return ttl.get()
}

type ttlKey struct{}

// ttlCollector keeps the smallest TTL of the address records in the DNS
// answers of one lookup: net.Resolver does not return TTLs.
type ttlCollector struct {
	mu   sync.Mutex
	ttl  uint32
	seen bool
}

func (c *ttlCollector) observe(msg []byte) {
	var p dnsmessage.Parser
	if _, err := p.Start(msg); err != nil || p.SkipAllQuestions() != nil {
		return
	}
	for {
		h, err := p.AnswerHeader()
		if err != nil {
			return
		}
		if h.Type == dnsmessage.TypeA || h.Type == dnsmessage.TypeAAAA {
			c.mu.Lock()
			if !c.seen || h.TTL < c.ttl {
				c.ttl, c.seen = h.TTL, true
			}
			c.mu.Unlock()
		}
		if p.SkipAnswer() != nil {
			return
		}
	}
}

func (c *ttlCollector) get() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.seen {
		return -1
	}
	return time.Duration(c.ttl) * time.Second
}

// ttlConn reads the TTLs of the answers a UDP DNS exchange receives.
type ttlConn struct {
	*net.UDPConn
	ttl *ttlCollector
}

func (c *ttlConn) Read(b []byte) (int, error) {
	n, err := c.UDPConn.Read(b)
	if n > 0 {
		c.ttl.observe(b[:n])
	}
	return n, err
}
