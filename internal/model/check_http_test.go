package model

import "testing"

// check-http's HTTP-version form, as the peer documents it: the Host
// header escaped in the value, or as YAML's double quotes deliver it.
func TestCheckHTTPVersionForm(t *testing.T) {
	for in, want := range map[string]HTTPCheck{
		"HEAD / HTTP/1.1":                           {Method: "HEAD", Path: "/", Version: "HTTP/1.1"},
		"GET /healthz HTTP/1.0":                     {Method: "GET", Path: "/healthz", Version: "HTTP/1.0"},
		`HEAD / HTTP/1.1\r\nHost:\ www`:             {Method: "HEAD", Path: "/", Version: "HTTP/1.1", Host: "www"},
		"HEAD / HTTP/1.1\r\nHost: WWW.example:8080": {Method: "HEAD", Path: "/", Version: "HTTP/1.1", Host: "www.example:8080"},
		"/healthz": {Method: "GET", Path: "/healthz"},
	} {
		got, err := httpCheckParser().parse(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"HEAD / HTTP/2", "HEAD / HTTP/1.1 x", `HEAD / HTTP/1.1\r\nX-Foo:\ bar`,
		`HEAD / HTTP/1.1\r\nHost:\ a b`, `HEAD / HTTP/1.1\r\nHost:\ `, `HEAD / HTTP/1.1\r\nHost:\ a%[env(X)]`,
		"HEAD / HTTP/1.1\r\nHost: a\r\nX: y", `HEAD / HTTP/1.1\r\nHost:\ a:b`} {
		if got, err := httpCheckParser().parse(bad); err == nil {
			t.Errorf("%q accepted as %+v", bad, got)
		}
	}
}
