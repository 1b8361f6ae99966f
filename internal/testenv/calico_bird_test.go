package testenv_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Every shape of node the tests and the lab render must be a configuration
// BIRD 2 accepts (bird -p parses it and exits).
func TestCalicoBirdConfigParses(t *testing.T) {
	if _, err := exec.LookPath("bird"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("needs bird (apt-get install bird2)")
		}
		t.Skip("needs bird (apt-get install bird2)")
	}
	for name, n := range map[string]testenv.CalicoNode{
		"mesh and edge": {Address: "198.19.200.11", Pools: []string{"198.18.200.0/24"},
			Blocks: []string{"198.18.200.0/26", "198.18.200.128/26"}, Mesh: []string{"198.19.200.11", "198.19.200.12"},
			Peers: []testenv.CalicoPeer{{Address: "198.19.200.1", Port: 1790, AS: 64512, Password: "s3cret"}}},
		"ebgp edge, no mesh": {Address: "198.19.200.12", AS: 64513, Pools: []string{"198.18.200.0/24"},
			Peers: []testenv.CalicoPeer{{Address: "198.19.200.1", AS: 65000}}},
		"nothing yet": {Address: "198.19.200.13"},
	} {
		t.Run(name, func(t *testing.T) {
			conf, err := testenv.CalicoBirdConfig(n)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "bird.conf")
			if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("bird", "-p", "-c", path).CombinedOutput(); err != nil {
				t.Fatalf("bird -p: %v: %s\n%s", err, out, conf)
			}
			for _, b := range n.Blocks {
				if !strings.Contains(conf, "route "+b+" blackhole;") {
					t.Errorf("block %s not exported as a blackhole:\n%s", b, conf)
				}
			}
		})
	}
}
