package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/bgp"
	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// A peer that is not a node announces a victim pod's /32, which beats the
// pod's block: the /32 is refused, the victim keeps being served through its
// node, and the refusal says why.
func TestTenantBGPHostRouteFromNonNode(t *testing.T) {
	e := newEnv(t)
	l := newBGPLab(e, 2)
	victimNode, hostile := l.nodes[0], l.nodes[1]
	hostile.exports = nil // quiet until the victim is served
	victimNode.start()
	hostile.start()
	victimNode.nodeObject(nodeName(t, 0))
	pod := victimNode.pod("victim", 0)
	e.service("web", checkedService, pod)
	e.ingress("web", nil, rule{host: "victim.example", path: "/", service: "web"})
	// The hostile speaker is a static peer the operator configured (or an
	// address in a passive prefix), not a node.
	d := e.startDaemon(l.daemonFlags("--bgp-peers-from-nodes", "--bgp-peer="+hostile.addr+",as="+bgpAS)...)
	d.waitPeers(30*time.Second, victimNode, hostile)
	waitRoutes(t, 10*time.Second, routesVia(victimNode))
	d.answeredBy("victim.example", 20*time.Second, pod)

	loop := startRequestLoop(d.httpPort, "victim.example")
	defer loop.finish()
	waitSent(t, loop, 30)

	hijack := pod.IP.String() + "/32"
	hostile.exports = []string{hijack}
	hostile.stop(syscall.SIGTERM)
	hostile.start()
	var seen bgp.RejectedPath
	testenv.Eventually(t, 20*time.Second, func() error {
		st, err := d.bgpStatus()
		if err != nil {
			return err
		}
		for _, r := range st.Rejected {
			if r.Prefix.String() == hijack && r.Peer.String() == hostile.addr {
				seen = r
				return nil
			}
		}
		return errorf("%s from %s not listed as rejected: %+v", hijack, hostile.addr, st.Rejected)
	})
	if seen.Reason != bgp.RejectHostNotNode {
		t.Errorf("rejection reason %q, want %q", seen.Reason, bgp.RejectHostNotNode)
	}
	if via, ok := kernelRoutes(t)[hijack]; ok {
		t.Fatalf("hijacking /32 installed via %s", via)
	}
	waitSent(t, loop, loop.sent.Load()+30)
	sent, failed, errs := loop.finish()
	t.Logf("victim under load while the /32 was announced: %d requests, %d failed", sent, failed)
	if failed != 0 {
		t.Fatalf("victim lost %d of %d requests: %v", failed, sent, errs)
	}
}
