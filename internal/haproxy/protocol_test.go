package haproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
)

func TestParseShowProc(t *testing.T) {
	out := `#<PID>          <type>          <reloads>       <uptime>        <version>      
19289           master          2 [failed: 1]   0d00h00m09s     2.6.12-1+deb12u4
# workers
19345           worker          0               0d00h00m01s     2.6.12-1+deb12u4
# old workers
19292           worker          1               0d00h00m09s     2.6.12-1+deb12u4
# programs

`
	got, err := parseShowProc(out)
	if err != nil {
		t.Fatal(err)
	}
	want := procList{MasterPID: 19289, Reloads: 2, Failed: 1, Workers: []int{19345}, OldWorkers: []int{19292}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, err := parseShowProc("Unknown command.\n"); err == nil {
		t.Fatal("garbage must be an error")
	}
}

func TestSplitResponses(t *testing.T) {
	// Captured from 2.6: addr change, silent state change, an error, a
	// show, another error, a silent add.
	raw := "no need to change the addr, port changed from '1' to '9' by 'stats socket command'\n\n\nNo such server.\n\n0x560d103f6420 /a.com/x b1\n\nentry not found.\n\n\n"
	want := []string{
		"no need to change the addr, port changed from '1' to '9' by 'stats socket command'",
		"",
		"No such server.",
		"0x560d103f6420 /a.com/x b1",
		"entry not found.",
		"",
	}
	if got := splitResponses(raw); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if got := splitResponses(""); len(got) != 0 {
		t.Fatalf("no output must give no responses, got %q", got)
	}
}

func TestCheckResponse(t *testing.T) {
	for _, tc := range []struct {
		cmd, resp string
		ok        bool
	}{
		{"set server a/SRV_1 addr 198.18.0.1 port 80", "IP changed from '127.0.0.1' to '198.18.0.1', port changed from '1' to '80' by 'stats socket command'", true},
		{"set server a/SRV_1 addr 198.18.0.1 port 80", "no need to change the addr, no need to change the port", true},
		{"set server a/SRV_9 addr 198.18.0.1 port 80", "No such server.", false},
		{"set server a/SRV_1 state ready", "", true},
		{"set server a/SRV_9 state ready", "No such server.", false},
		{"add map /m k v", "", true},
		{"set map /m k v", "entry not found.", false},
		{"prepare map /m", "New version created: 3", true},
		{"commit map @3 /m", "", true},
	} {
		if err := checkResponse(tc.cmd, tc.resp); (err == nil) != tc.ok {
			t.Errorf("checkResponse(%q, %q) = %v, want ok=%v", tc.cmd, tc.resp, err, tc.ok)
		}
	}
}

func TestAlertsBlame(t *testing.T) {
	out := `[NOTICE]   (19404) : haproxy version is 2.6.12-1+deb12u4
[ALERT]    (19404) : config : parsing [/etc/h.cfg:11] : balance only supports 'roundrobin', 'static-rr'.
[ALERT]    (19404) : config : Proxy 'ns_b_80': unable to find required use_backend: 'x'.
[ALERT]    (19404) : config : Error(s) found in configuration file : /etc/h.cfg
[ALERT]    (19404) : config : Fatal errors found in configuration.
`
	alerts := alertLines(out)
	if len(alerts) != 2 {
		t.Fatalf("alerts: %q", alerts)
	}
	cfg := "global\n  maxconn 1\n\ndefaults perimeter\n  mode http\n\nbackend ns_a_80 from perimeter\n  option forwardfor\n\nbackend ns_x_80 from perimeter\n  balance bogus\n"
	kind, name, reason := blame(cfg, alerts[0])
	if kind != "backend" || name != "ns_x_80" || reason != "balance only supports 'roundrobin', 'static-rr'." {
		t.Errorf("blame 1: %q %q %q", kind, name, reason)
	}
	kind, name, _ = blame(cfg, alerts[1])
	if kind != "backend" || name != "ns_b_80" {
		t.Errorf("blame 2: %q %q", kind, name)
	}
}

func TestParseVersion(t *testing.T) {
	out := "HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/\nStatus: long-term supported branch\n" +
		"Feature list : -51DEGREES +ACCEPT4 +PROMEX -QUIC +LUA\n"
	v, err := parseVersion(out)
	if err != nil {
		t.Fatal(err)
	}
	if v.Major != 2 || v.Minor != 6 || v.Patch != 12 || v.Raw != "2.6.12-1+deb12u4" || !v.Features["PROMEX"] || v.Features["QUIC"] {
		t.Fatalf("%+v", v)
	}
	if !v.AtLeast(2, 6) || v.AtLeast(2, 7) || !v.AtLeast(1, 9) {
		t.Fatal("AtLeast")
	}
	if _, err := parseVersion("command not found"); err == nil {
		t.Fatal("want an error")
	}
}

// A stand-in for HAProxy's stats socket: one line of ";"-separated
// commands per connection, each answered and ended by an empty line.
func TestSocketRuntimeExecute(t *testing.T) {
	path := filepath.Join(t.TempDir(), "admin.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var lines atomic.Int32
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(conn).ReadString('\n')
			lines.Add(1)
			var out strings.Builder
			for _, cmd := range strings.Split(strings.TrimSpace(line), ";") {
				switch {
				case strings.Contains(cmd, "SRV_MISSING"):
					out.WriteString("No such server.\n\n")
				case strings.Contains(cmd, " addr "):
					out.WriteString("IP changed from '127.0.0.1' to '198.18.0.1' by 'stats socket command'\n\n")
				default:
					out.WriteString("\n")
				}
			}
			io.WriteString(conn, out.String())
			conn.Close()
		}
	}()
	rt := &socketRuntime{path: path}
	var cmds []string
	for i := range 500 {
		cmds = append(cmds, fmt.Sprintf("set server be_with_a_long_name/SRV_%d addr 198.18.0.1 port 8080", i), fmt.Sprintf("set server be/SRV_%d state ready", i))
	}
	out, err := rt.Execute(context.Background(), cmds)
	if err != nil || len(out) != len(cmds) {
		t.Fatalf("Execute: %d responses, %v", len(out), err)
	}
	if lines.Load() < 2 {
		t.Errorf("%d KiB of commands went out in %d line(s): want chunks", len(strings.Join(cmds, ";"))>>10, lines.Load())
	}
	_, err = rt.Execute(context.Background(), []string{"set server be/SRV_1 state ready", "set server be/SRV_MISSING state ready", "set server be/SRV_2 state ready"})
	var re *runtimeError
	if !errors.As(err, &re) || re.Command != "set server be/SRV_MISSING state ready" {
		t.Fatalf("want the refused command named, got %v", err)
	}
}
