package kube

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestMergeConditions(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC))
	accepted := metav1.Condition{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 2}
	cur := []metav1.Condition{accepted}
	cur[0].LastTransitionTime = then

	// Already right: no write, the time kept.
	got, changed := mergeConditions(cur, []metav1.Condition{accepted}, now)
	if changed || !got[0].LastTransitionTime.Equal(&then) {
		t.Errorf("same condition: changed %v, time %v", changed, got[0].LastTransitionTime)
	}
	// A new generation with the same status: a write, the time kept.
	next := accepted
	next.ObservedGeneration = 3
	got, changed = mergeConditions(cur, []metav1.Condition{next}, now)
	if !changed || !got[0].LastTransitionTime.Equal(&then) {
		t.Errorf("new generation: changed %v, time %v", changed, got[0].LastTransitionTime)
	}
	// A status change: a write with a new time.
	refused := metav1.Condition{Type: "Accepted", Status: metav1.ConditionFalse, Reason: "NotAllowedByListeners", ObservedGeneration: 2}
	got, changed = mergeConditions(cur, []metav1.Condition{refused}, now)
	if !changed || !got[0].LastTransitionTime.Equal(&now) {
		t.Errorf("status change: changed %v, time %v", changed, got[0].LastTransitionTime)
	}
	// A condition gone or added: a write.
	if _, changed = mergeConditions(cur, nil, now); !changed {
		t.Error("condition removed: no write")
	}
	if _, changed = mergeConditions(nil, []metav1.Condition{accepted}, now); !changed {
		t.Error("condition added: no write")
	}
}

func TestMergeParentsKeepsOtherControllers(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC))
	theirs := gwv1.RouteParentStatus{ParentRef: gwv1.ParentReference{Name: "other"}, ControllerName: "example.com/other",
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted"}}}
	ours := gwv1.RouteParentStatus{ParentRef: gwv1.ParentReference{Name: "edge"}, ControllerName: "perimeter.io/gateway-controller",
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted"}}}

	got, changed := mergeParents([]gwv1.RouteParentStatus{theirs}, []gwv1.RouteParentStatus{ours}, now)
	if !changed || len(got) != 2 || got[0].ControllerName != theirs.ControllerName || got[1].ControllerName != ours.ControllerName {
		t.Fatalf("first write: changed %v, parents %+v", changed, got)
	}
	// Written once, the same want is no write.
	if _, changed := mergeParents(got, []gwv1.RouteParentStatus{ours}, now); changed {
		t.Error("unchanged parents: a write")
	}
	// A different section of the same Gateway is another parent.
	sec := gwv1.SectionName("http")
	moved := ours
	moved.ParentRef.SectionName = &sec
	got2, changed := mergeParents(got, []gwv1.RouteParentStatus{moved}, now)
	if !changed || len(got2) != 2 || got2[1].ParentRef.SectionName == nil {
		t.Errorf("new parentRef: changed %v, parents %+v", changed, got2)
	}
}
