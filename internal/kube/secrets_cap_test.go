package kube

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
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
	for r := range want {
		w.secrets[r] = &namedInformer{}
	}
	want, refused = w.selectSecrets([]string{"attacker/a1", "attacker/a2", "attacker/a3", "victim/v1", "ops/default-cert",
		"victim/v2", "victim/v3"})
	if !want["victim/v2"] || want["victim/v3"] || len(want) != 6 {
		t.Errorf("watched %v, want the 5 running and victim/v2", want)
	}
	if why := refused["victim/v3"]; !strings.Contains(why, "--max-watched-secrets allows") {
		t.Errorf("victim/v3: %q", why)
	}
}
