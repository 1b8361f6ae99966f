package app

import (
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
