package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// A pod's connection to the edge leaves its node with the node's address
// (Calico's outgoing NAT). While the node's own session is down, something
// on that address speaking BGP without the node password must not get a
// session, and so cannot announce a /32 for a victim's pod, although a /32
// from a node's address would pass the import policy.
func TestTenantBGPSessionTakeover(t *testing.T) {
	b := newCalicoBed(t, 2, false, false)
	e, n0, n1 := b.e, b.nodes[0], b.nodes[1]
	if _, err := e.c.Admin.CoreV1().Secrets(e.ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bgp-password"}, Data: map[string][]byte{"password": []byte("node-s3cret")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.edgePeer("perimeter", "all()", testenv.CalicoPeer{AS: calicoClusterAS, Password: "node-s3cret"},
		map[string]any{"password": map[string]any{"secretKeyRef": map[string]any{"name": "bgp-password", "key": "password"}}}, n0, n1)
	b.start()
	victim := n1.pod("victim", n1.hostIP(10))
	b.service("web", victim)
	e.ingress("web", nil, rule{host: "victim.example", path: "/", service: "web"})
	d := e.startDaemon(b.daemonFlags(calicoClusterAS, "--bgp-node-password-secret="+e.ns+"/bgp-password")...)
	d.waitCalicoPeers(60*time.Second, n0, n1)
	waitCalicoRoutes(t, 30*time.Second, blocksVia(n0, n1))
	d.answeredBy("victim.example", 20*time.Second, victim)
	loop := startRequestLoop(d.httpPort, "victim.example")
	defer loop.finish()
	waitSent(t, loop, 30)

	// node-0's BIRD goes away; a speaker without the password takes its
	// address and announces the victim pod's /32 with itself as next hop.
	n0.stop()
	hijack := victim.IP.String() + "/32"
	spec := n0.spec
	spec.Blocks = []string{hijack}
	spec.Peers = []testenv.CalicoPeer{{Address: calicoEdge, Port: b.port, AS: calicoClusterAS}}
	conf, err := testenv.CalicoBirdConfig(spec)
	if err != nil {
		t.Fatal(err)
	}
	rogue := testenv.NewCalicoBird(t, n0.ns, b.dir, "rogue")
	if err := rogue.Start(conf); err != nil {
		t.Fatal(err)
	}
	// BIRD retries every few seconds (connect retry 5 s): watch for three
	// times that long that no session comes up and no /32 lands.
	watchUntil := time.Now().Add(15 * time.Second)
	for time.Now().Before(watchUntil) {
		st, err := d.bgpStatus()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range st.Peers {
			if p.Address.String() == n0.addr && p.State == "Established" {
				t.Fatalf("a speaker without the node password got node-0's session")
			}
		}
		if via, ok := calicoKernelRoutes(t)[hijack]; ok {
			t.Fatalf("hijacking /32 installed via %s", via)
		}
		waitSent(t, loop, loop.sent.Load()+5)
	}
	if out, err := rogue.Birdc("show", "protocols"); err != nil || strings.Contains(out, "Established") {
		t.Errorf("the rogue speaker's view: %v\n%s", err, out)
	}
	sent, failed, errs := loop.finish()
	t.Logf("victim under load meanwhile: %d requests, %d failed", sent, failed)
	if failed != 0 {
		t.Fatalf("victim lost %d of %d requests: %v", failed, sent, errs)
	}
}
