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
// BIRD 1.6 accepts (bird -p parses it and exits).
func TestCalicoBirdConfigParses(t *testing.T) {
	testenv.RequireBird1(t)
	bird, _, err := testenv.Bird1()
	if err != nil {
		t.Fatal(err)
	}
	pool := []string{"198.18.200.0/24"}
	for name, n := range map[string]testenv.CalicoNode{
		"mesh and edge": {Address: "198.19.200.11", Pools: pool,
			Blocks: []string{"198.18.200.0/26", "198.18.200.128/26"}, Mesh: []string{"198.19.200.11", "198.19.200.12"},
			Peers: []testenv.CalicoPeer{{Address: "198.19.200.1", Port: 1790, AS: 64512, Password: "s3cret"}}},
		"ebgp edge, no mesh": {Address: "198.19.200.12", AS: 64513, Pools: pool,
			Peers: []testenv.CalicoPeer{{Address: "198.19.200.1", AS: 65000}}},
		"ebgp edge, next hop keep, ttl security": {Address: "198.19.200.12", Pools: pool, Blocks: []string{"198.18.200.64/26"},
			PendingDeletion: []string{"198.18.200.192/26"}, NoExportPools: []string{"198.18.201.0/24"},
			Mesh:  []string{"198.19.200.11", "198.19.200.12"},
			Peers: []testenv.CalicoPeer{{Address: "198.19.200.1", AS: 65000, NextHopMode: "Keep", TTLSecurity: 1}}},
		"route reflector": {Address: "198.19.200.10", Pools: pool, RRClusterID: "224.0.0.1", ListenPort: 1179,
			NodePeers: []testenv.CalicoNodePeer{{Address: "198.19.200.11"}, {Address: "198.19.200.12"}},
			Peers:     []testenv.CalicoPeer{{Address: "198.19.200.1", AS: 64512, NextHopMode: "Self"}}},
		"host-local podCIDR": {Address: "198.19.200.13", Pools: []string{"198.18.192.0/18"}, Blocks: []string{"198.18.201.0/24"},
			NodePeers: []testenv.CalicoNodePeer{{Address: "198.19.200.10", RRClusterID: "224.0.0.1"}}},
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
			if out, err := exec.Command(bird, "-p", "-c", path).CombinedOutput(); err != nil {
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

// calico-node's bird6 (IPv6 pools) renders into a configuration BIRD 1.6's
// bird6 accepts, for the same shapes of node.
func TestCalicoBird6ConfigParses(t *testing.T) {
	testenv.RequireBird1(t)
	bird6, _, err := testenv.Bird6()
	if err != nil {
		t.Fatal(err)
	}
	pool := []string{"2001:db8:18::/64"}
	for name, n := range map[string]testenv.CalicoNode{
		"mesh and edge": {Address: "2001:db8:18:ff::11", RouterID: "198.19.200.11", Pools: pool,
			Blocks: []string{"2001:db8:18::/122", "2001:db8:18::40/122"}, Mesh: []string{"2001:db8:18:ff::11", "2001:db8:18:ff::12"},
			Peers: []testenv.CalicoPeer{{Address: "2001:db8:18:ff::1", Port: 1790, AS: 64512, Password: "s3cret"}}},
		"ebgp edge, next hop keep, ttl security": {Address: "2001:db8:18:ff::12", RouterID: "198.19.200.12", Pools: pool,
			Blocks: []string{"2001:db8:18::80/122"}, NoExportPools: []string{"2001:db8:18:1::/64"},
			Peers: []testenv.CalicoPeer{{Address: "2001:db8:18:ff::1", AS: 65000, NextHopMode: "Keep", TTLSecurity: 1}}},
		"route reflector": {Address: "2001:db8:18:ff::10", RouterID: "198.19.200.10", Pools: pool, RRClusterID: "224.0.0.1",
			NodePeers: []testenv.CalicoNodePeer{{Address: "2001:db8:18:ff::11"}}},
	} {
		t.Run(name, func(t *testing.T) {
			conf, err := testenv.CalicoBird6Config(n)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "bird6.conf")
			if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(bird6, "-p", "-c", path).CombinedOutput(); err != nil {
				t.Fatalf("bird6 -p: %v: %s\n%s", err, out, conf)
			}
			if !strings.Contains(conf, "router id "+n.RouterID+";") || !strings.Contains(conf, "source address "+n.Address+";") {
				t.Fatalf("router id or source address:\n%s", conf)
			}
		})
	}
	if _, err := testenv.CalicoBird6Config(testenv.CalicoNode{Address: "2001:db8:18:ff::11"}); err == nil {
		t.Fatal("bird6 configuration without an IPv4 router id accepted")
	}
	if _, err := testenv.CalicoBirdConfig(testenv.CalicoNode{Address: "2001:db8:18:ff::11"}); err == nil {
		t.Fatal("IPv4 configuration with an IPv6 address accepted")
	}
}
