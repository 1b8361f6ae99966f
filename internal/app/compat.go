package app

import (
	"context"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// publishServiceAddresses are the addresses --publish-service names for
// Ingress status, as the HAProxy Kubernetes Ingress Controller takes them:
// the Service's load-balancer ingress (IPs, else host names), else its
// external IPs.
func publishServiceAddresses(ctx context.Context, cs kubernetes.Interface, nsName string) ([]string, error) {
	ns, name, _ := strings.Cut(nsName, "/")
	svc, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("--publish-service %s: %w", nsName, err)
	}
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		switch {
		case in.IP != "":
			out = append(out, in.IP)
		case in.Hostname != "":
			out = append(out, in.Hostname)
		}
	}
	if len(out) == 0 {
		out = append(out, svc.Spec.ExternalIPs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--publish-service %s: the Service has no load-balancer address and no external IP", nsName)
	}
	return out, nil
}

// servePprof adds Go's profiler (--pprof) to the controller mux.
func servePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
