package bgp

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParsePeerFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Peer
		err  string
	}{
		{in: "198.19.64.2", want: Peer{Address: netip.MustParseAddr("198.19.64.2")}},
		{in: "198.19.64.2,as=64513", want: Peer{Address: netip.MustParseAddr("198.19.64.2"), AS: 64513}},
		{in: "198.19.64.2,as=1.10", want: Peer{Address: netip.MustParseAddr("198.19.64.2"), AS: 65546}},
		{in: "198.19.64.2, as=64513 ,password-secret=kube-system/bgp", want: Peer{
			Address: netip.MustParseAddr("198.19.64.2"), AS: 64513,
			PasswordSecret: &SecretRef{Namespace: "kube-system", Name: "bgp", Key: "password"}}},
		{in: "198.19.64.2,password-secret=calico-system/bgp-secrets/node-mesh,port=1179", want: Peer{
			Address: netip.MustParseAddr("198.19.64.2"), Port: 1179,
			PasswordSecret: &SecretRef{Namespace: "calico-system", Name: "bgp-secrets", Key: "node-mesh"}}},
		{in: "198.19.64.254,trust-next-hop,ttl-security=1", want: Peer{
			Address: netip.MustParseAddr("198.19.64.254"), TrustNextHop: true, TTLSecurity: 1}},
		{in: "2001:db8:18::2,as=64513", want: Peer{Address: netip.MustParseAddr("2001:db8:18::2"), AS: 64513}},
		{in: "198.19.64.2,ttl-security=0", err: "hop count"},
		{in: "198.19.64.2,ttl-security=255", err: "hop count"},
		{in: "198.19.64.2,trust-next-hop=yes", err: "unknown option"},
		{in: "", err: "address"},
		{in: "node-1", err: "address"},
		{in: "fe80::1%eth0", err: "global IPv6"},
		{in: "::ffff:198.19.64.2", err: "global IPv6"},
		{in: "198.19.64.2,as=0", err: "AS number"},
		{in: "198.19.64.2,as=x", err: "AS number"},
		{in: "198.19.64.2,as=4294967296", err: "AS number"},
		{in: "198.19.64.2,as", err: "key=value"},
		{in: "198.19.64.2,ttl=3", err: "unknown option"},
		{in: "198.19.64.2,password-secret=bgp", err: "NAMESPACE/NAME"},
		{in: "198.19.64.2,password-secret=ns//key", err: "empty"},
		{in: "198.19.64.2,port=0", err: "port"},
		{in: "198.19.64.2,port=70000", err: "port"},
	} {
		got, err := ParsePeerFlag(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParsePeerFlag(%q) error = %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParsePeerFlag(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParsePeerFlag(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestParsePassivePeerFlag(t *testing.T) {
	got, err := ParsePassivePeerFlag("198.19.64.9/24,as=64512,password-secret=ns/s,ttl-security=2,trust-next-hop")
	if err != nil {
		t.Fatal(err)
	}
	want := PassivePeer{Prefix: netip.MustParsePrefix("198.19.64.0/24"), AS: 64512,
		PasswordSecret: &SecretRef{Namespace: "ns", Name: "s", Key: "password"}, TTLSecurity: 2, TrustNextHop: true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"198.19.64.1", "2001:db8::", "198.19.64.0/24,port=1", "198.19.64.0/24,as=-1"} {
		if _, err := ParsePassivePeerFlag(bad); err == nil {
			t.Errorf("ParsePassivePeerFlag(%q) accepted", bad)
		}
	}
}

func TestValidateDefaults(t *testing.T) {
	c := Config{LocalAS: 64512, ListenAddress: netip.MustParseAddr("198.19.64.1"),
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.64.7/18")}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.RouterID != c.ListenAddress || c.ListenPort != 179 || c.clusterAS(ClusterState{}) != 64512 || c.clusterAS(ClusterState{ASNumber: 64600}) != 64600 || c.BlockSize != 26 ||
		c.HoldTime != 30*time.Second || c.KeepaliveInterval != 10*time.Second || c.ConnectRetry != 5*time.Second ||
		c.MaxPrefixes != 10000 || c.StaleTimeout != 90*time.Second || c.GracefulRestartTime != 120*time.Second {
		t.Fatalf("defaults not filled: %+v", c)
	}
	if c.PodCIDRs[0] != netip.MustParsePrefix("198.18.64.0/18") {
		t.Fatalf("pod CIDR not masked: %v", c.PodCIDRs[0])
	}
}

func TestValidateErrors(t *testing.T) {
	pw := &SecretRef{Namespace: "a", Name: "b", Key: "c"}
	for _, tc := range []struct {
		name string
		c    Config
		want string
	}{
		{"no AS", Config{RouterID: netip.MustParseAddr("198.19.64.1")}, "local AS"},
		{"no router ID", Config{LocalAS: 1}, "router ID"},
		{"hold too short", Config{LocalAS: 1, RouterID: netip.MustParseAddr("198.19.64.1"), HoldTime: time.Second}, "hold time"},
		{"keepalive not below hold", Config{LocalAS: 1, RouterID: netip.MustParseAddr("198.19.64.1"), HoldTime: 3 * time.Second, KeepaliveInterval: 3 * time.Second}, "keepalive"},
		{"pod CIDR smaller than block", Config{LocalAS: 1, RouterID: netip.MustParseAddr("198.19.64.1"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/28")}}, "smaller than"},
		{"secret without kube", Config{LocalAS: 1, RouterID: netip.MustParseAddr("198.19.64.1"), Peers: []Peer{{Address: netip.MustParseAddr("198.19.64.2"), PasswordSecret: pw}}}, "Kubernetes"},
		{"nodes without kube", Config{LocalAS: 1, RouterID: netip.MustParseAddr("198.19.64.1"), PeerWithNodes: true}, "Kubernetes"},
		{"duplicate peer", Config{LocalAS: 1, RouterID: netip.MustParseAddr("198.19.64.1"), Peers: []Peer{{Address: netip.MustParseAddr("198.19.64.2")}, {Address: netip.MustParseAddr("198.19.64.2")}}}, "twice"},
		{"bad selector", Config{LocalAS: 1, RouterID: netip.MustParseAddr("198.19.64.1"), NodeSelector: "a in (("}, "selector"},
		{"passive without listener", Config{LocalAS: 1, RouterID: netip.MustParseAddr("198.19.64.1"), ListenPort: -1, PassivePeers: []PassivePeer{{Prefix: netip.MustParsePrefix("198.19.64.0/24")}}}, "listening"},
	} {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestSecretRefs(t *testing.T) {
	a := &SecretRef{Namespace: "n", Name: "a", Key: "password"}
	b := &SecretRef{Namespace: "n", Name: "b", Key: "password"}
	c := Config{
		Peers:        []Peer{{PasswordSecret: a}, {PasswordSecret: a}, {}},
		NodePassword: b,
		PassivePeers: []PassivePeer{{PasswordSecret: b}},
	}
	if got := c.SecretRefs(); !reflect.DeepEqual(got, []SecretRef{*a, *b}) {
		t.Fatalf("SecretRefs = %v", got)
	}
}
