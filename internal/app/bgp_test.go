package app

import (
	"io"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/bgp"
	"github.com/perimeter-ingress/perimeter/internal/config"
)

func TestBGPConfigNodePassword(t *testing.T) {
	c := &config.Config{}
	c.BGP.LocalAS = 64512
	c.BGP.PeersFromNodes = true
	c.BGP.NodePassword = "calico-system/bgp-password/mesh"
	cfg, err := BGPConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	want := bgp.SecretRef{Namespace: "calico-system", Name: "bgp-password", Key: "mesh"}
	if cfg.NodePassword == nil || *cfg.NodePassword != want {
		t.Fatalf("NodePassword = %v, want %v", cfg.NodePassword, want)
	}
	c.BGP.NodePassword = "no-namespace"
	if _, err := BGPConfig(c); err == nil {
		t.Fatal("a Secret reference without a name was accepted")
	}
}

// The flags of Calico's BGPPeer settings reach the speaker's configuration.
func TestBGPConfigCalicoPeerSettings(t *testing.T) {
	c, err := parseFlags("--bgp-local-as=65000", "--bgp-peers-from-nodes",
		"--bgp-node-selector=route-reflector=true", "--bgp-node-port=1790", "--bgp-node-ttl-security=2",
		"--bgp-ebgp-multihop=3", "--bgp-block-size=24",
		"--bgp-passive-prefix=198.51.100.0/28,as=65001,trust-next-hop", "--bgp-passive-prefix=203.0.113.0/28,ttl-security=1",
		"--bgp-peer=198.51.100.20,as=65002,ttl-security=1,trust-next-hop")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := BGPConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeSelector != "route-reflector=true" || cfg.NodePort != 1790 || cfg.NodeTTLSecurity != 2 ||
		cfg.EBGPMultihopTTL != 3 || cfg.BlockSize != 24 || len(cfg.PassivePeers) != 2 || !cfg.PassivePeers[0].TrustNextHop ||
		cfg.PassivePeers[1].TTLSecurity != 1 || len(cfg.Peers) != 1 || !cfg.Peers[0].TrustNextHop || cfg.Peers[0].TTLSecurity != 1 {
		t.Fatalf("config %+v", cfg)
	}
	for _, bad := range [][]string{{"--bgp-node-ttl-security=255"}, {"--bgp-node-port=70000"}, {"--bgp-ebgp-multihop=256"}} {
		c, err := parseFlags(append([]string{"--bgp-local-as=65000"}, bad...)...)
		if err != nil {
			continue
		}
		if _, err := BGPConfig(c); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func parseFlags(args ...string) (*config.Config, error) {
	c := &config.Config{}
	fs := c.FlagSet("perimeter", io.Discard)
	if err := fs.Parse(append([]string{"--config=/dev/null"}, args...)); err != nil {
		return nil, err
	}
	return c, nil
}

// IPv6 (Calico's bird6 sessions): an IPv6 listen address beside the IPv4
// one, IPv6 pod CIDRs with /122 blocks, IPv6 static peers.
func TestBGPConfigIPv6(t *testing.T) {
	c, err := parseFlags("--bgp-local-as=64512", "--bgp-listen-address=198.51.100.10", "--bgp-listen-address-ipv6=2001:db8:18::10",
		"--pod-cidr=198.18.0.0/16", "--pod-cidr=2001:db8:18::/48", "--bgp-peer=2001:db8:19::2,as=64513")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := BGPConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ListenAddress.String() != "198.51.100.10" || cfg.ListenAddress6.String() != "2001:db8:18::10" ||
		len(cfg.PodCIDRs) != 2 || len(cfg.Peers) != 1 || !cfg.Peers[0].Address.Is6() {
		t.Fatalf("config %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.BlockSize != 26 || cfg.BlockSize6 != 122 || cfg.RouterID.String() != "198.51.100.10" {
		t.Fatalf("defaults: block sizes /%d /%d, router ID %s", cfg.BlockSize, cfg.BlockSize6, cfg.RouterID)
	}
	for _, bad := range []string{"198.51.100.11", "fe80::1%eth0", "nonsense"} {
		c, err := parseFlags("--bgp-local-as=64512", "--bgp-listen-address-ipv6="+bad)
		if err != nil {
			continue
		}
		cfg, err := BGPConfig(c)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil {
			t.Errorf("--bgp-listen-address-ipv6=%s accepted", bad)
		}
	}
}
