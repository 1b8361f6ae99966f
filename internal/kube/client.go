// Package kube is the daemon's edge towards the Kubernetes API: clients,
// informers, snapshots of their caches, and the writers of Events and status.
package kube

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
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
	// The informers' streamed lists would come gzipped, and so would
	// every later event on those streams, each compressed apart: CPU the
	// API server spends on every change the daemon watches, its own
	// status writes among them (at 10,000 Ingresses, 10,000 events at the
	// first start). An edge host reaches its API server over a LAN, where
	// the bytes saved are worth less than that CPU.
	cfg.DisableCompression = true
	// The built-in types travel as protobuf: at 10,000 Services the
	// initial lists and the stream of EndpointSlice changes decode in a
	// fraction of the CPU and garbage JSON costs. The config returned stays
	// JSON, for the clients of custom resources, which only speak that.
	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType = runtime.ContentTypeProtobuf
	pcfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := kubernetes.NewForConfig(pcfg)
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
