package kube

import (
	"log/slog"
	"os"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// Problems turns model problems into log lines and Kubernetes Events. A
// problem is reported when it first appears, not on every rebuild: the model
// runs on every change and would otherwise repeat the same Event forever.
type Problems struct {
	log      *slog.Logger
	recorder record.EventRecorder
	lookup   func(model.ObjectRef) runtime.Object

	mu   sync.Mutex
	seen map[model.Problem]bool
}

// NewProblems records Events through cs (rate limited and aggregated by
// client-go's correlator). lookup finds the object an Event belongs to.
func NewProblems(cs kubernetes.Interface, lookup func(model.ObjectRef) runtime.Object, log *slog.Logger) (*Problems, func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	host, _ := os.Hostname()
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "perimeter", Host: host})
	return &Problems{log: log, recorder: rec, lookup: lookup, seen: map[model.Problem]bool{}}, b.Shutdown
}

// Report logs and records the problems not reported before; problems that
// disappeared are forgotten so that a recurrence is reported again.
func (p *Problems) Report(problems []model.Problem) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := make(map[model.Problem]bool, len(problems))
	for _, pr := range problems {
		now[pr] = true
		if p.seen[pr] {
			continue
		}
		p.log.Warn("rejected", "kind", pr.Object.Kind, "namespace", pr.Object.Namespace,
			"name", pr.Object.Name, "reason", pr.Reason, "message", pr.Message)
		if obj := p.object(pr.Object); obj != nil {
			p.recorder.Event(obj, corev1.EventTypeWarning, pr.Reason, pr.Message)
		}
	}
	p.seen = now
}

func (p *Problems) object(ref model.ObjectRef) runtime.Object {
	if p.lookup != nil {
		if o := p.lookup(ref); o != nil {
			return o
		}
	}
	if ref.Name == "" {
		return nil
	}
	// Not cached (e.g. a Secret that failed to load): an ObjectReference is
	// enough for the Event to show up with the object.
	return &corev1.ObjectReference{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, APIVersion: apiVersion(ref.Kind)}
}

func apiVersion(kind string) string {
	switch kind {
	case "Ingress", "IngressClass":
		return "networking.k8s.io/v1"
	case "EndpointSlice":
		return "discovery.k8s.io/v1"
	case "GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute", "ReferenceGrant", "TLSRoute", "TCPRoute":
		return model.GatewayGroup + "/v1"
	}
	return "v1"
}
