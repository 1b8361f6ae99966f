package kube

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/perimeter-ingress/perimeter/internal/model"
	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// TestTenantSecretWatchCapSelect: references outside the served namespaces
// are refused (except the operator's), new references over a cap are
// refused, and running watches are never dropped for newer ones.
func TestTenantSecretWatchCapSelect(t *testing.T) {
	w := NewWatcher(fake.NewClientset(), WatchOptions{
		ConfigMap:              "ops/perimeter",
		NamespaceWhitelist:     []string{"victim", "attacker"},
		NamespaceBlacklist:     []string{"attacker-2"},
		MaxSecrets:             6,
		MaxSecretsPerNamespace: 3,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))

	want, refused := w.selectSecrets([]string{"attacker/a1", "attacker/a2", "attacker/a3", "attacker/a4", "attacker/a5",
		"victim/v1", "kube-system/x", "ops/default-cert", "attacker/a1"})
	for _, r := range []string{"attacker/a1", "attacker/a2", "attacker/a3", "victim/v1", "ops/default-cert"} {
		if !want[r] {
			t.Errorf("%s not watched", r)
		}
	}
	if len(want) != 5 {
		t.Errorf("watched %v, want 5", want)
	}
	if why := refused["kube-system/x"]; !strings.Contains(why, "not served") {
		t.Errorf("kube-system/x: %q", why)
	}
	for _, r := range []string{"attacker/a4", "attacker/a5"} {
		if why := refused[r]; !strings.Contains(why, "--max-watched-secrets-per-namespace") {
			t.Errorf("%s: %q", r, why)
		}
	}

	// Running watches stay; the global cap refuses the newest.
	w.watched = want
	want, refused = w.selectSecrets([]string{"attacker/a1", "attacker/a2", "attacker/a3", "victim/v1", "ops/default-cert",
		"victim/v2", "victim/v3"})
	if !want["victim/v2"] || want["victim/v3"] || len(want) != 6 {
		t.Errorf("watched %v, want the 5 running and victim/v2", want)
	}
	if why := refused["victim/v3"]; !strings.Contains(why, "--max-watched-secrets allows") {
		t.Errorf("victim/v3: %q", why)
	}
}

// TestTenantSecretWatchCapCoalesce: a namespace with many referenced
// Secrets is watched with one watch; only referenced Secrets keep their
// data; a Secret referenced later gets its data through a new list while
// the old watch keeps serving.
func TestTenantSecretWatchCapCoalesce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	var refs []string
	for i := range 10 {
		name := fmt.Sprintf("s%d", i)
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: name}, Data: map[string][]byte{"k": []byte(name)}}
		if _, err := cs.CoreV1().Secrets("t").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i < 9 {
			refs = append(refs, "t/"+name)
		}
	}
	w := NewWatcher(cs, WatchOptions{CoalesceSecrets: 8}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !w.WatchSecrets(refs) {
		t.Fatal("no watch started")
	}
	if len(w.secrets) != 0 || len(w.nsSecrets) != 1 {
		t.Fatalf("%d single and %d namespace watches, want 0 and 1", len(w.secrets), len(w.nsSecrets))
	}
	waitSecrets := func(want int) *model.Snapshot {
		t.Helper()
		var s *model.Snapshot
		testenv.Eventually(t, 10*time.Second, func() error {
			s = w.Snapshot()
			if len(s.Secrets) != want || len(s.PendingSecrets) != 0 {
				return fmt.Errorf("snapshot: %d Secrets, pending %v; want %d", len(s.Secrets), s.PendingSecrets, want)
			}
			return nil
		})
		return s
	}
	s := waitSecrets(9)
	for _, sec := range s.Secrets {
		if string(sec.Data["k"]) != sec.Name {
			t.Errorf("%s: data %q", sec.Name, sec.Data["k"])
		}
	}
	n := w.nsSecrets["t"]
	o, ok, _ := n.inf.GetStore().GetByKey("t/s9")
	if !ok || !stripped(o) || len(o.(*corev1.Secret).Data) != 0 {
		t.Fatalf("unreferenced t/s9 cached with its data: %v", o)
	}
	if sz := w.Sizes(); sz["secret_watches"] != 1 || sz["secrets"] != 9 {
		t.Errorf("sizes %v", sz)
	}

	// t/s9 referenced now: listed again, with its data.
	if !w.WatchSecrets(append(refs, "t/s9")) {
		t.Fatal("no new list for t/s9")
	}
	s = waitSecrets(10)
	for _, sec := range s.Secrets {
		if string(sec.Data["k"]) != sec.Name {
			t.Errorf("%s: data %q", sec.Name, sec.Data["k"])
		}
	}
	// No reference left: the namespace watch ends.
	w.WatchSecrets(nil)
	if len(w.nsSecrets) != 0 || len(w.secrets) != 0 || len(w.Snapshot().Secrets) != 0 {
		t.Errorf("after dropping every reference: %d namespace watches, %d single", len(w.nsSecrets), len(w.secrets))
	}
}
