package testenv

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
)

// ManagedBy marks the EndpointSlices the tests write, so that a
// controller-manager, if one ever runs, leaves them alone.
const ManagedBy = "perimeter-tests"

// ServicePort is one port of a test Service; the EndpointSlice carries the
// same name with TargetPort.
type ServicePort struct {
	Name       string // default "http"
	Port       int32  // default 80
	TargetPort int32  // default 8080, where test pods listen
}

// Endpoint is one address of a Service's EndpointSlice. The zero value apart
// from IP is a ready, serving endpoint.
type Endpoint struct {
	IP string
	// NotReady: failing readiness (ready=false, serving=false).
	NotReady bool
	// Terminating: being deleted (ready=false, terminating=true; serving
	// stays true unless NotReady, as Kubernetes reports it).
	Terminating bool
	// NodeName is the node running the pod, as the EndpointSlice
	// controller writes it ("": not set).
	NodeName string
}

// ServiceSpec describes a selectorless Service and its one EndpointSlice.
type ServiceSpec struct {
	Namespace string
	Name      string
	Ports     []ServicePort // default: one port http 80 -> 8080
	Endpoints []Endpoint
	// Headless creates the Service without a cluster IP: the test bed's
	// service range holds only 4,096.
	Headless bool
}

// Service is a Service whose endpoints the test controls.
type Service struct {
	Namespace, Name string
	SliceName       string
	Ports           []ServicePort
	c               *Cluster
}

// CreateService creates the Service and its EndpointSlice, failing the test on error.
func (c *Cluster) CreateService(tb testing.TB, spec ServiceSpec) *Service {
	tb.Helper()
	s, err := c.CreateServiceCtx(context.Background(), spec)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// CreateServiceCtx creates a selectorless Service and its EndpointSlice
// (label kubernetes.io/service-name, managed-by ManagedBy, port names as in
// the Service), as the endpointslice controller would for a selector.
func (c *Cluster) CreateServiceCtx(ctx context.Context, spec ServiceSpec) (*Service, error) {
	ports := spec.Ports
	if len(ports) == 0 {
		ports = []ServicePort{{}}
	}
	s := &Service{Namespace: spec.Namespace, Name: spec.Name, SliceName: spec.Name + "-tests", c: c}
	for _, p := range ports {
		if p.Name == "" {
			p.Name = "http"
		}
		if p.Port == 0 {
			p.Port = 80
		}
		if p.TargetPort == 0 {
			p.TargetPort = 8080
		}
		s.Ports = append(s.Ports, p)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace}}
	if spec.Headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	for _, p := range s.Ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name: p.Name, Port: p.Port, TargetPort: intstr.FromInt32(p.TargetPort), Protocol: corev1.ProtocolTCP,
		})
	}
	if _, err := c.Admin.CoreV1().Services(s.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create service %s/%s: %w", s.Namespace, s.Name, err)
	}
	slice, err := s.slice(spec.Endpoints)
	if err != nil {
		return nil, err
	}
	if _, err := c.Admin.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create endpointslice %s/%s: %w", s.Namespace, s.SliceName, err)
	}
	return s, nil
}

// SetEndpoints replaces the Service's endpoints, failing the test on error.
func (s *Service) SetEndpoints(tb testing.TB, eps ...Endpoint) {
	tb.Helper()
	if err := s.SetEndpointsCtx(context.Background(), eps...); err != nil {
		tb.Fatal(err)
	}
}

// SetEndpointsCtx replaces the endpoint list of the Service's EndpointSlice.
func (s *Service) SetEndpointsCtx(ctx context.Context, eps ...Endpoint) error {
	_, _, err := s.writeEndpoints(ctx, eps)
	return err
}

// WriteEndpoints is SetEndpoints for convergence figures: it returns when
// the write that succeeded was sent, so that a figure starts at the
// change, not at the read before it.
func (s *Service) WriteEndpoints(tb testing.TB, eps ...Endpoint) time.Time {
	tb.Helper()
	sent, _ := s.WriteEndpointsAcked(tb, eps...)
	return sent
}

// WriteEndpointsAcked is WriteEndpoints that also returns when the API
// server answered the write: what comes after that is the watchers' share.
func (s *Service) WriteEndpointsAcked(tb testing.TB, eps ...Endpoint) (sent, acked time.Time) {
	tb.Helper()
	sent, acked, err := s.writeEndpoints(context.Background(), eps)
	if err != nil {
		tb.Fatal(err)
	}
	return sent, acked
}

func (s *Service) writeEndpoints(ctx context.Context, eps []Endpoint) (sent, acked time.Time, err error) {
	want, err := s.slice(eps)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	slices := s.c.Admin.DiscoveryV1().EndpointSlices(s.Namespace)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := slices.Get(ctx, s.SliceName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Endpoints = want.Endpoints
		cur.Ports = want.Ports
		sent = time.Now()
		_, err = slices.Update(ctx, cur, metav1.UpdateOptions{})
		acked = time.Now()
		return err
	})
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("update endpointslice %s/%s: %w", s.Namespace, s.SliceName, err)
	}
	return sent, acked, nil
}

func (s *Service) slice(eps []Endpoint) (*discoveryv1.EndpointSlice, error) {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.SliceName, Namespace: s.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: s.Name,
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, p := range s.Ports {
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{
			Name: ptr(p.Name), Port: ptr(p.TargetPort), Protocol: ptr(corev1.ProtocolTCP),
		})
	}
	for _, e := range eps {
		a, err := netip.ParseAddr(e.IP)
		if err != nil || !a.Is4() {
			return nil, fmt.Errorf("service %s/%s: endpoint %q is not an IPv4 address", s.Namespace, s.Name, e.IP)
		}
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{a.String()},
			Conditions: discoveryv1.EndpointConditions{
				Ready:       ptr(!e.NotReady && !e.Terminating),
				Serving:     ptr(!e.NotReady),
				Terminating: ptr(e.Terminating),
			},
		})
		if e.NodeName != "" {
			slice.Endpoints[len(slice.Endpoints)-1].NodeName = ptr(e.NodeName)
		}
	}
	return slice, nil
}

func ptr[T any](v T) *T { return &v }
