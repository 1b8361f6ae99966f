package echo

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pods := &Pods{}
	pods.Set(netip.MustParseAddr("127.0.0.1"), Pod{Namespace: "ns", Name: "web-0"})
	srv := NewServer(Handler(pods, 3000), false)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String()

	req, _ := http.NewRequest(http.MethodPost, base+"/a//b?x=1", nil)
	req.Host = "example.com"
	req.Header.Set("X-Echo-Set-Header", "X-Foo: one, x-bar: two")
	req.Header.Set("X-In", "v")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var got Request
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Path != "/a//b?x=1" || got.Host != "example.com" || got.Method != "POST" || got.Proto != "HTTP/1.1" ||
		got.Namespace != "ns" || got.Pod != "web-0" || got.HTTPPort != "3000" || got.Headers["X-In"][0] != "v" {
		t.Errorf("echo: %+v", got)
	}
	if resp.Header.Get("X-Foo") != "one" || resp.Header.Get("X-Bar") != "two" {
		t.Errorf("echo set headers: %v", resp.Header)
	}

	for path, want := range map[string]int{"/status/418": 418, "/status/x": 400, "/health": 200} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}

	// Only the echoed request is logged, in echo-basic's words (which the
	// suite's mirroring tests match), with the client's address.
	logs := pods.Logs("ns", "web-0")
	if len(logs) != 1 || !strings.HasPrefix(logs[0].Text, "Echoing back request made to /a//b?x=1 to client (127.0.0.1:") ||
		!strings.HasSuffix(logs[0].Text, ")") || logs[0].Time.IsZero() {
		t.Errorf("logs %+v, want the one echoed request", logs)
	}

	// An address without a pod answers 503, and the gone pod's log is gone.
	pods.Delete(netip.MustParseAddr("127.0.0.1"))
	resp, err = http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("no pod: %d, want 503", resp.StatusCode)
	}
	if logs := pods.Logs("ns", "web-0"); logs != nil {
		t.Errorf("logs of a deleted pod: %+v", logs)
	}
}

// TestLogsBounded: a pod's log keeps its newest lines, oldest first.
func TestLogsBounded(t *testing.T) {
	pods := &Pods{}
	pod := Pod{Namespace: "ns", Name: "web-0"}
	for i := range maxLogLines + 5 {
		pods.Logf(pod, "line %d", i)
	}
	logs := pods.Logs("ns", "web-0")
	if len(logs) != maxLogLines || logs[0].Text != "line 5" || logs[len(logs)-1].Text != fmt.Sprintf("line %d", maxLogLines+4) {
		t.Fatalf("%d lines, first %q, last %q", len(logs), logs[0].Text, logs[len(logs)-1].Text)
	}
	logs[0].Text = "changed"
	if pods.Logs("ns", "web-0")[0].Text != "line 5" {
		t.Error("Logs returned the log itself, not a copy")
	}
}
