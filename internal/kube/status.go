package kube

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// StatusOptions configure the Ingress status writer.
type StatusOptions struct {
	// Addresses are published in .status.loadBalancer.ingress (IPs or host
	// names).
	Addresses []string
	// ElectionID and ElectionNamespace name the Lease that picks the one
	// edge host writing status when several serve the same cluster.
	ElectionID        string
	ElectionNamespace string
	// ClearOnShutdown clears the status of served Ingresses when the daemon
	// stops (--update-status-on-shutdown).
	ClearOnShutdown bool
	// OnLeading, when set, is told when this daemon starts (true) and
	// stops (false) writing status.
	OnLeading func(bool)
	// Gateway writes the status of Gateway API objects (gateway_status.go);
	// nil: none.
	Gateway gwclient.Interface
}

// StatusWriter keeps the status of served Ingresses equal to the published
// addresses while it holds the Lease. Every edge host keeps serving traffic
// whether it leads or not: only the writes are elected.
type StatusWriter struct {
	cs   kubernetes.Interface
	w    *Watcher
	opts StatusOptions
	log  *slog.Logger
	want []networkingv1.IngressLoadBalancerIngress

	// leads tracks the lead callback, which leaderelection runs in a
	// goroutine of its own: Run waits for it, so that clearing status on
	// shutdown finishes before the daemon exits.
	leads sync.WaitGroup
	// stopping is closed when Run's context ends: only then does losing
	// the lead mean shutting down (and clearing, when asked to).
	stopping <-chan struct{}

	mu     sync.Mutex
	served map[model.ObjectRef]bool
	// servedList is what Serve was last given, sorted as model.Desired
	// keeps it, to find what changed without rebuilding served.
	servedList []model.ObjectRef
	// dirty are the Ingresses to check at the next pass: those whose
	// being served changed, or whose status someone else changed. all
	// asks for every cached Ingress instead.
	dirty   map[model.ObjectRef]bool
	all     bool
	gateway *model.GatewayAPIStatus
	kick    chan struct{}
	leading bool
	// passed: a pass over the served Ingresses has been logged.
	passed bool
}

// StatusClient is the status writer's own client: its writes come in bursts
// of thousands after a start and must not wait behind, or hold up, the
// informers' and Events' rate limit. The writers in flight (statusWriters)
// bound it, not a token bucket: at 500 QPS, 10,000 Ingresses alone took
// 20 s. Ingresses and Leases travel as protobuf, which costs the API
// server a fraction of JSON's CPU per write.
func StatusClient(cfg *rest.Config) (kubernetes.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("status client: %w", err)
	}
	return cs, nil
}

// NewStatusWriter prepares a writer; Run starts the election.
func NewStatusWriter(cs kubernetes.Interface, w *Watcher, opts StatusOptions, log *slog.Logger) *StatusWriter {
	s := &StatusWriter{cs: cs, w: w, opts: opts, log: log, kick: make(chan struct{}, 1)}
	if w != nil {
		// A status someone else changed is put right without waiting
		// for the next tick.
		w.OnIngressStatus(func(namespace, name string) {
			s.mu.Lock()
			s.markDirty(model.ObjectRef{Kind: "Ingress", Namespace: namespace, Name: name})
			s.mu.Unlock()
			select {
			case s.kick <- struct{}{}:
			default:
			}
		})
	}
	for _, a := range opts.Addresses {
		if ip, err := netip.ParseAddr(a); err == nil {
			s.want = append(s.want, networkingv1.IngressLoadBalancerIngress{IP: ip.String()})
		} else {
			s.want = append(s.want, networkingv1.IngressLoadBalancerIngress{Hostname: a})
		}
	}
	return s
}

// Serve hands the writer the set of Ingresses the daemon serves now, sorted
// as model.Desired.Served is. Only the Ingresses that entered or left the
// set are checked at the next pass, so a pass after a one-Ingress change
// costs one Ingress, not all of them.
func (s *StatusWriter) Serve(refs []model.ObjectRef) {
	s.mu.Lock()
	if s.served == nil {
		s.served = make(map[model.ObjectRef]bool, len(refs))
		for _, r := range refs {
			s.served[r] = true
		}
		s.all = true
	} else if len(refs) != len(s.servedList) || len(refs) > 0 && &refs[0] != &s.servedList[0] {
		// The model hands over the very same list when no Ingress
		// changed (an endpoint change): nothing to compare then.
		diffSorted(s.servedList, refs, func(r model.ObjectRef, in bool) {
			if in {
				s.served[r] = true
			} else {
				delete(s.served, r)
			}
			s.markDirty(r)
		})
	}
	s.servedList = refs
	kick := s.all || len(s.dirty) > 0
	s.mu.Unlock()
	if kick {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// markDirty queues r for the next pass; s.mu is held.
func (s *StatusWriter) markDirty(r model.ObjectRef) {
	if s.dirty == nil {
		s.dirty = map[model.ObjectRef]bool{}
	}
	s.dirty[r] = true
}

// diffSorted calls f for every ref in exactly one of two lists sorted by
// kind, namespace and name: in tells whether it is in b.
func diffSorted(a, b []model.ObjectRef, f func(r model.ObjectRef, in bool)) {
	cmpRef := func(x, y model.ObjectRef) int {
		return cmp.Or(cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && cmpRef(a[i], b[j]) < 0:
			f(a[i], false)
			i++
		case i == len(a) || cmpRef(a[i], b[j]) > 0:
			f(b[j], true)
			j++
		default:
			i++
			j++
		}
	}
}

// Leading reports whether this daemon currently writes status.
func (s *StatusWriter) Leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leading
}

// Run takes part in the election until ctx ends.
func (s *StatusWriter) Run(ctx context.Context) error {
	s.stopping = ctx.Done()
	id, _ := os.Hostname()
	id = fmt.Sprintf("%s_%d", id, os.Getpid())
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: s.opts.ElectionID, Namespace: s.opts.ElectionNamespace},
		Client:     s.cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Name:            "perimeter-status",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				s.leads.Add(1)
				defer s.leads.Done()
				s.lead(ctx)
			},
			OnStoppedLeading: func() {
				s.mu.Lock()
				was := s.leading
				s.leading = false
				s.mu.Unlock()
				if was {
					s.log.Info("stopped writing Ingress status")
				}
				if s.opts.OnLeading != nil {
					s.opts.OnLeading(false)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("status election: %w", err)
	}
	// RunOrDie returns when leadership is lost; stand again until ctx ends.
	for ctx.Err() == nil {
		le.Run(ctx)
	}
	s.leads.Wait()
	return nil
}

func (s *StatusWriter) lead(ctx context.Context) {
	s.mu.Lock()
	s.leading = true
	s.mu.Unlock()
	s.log.Info("writing Ingress status", "addresses", s.opts.Addresses)
	if s.opts.OnLeading != nil {
		s.opts.OnLeading(true)
	}
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	// Leading starts with a pass over every Ingress: another writer may
	// have left any of them behind.
	s.mu.Lock()
	s.all = true
	s.mu.Unlock()
	for {
		s.sync(ctx, false)
		select {
		case <-ctx.Done():
			shutdown := false
			select {
			case <-s.stopping:
				shutdown = true
			default:
			}
			if s.opts.ClearOnShutdown && shutdown {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				s.sync(cctx, true)
				cancel()
			}
			return
		case <-s.kick:
		case <-tick.C:
			s.mu.Lock()
			s.all = true
			s.mu.Unlock()
		}
	}
}

// statusWriters is how many status writes are in flight at once: one at a
// time, 10,000 Ingresses would take minutes even at a high client QPS.
const statusWriters = 16

// sync writes the status of the Ingresses to check (every cached one, or
// the dirty ones) that differs from what it should be: ours for served
// Ingresses, empty for ones that carry our addresses but are no longer
// ours. No write happens when nothing differs.
func (s *StatusWriter) sync(ctx context.Context, clearAll bool) {
	start := time.Now()
	s.mu.Lock()
	served := s.served
	if served == nil && !clearAll {
		// Before the first configuration is served every Ingress would
		// look no longer ours: clearing them all only to write them again
		// a moment later doubles the writes of every restart.
		s.mu.Unlock()
		return
	}
	first := !s.passed && len(served) > 0
	s.passed = s.passed || first
	all, dirty := s.all || clearAll, s.dirty
	s.all, s.dirty = false, nil
	// served is only ever replaced entry by entry under s.mu: the pass
	// reads it under the lock too.
	var ings []*networkingv1.Ingress
	if all {
		ings = s.w.AllIngresses()
	} else {
		for r := range dirty {
			if ing := s.w.Ingress(r.Namespace, r.Name); ing != nil {
				ings = append(ings, ing)
			}
		}
	}
	nServed := len(served)
	want := make([]bool, len(ings))
	for i, ing := range ings {
		want[i] = served[model.ObjectRef{Kind: "Ingress", Namespace: ing.Namespace, Name: ing.Name}]
	}
	s.mu.Unlock()
	var todo []*networkingv1.Ingress
	for i, ing := range ings {
		cur := ing.Status.LoadBalancer.Ingress
		var lb []networkingv1.IngressLoadBalancerIngress
		switch {
		case want[i] && !clearAll:
			lb = s.want
		case sameLB(cur, s.want) && len(cur) > 0:
			lb = nil
		default:
			continue
		}
		if sameLB(cur, lb) {
			continue
		}
		up := ing.DeepCopy()
		up.Status.LoadBalancer.Ingress = lb
		todo = append(todo, up)
	}
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range min(statusWriters, len(todo)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(todo) && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				up := todo[i]
				if _, err := s.cs.NetworkingV1().Ingresses(up.Namespace).UpdateStatus(ctx, up, metav1.UpdateOptions{}); err != nil {
					failed.Add(1)
					s.log.Warn("ingress status", "namespace", up.Namespace, "name", up.Name, "err", err)
					// Tried again at the next pass.
					s.mu.Lock()
					s.markDirty(model.ObjectRef{Kind: "Ingress", Namespace: up.Namespace, Name: up.Name})
					s.mu.Unlock()
					continue
				}
				s.log.Debug("ingress status written", "namespace", up.Namespace, "name", up.Name, "addresses", len(up.Status.LoadBalancer.Ingress))
			}
		})
	}
	wg.Wait()
	level := slog.LevelDebug
	if first || len(todo) > 0 {
		level = slog.LevelInfo
	}
	s.log.Log(ctx, level, "ingress status pass", "served", nServed, "checked", len(ings), "written", len(todo)-int(failed.Load()),
		"failed", failed.Load(), "took", time.Since(start).Round(time.Millisecond))
	if !clearAll {
		s.syncGatewayAPI(ctx)
	}
}

func sameLB(a, b []networkingv1.IngressLoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y networkingv1.IngressLoadBalancerIngress) bool {
		return x.IP == y.IP && x.Hostname == y.Hostname
	})
}

// DefaultPublishAddress is the address of the interface that carries the
// default route, used when --publish-address is not given and HAProxy binds
// every address.
func DefaultPublishAddress(bind string) string {
	if ip, err := netip.ParseAddr(bind); err == nil && !ip.IsUnspecified() {
		return ip.String()
	}
	// A UDP "connection" sends nothing; it only asks the kernel which source
	// address it would use towards a public destination.
	c, err := net.Dial("udp4", "198.51.100.1:9")
	if err != nil {
		return ""
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}
