package kube

import (
	"os"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// AnnounceEvents records an Event for every announce and withdraw of the
// ingress addresses (ha.md). They go on the election Lease, the one object
// every edge of the ingress shares, so `kubectl describe lease` tells the
// story of all edges; the Event's source host says which edge.
func AnnounceEvents(cs kubernetes.Interface, namespace, name string) (emit func(announced bool, reason, message string), stop func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	host, _ := os.Hostname()
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "perimeter", Host: host})
	lease := &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
	}
	return func(announced bool, reason, message string) {
		if announced {
			rec.Eventf(lease, corev1.EventTypeNormal, "Announced", "%s: %s", host, message)
			return
		}
		rec.Eventf(lease, corev1.EventTypeWarning, "Withdrawn", "%s: %s: %s", host, reason, message)
	}, b.Shutdown
}
