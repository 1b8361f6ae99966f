package testenv

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/perimeter-ingress/perimeter/internal/testenv/echo"
)

// WorkloadOptions says which namespaces Workloads looks after and where its
// pods live.
type WorkloadOptions struct {
	Namespaces []string
	// Pool is where pod addresses come from: addresses the caller's echo
	// servers answer on (an AnyIP local route), e.g. 198.18.240.0/20.
	Pool netip.Prefix
	// Pods learns which pod each address belongs to; the pods' logs in it
	// are served as theirs through the API server (pods/log).
	Pods *echo.Pods
}

// Workloads plays, for the Deployments and Services of a few namespaces,
// the parts of Kubernetes the test bed lacks: the Deployment controller and
// kubelet (a Deployment gets its replicas as Pods, Running and Ready with an
// address from the pool, their logs readable through the API server) and
// the EndpointSlice controller (a Service with a
// selector gets a slice of the ready Pods it selects). Manifests written for
// a real cluster then work unchanged, as long as their containers are
// servers the caller's echo servers can stand in for.
type Workloads struct {
	c    *Cluster
	opts WorkloadOptions

	mu   sync.Mutex
	next netip.Addr
	err  error
}

// bedLabel marks the Pods Workloads made, naming their Deployment.
const bedLabel = "testenv.perimeter.io/deployment"

// StartWorkloads reconciles until the test ends, every 200 ms, and serves
// the pods' logs (see NodeName) until then.
func StartWorkloads(tb testing.TB, c *Cluster, opts WorkloadOptions) *Workloads {
	tb.Helper()
	if opts.Pods != nil {
		c.serveLogs(tb, opts.Pods)
	}
	w := &Workloads{c: c, opts: opts, next: opts.Pool.Masked().Addr().Next()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			err := w.Reconcile(ctx)
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	tb.Cleanup(func() { cancel(); <-done })
	return w
}

// Err is the error of the last reconcile pass, nil when it went through.
func (w *Workloads) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Reconcile makes one pass over the namespaces.
func (w *Workloads) Reconcile(ctx context.Context) error {
	for _, ns := range w.opts.Namespaces {
		if err := w.reconcileNamespace(ctx, ns); err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	return nil
}

func (w *Workloads) reconcileNamespace(ctx context.Context, ns string) error {
	cs := w.c.Admin
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	// The ServiceAccount admission refuses Pods without the namespace's
	// default account, which the controller-manager would create.
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	deps, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: bedLabel})
	if err != nil {
		return err
	}
	have := map[string]*corev1.Pod{}
	for i := range pods.Items {
		have[pods.Items[i].Name] = &pods.Items[i]
	}
	want := map[string]bool{}
	for i := range deps.Items {
		d := &deps.Items[i]
		n := int32(1)
		if d.Spec.Replicas != nil {
			n = *d.Spec.Replicas
		}
		for r := range n {
			name := podName(d, int(r))
			want[name] = true
			if err := w.ensurePod(ctx, d, name, have[name]); err != nil {
				return err
			}
		}
	}
	for name, p := range have {
		if want[name] {
			continue
		}
		if a, err := netip.ParseAddr(p.Status.PodIP); err == nil {
			w.opts.Pods.Delete(a)
		}
		if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	pods, err = cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	svcs, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range svcs.Items {
		if err := w.ensureSlice(ctx, &svcs.Items[i], pods.Items); err != nil {
			return err
		}
	}
	return nil
}

// ensurePod creates the Pod of a Deployment's replica and reports it
// Running and Ready, as the kubelet would once its containers started.
func (w *Workloads) ensurePod(ctx context.Context, d *appsv1.Deployment, name string, p *corev1.Pod) error {
	pods := w.c.Admin.CoreV1().Pods(d.Namespace)
	if p == nil {
		lbls := maps.Clone(d.Spec.Template.Labels)
		if lbls == nil {
			lbls = map[string]string{}
		}
		lbls[bedLabel] = d.Name
		spec := *d.Spec.Template.Spec.DeepCopy()
		spec.NodeName = NodeName
		created, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: d.Namespace, Labels: lbls,
				Annotations: d.Spec.Template.Annotations},
			Spec: spec,
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("pod %s: %w", name, err)
		}
		p = created
	}
	addr, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		if addr, err = w.allocate(); err != nil {
			return err
		}
	}
	w.opts.Pods.Set(addr, echo.Pod{Namespace: p.Namespace, Name: p.Name})
	if p.Status.Phase == corev1.PodRunning && podReady(p) {
		return nil
	}
	now := metav1.Now()
	p.Status = corev1.PodStatus{
		Phase:  corev1.PodRunning,
		PodIP:  addr.String(),
		PodIPs: []corev1.PodIP{{IP: addr.String()}},
		HostIP: addr.String(),
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		StartTime: &now,
	}
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("pod %s status: %w", p.Name, err)
	}
	return nil
}

// podName names a replica as the ReplicaSet controller would,
// <deployment>-<template hash>-<5 characters>: the conformance suite takes
// the backend's name from a pod's by dropping the last two parts.
func podName(d *appsv1.Deployment, replica int) string {
	h := fnv.New64a()
	h.Write([]byte(d.Namespace + "/" + d.Name))
	// Kubernetes' alphabet for generated names: no vowels, no 0, 1 or 3.
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	enc := func(v uint64, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[v%uint64(len(alphabet))]
			v /= uint64(len(alphabet))
		}
		return string(b)
	}
	sum := h.Sum64()
	return d.Name + "-" + enc(sum, 10) + "-" + enc(sum>>7+uint64(replica)*7919, 5)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (w *Workloads) allocate() (netip.Addr, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a := w.next
	if !w.opts.Pool.Contains(a) {
		return netip.Addr{}, fmt.Errorf("pod address pool %s exhausted", w.opts.Pool)
	}
	w.next = a.Next()
	return a, nil
}

// ensureSlice writes the EndpointSlice of a Service with a selector: its
// ports resolved against the selected Pods' containers, the ready Pods as
// endpoints.
func (w *Workloads) ensureSlice(ctx context.Context, svc *corev1.Service, pods []corev1.Pod) error {
	if len(svc.Spec.Selector) == 0 || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	var selected []corev1.Pod
	for _, p := range pods {
		if sel.Matches(labels.Set(p.Labels)) && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			selected = append(selected, p)
		}
	}
	slices.SortFunc(selected, func(a, b corev1.Pod) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: svc.Name + "-testenv", Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, sp := range svc.Spec.Ports {
		port := targetPort(sp, selected)
		want.Ports = append(want.Ports, discoveryv1.EndpointPort{
			Name: ptr(sp.Name), Port: &port, Protocol: ptr(sp.Protocol), AppProtocol: sp.AppProtocol,
		})
	}
	for _, p := range selected {
		ready := podReady(&p)
		want.Endpoints = append(want.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{p.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr(ready), Serving: ptr(ready), Terminating: ptr(false),
			},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
			NodeName:  ptr(p.Spec.NodeName),
		})
	}
	eps := w.c.Admin.DiscoveryV1().EndpointSlices(svc.Namespace)
	cur, err := eps.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = eps.Create(ctx, want, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if sameList(cur.Ports, want.Ports) && sameList(cur.Endpoints, want.Endpoints) {
		return nil
	}
	cur.Ports, cur.Endpoints = want.Ports, want.Endpoints
	_, err = eps.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// sameList compares as the API server stores lists: an empty one comes
// back as nil.
func sameList[T any](a, b []T) bool {
	return (len(a) == 0 && len(b) == 0) || reflect.DeepEqual(a, b)
}

// targetPort is the port the endpoints listen on: a number, a container
// port's name looked up in the selected Pods, or the Service port itself.
func targetPort(sp corev1.ServicePort, pods []corev1.Pod) int32 {
	switch {
	case sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal != 0:
		return sp.TargetPort.IntVal
	case sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal != "":
		for _, p := range pods {
			for _, c := range p.Spec.Containers {
				for _, cp := range c.Ports {
					if cp.Name == sp.TargetPort.StrVal {
						return cp.ContainerPort
					}
				}
			}
		}
	}
	return sp.Port
}
