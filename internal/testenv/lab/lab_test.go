package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// envRunLab makes the test binary be the lab program, so the test drives
// exactly what `make lab` runs, as a separate process a person would Ctrl-C.
const envRunLab = "PERIMETER_LAB_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunLab) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The lab as a person uses it: every command it prints works as printed,
// traffic reaches pods over routes learned from the nodes' BIRD, scaling
// brings a new pod into service, and Ctrl-C leaves nothing behind.
func TestLabCommandsWorkAsPrinted(t *testing.T) {
	testenv.RequireBird1(t)
	_, birdc, err := testenv.Bird1()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("needs curl (apt-get install curl)")
	}
	bin := testenv.PerimeterBinary(t)
	if _, err := testenv.Binaries(); err != nil {
		t.Fatal(err)
	}
	ports := []int{testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)}
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-perimeter="+bin, "-http-port="+strconv.Itoa(ports[0]),
		"-controller-port="+strconv.Itoa(ports[1]), "-stats-port="+strconv.Itoa(ports[2]), "-lab-port="+strconv.Itoa(ports[3]))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), envRunLab+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	labPID := cmd.Process.Pid
	exited := make(chan error, 1)
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	var out strings.Builder
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("lab output:\n%s", out.String())
		}
	})

	// Read up to the end of the help: the commands are its indented lines.
	var commands []string
	deadline := time.After(4 * time.Minute)
	for done := false; !done; {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("lab exited before it was ready: %v", <-exited)
			}
			out.WriteString(line + "\n")
			if c, ok := strings.CutPrefix(line, "  "); ok && strings.TrimSpace(c) != "" {
				commands = append(commands, strings.TrimSpace(c))
			}
			done = strings.HasPrefix(line, "Ctrl-C tears everything down")
		case <-deadline:
			t.Fatal("lab not ready within 4 minutes")
		}
	}
	go func() {
		for line := range lines {
			out.WriteString(line + "\n")
		}
	}()
	if len(commands) < 7 {
		t.Fatalf("lab printed %d commands, want 7:\n%q", len(commands), commands)
	}

	// What each printed command must show.
	expect := []struct{ prefix, want string }{
		{"curl -s -H 'Host: foo.bar'", "app-"},
		{bin + " bgp status", "Established"},
		{"ip route show proto", "198.18.220.0/26 via 198.19.220.11"},
		{bin + " explain", "demo/app"},
		{birdc, "Established"},
		{"curl -s -X POST", "app-2 198.18.220.11 on node-1"},
		{"for i in", "app-2"},
	}
	for i, want := range expect {
		c := commands[i]
		if !strings.HasPrefix(c, want.prefix) {
			t.Fatalf("command %d is %q, want one starting %q", i, c, want.prefix)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		got, err := exec.CommandContext(ctx, "bash", "-c", c).CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(got), want.want) {
			t.Errorf("$ %s\n%s(%v): want %q in the output", c, got, err, want.want)
		}
	}
	// The bgp status lists both nodes, the kernel has both blocks, and no
	// route to a pod was put here by hand: only what BGP learned.
	routes, err := exec.Command("ip", "-N", "-4", "route", "show", "root", "198.18.220.0/24").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(routes)), "\n") {
		if !strings.Contains(line, "proto 201") {
			t.Errorf("a pod route that BGP did not bring: %q", line)
		}
	}
	if !strings.Contains(string(routes), "198.18.220.64/26 via 198.19.220.12") {
		t.Errorf("node-2's block not learned:\n%s", routes)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("lab exit on Ctrl-C: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("lab did not exit within 2 minutes of Ctrl-C")
	}
	assertNothingLeft(t, labPID)
}

// assertNothingLeft: no namespace, link, route or process of the lab.
func assertNothingLeft(t *testing.T, pid int) {
	t.Helper()
	prefix := fmt.Sprintf("pm-%d-", pid)
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			t.Errorf("namespace left: %s", e.Name())
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if l.Attrs().Name == bridgeName || strings.HasPrefix(l.Attrs().Alias, "perimeter-testenv "+strconv.Itoa(pid)+" ") {
			t.Errorf("link left: %s", l.Attrs().Name)
		}
	}
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: 201}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Dst != nil && strings.HasPrefix(r.Dst.String(), "198.18.220.") {
			t.Errorf("route left: %s", r.Dst)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if strings.Contains(string(b), "perimeter-lab-") {
			t.Errorf("process left: %s", strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}
