// Package kube is the daemon's edge towards the Kubernetes API: clients,
// informers, snapshots of their caches, and the writers of Events and status.
package kube

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Connect loads a kubeconfig and checks that the API server answers, so a
// wrong path or an unreachable cluster is one clear start-up error instead of
// informers retrying forever.
func Connect(ctx context.Context, kubeconfig string, userAgent string) (*rest.Config, kubernetes.Interface, error) {
	if kubeconfig == "" {
		return nil, nil, fmt.Errorf("no kubeconfig given (--kubeconfig)")
	}
	if _, err := os.Stat(kubeconfig); err != nil {
		return nil, nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = userAgent
	// Status writes for thousands of Ingresses and the initial lists would
	// otherwise crawl at client-go's default 5 QPS.
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/version").Do(vctx).Raw(); err != nil {
		return nil, nil, fmt.Errorf("API server %s unreachable: %w", cfg.Host, err)
	}
	return cfg, cs, nil
}
