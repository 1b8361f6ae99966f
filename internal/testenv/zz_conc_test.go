package testenv

import (
	"os"
	"testing"
	"time"
)

func TestZZHold(t *testing.T) {
	ip := os.Getenv("ZZ_IP")
	if ip == "" {
		t.Skip()
	}
	d, _ := time.ParseDuration(os.Getenv("ZZ_HOLD"))
	p := StartPod(t, PodOptions{Name: "hold", IP: ip, LinkRange: "198.19.201.0/24"})
	_ = StartCluster(t)
	t.Logf("pod %s link %s %s netns %s", p.IP, p.Link.Name, p.Link.Addr, p.Netns.Name)
	time.Sleep(d)
}
