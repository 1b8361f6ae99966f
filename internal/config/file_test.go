package config

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "perimeter.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// parse runs what `perimeter run` does with a file and a command line.
func parse(t *testing.T, content string, args ...string) (*Config, *Source, error) {
	t.Helper()
	p := writeFile(t, content)
	var c Config
	fs := c.FlagSet("perimeter run", io.Discard)
	src, err := Parse(&c, fs, append([]string{"--config=" + p}, args...), nil)
	return &c, src, err
}

func TestFileValues(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		args    []string
		check   func(*Config) bool
	}{
		{"empty file", "", nil, func(c *Config) bool { return c.Kubeconfig == "/etc/perimeter/kubeconfig" && c.HTTPBindPort == 80 }},
		{"comments only", "# nothing\n", nil, func(c *Config) bool { return c.SyncPeriod == time.Second }},
		{"string", "kubeconfig: /srv/kc\n", nil, func(c *Config) bool { return c.Kubeconfig == "/srv/kc" }},
		{"integer", "http-bind-port: 8080\n", nil, func(c *Config) bool { return c.HTTPBindPort == 8080 }},
		{"boolean", "disable-ipv6: true\n", nil, func(c *Config) bool { return c.DisableIPv6 }},
		{"duration", "sync-period: 1m30s\n", nil, func(c *Config) bool { return c.SyncPeriod == 90*time.Second }},
		{"AS number", "bgp-local-as: 64512\n", nil, func(c *Config) bool { return c.BGP.LocalAS == 64512 }},
		{"list", "bgp-peer:\n  - 198.51.100.1,as=64512\n  - 198.51.100.2\n", nil,
			func(c *Config) bool {
				return reflect.DeepEqual(c.BGP.Peers, []string{"198.51.100.1,as=64512", "198.51.100.2"})
			}},
		{"list as one value", "bgp-peer: 198.51.100.1,as=64512\n", nil,
			func(c *Config) bool { return reflect.DeepEqual(c.BGP.Peers, []string{"198.51.100.1,as=64512"}) }},
		{"comma list items split", "namespace-whitelist: [a, \"b,c\"]\n", nil,
			func(c *Config) bool { return reflect.DeepEqual(c.NamespaceWhitelist, []string{"a", "b", "c"}) }},
		{"empty list", "pod-cidr: []\n", nil, func(c *Config) bool { return len(c.BGP.PodCIDRs) == 0 }},
		{"numeric string", "ingress.class: 2\n", nil, func(c *Config) bool { return c.IngressClass == "2" }},
		{"alias", "configmap-errorfile: ns/pages\n", nil, func(c *Config) bool { return c.ConfigMapErrorFiles == "ns/pages" }},
		{"anchor", "ipv4-bind-address: &a 127.0.0.1\nstats-bind-address: *a\n", nil,
			func(c *Config) bool { return c.StatsBindAddress == "127.0.0.1" }},
		{"flag wins", "http-bind-port: 8080\nlog: debug\n", []string{"--http-bind-port=9090"},
			func(c *Config) bool { return c.HTTPBindPort == 9090 && c.Log == "debug" }},
		{"flags replace a list", "bgp-peer: [198.51.100.1, 198.51.100.2]\n", []string{"--bgp-peer=198.51.100.3"},
			func(c *Config) bool { return reflect.DeepEqual(c.BGP.Peers, []string{"198.51.100.3"}) }},
		{"a flag wins over its alias", "configmap-errorfile: ns/file\n", []string{"--configmap-errorfiles=ns/flag"},
			func(c *Config) bool { return c.ConfigMapErrorFiles == "ns/flag" }},
		{"false flag wins over true", "disable-http: true\n", []string{"--disable-http=false"},
			func(c *Config) bool { return !c.DisableHTTP }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := parse(t, tc.content, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Fatalf("unexpected config: %+v", c)
			}
		})
	}
}

func TestFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		args    []string
		line    int
		key     string
		msg     string // in the message after KEY:
	}{
		{"unknown key", "log: info\nkubeconfg: /x\n", nil, 2, "kubeconfg", "unknown key (did you mean kubeconfig?)"},
		{"flag syntax", "log: info\n\n--log: debug\n", nil, 3, "--log", "unknown key (did you mean log?)"},
		{"underscores", "sync_period: 1s\n", nil, 1, "sync_period", "did you mean sync-period?"},
		{"flag only", "version: true\n", nil, 1, "version", "command-line flag only"},
		{"wrong type: boolean", "disable-http: yes please\n", nil, 1, "disable-http", `want true or false, got "yes please"`},
		{"wrong type: integer", "# ports\nhttp-bind-port: eighty\n", nil, 2, "http-bind-port", `want a whole number, got "eighty"`},
		{"wrong type: duration without unit", "sync-period: 5\n", nil, 1, "sync-period", "want a duration with its unit"},
		{"invalid duration", "sync-period: soon\n", nil, 1, "sync-period", `got "soon"`},
		{"wrong type: string is a boolean", "ingress.class: true\n", nil, 1, "ingress.class", "got the boolean true"},
		{"wrong type: list for a string", "kubeconfig: [a, b]\n", nil, 1, "kubeconfig", "want one value, got a list"},
		{"wrong type: mapping for a list", "bgp-peer:\n  a: b\n", nil, 2, "bgp-peer", "got a mapping"},
		{"no value", "log:\n", nil, 1, "log", "no value"},
		{"invalid AS", "bgp-local-as: 0\n", nil, 1, "bgp-local-as", "want a number from 1 to 4294967295"},
		{"invalid value (Validate)", "log: info\nconfigmap: nonamespace\n", nil, 2, "configmap", `want NAMESPACE/NAME, got "nonamespace"`},
		{"invalid log level", "log: loud\n", nil, 1, "log", "want debug, info, warn or error"},
		{"invalid list item at its line", "config-snippets:\n  - global\n  - frontends\n", nil, 3, "config-snippets", "unknown kind"},
		{"invalid port", "controller-port: 70000\n", nil, 1, "controller-port", "not a port"},
		{"duplicate key", "log: info\nhttp-bind-port: 80\nlog: debug\n", nil, 3, "log", "duplicate key (first set at line 1)"},
		{"duplicate through alias", "configmap-errorfiles: a/b\nconfigmap-errorfile: a/c\n", nil, 2, "configmap-errorfile", "duplicate key"},
		{"bad value even when a flag wins", "http-bind-port: eighty\n", []string{"--http-bind-port=81"}, 1, "http-bind-port", "want a whole number"},
		{"syntax error", "log: info\nkubeconfig: [a\n", nil, 2, "", "did not find expected"},
		{"syntax error: parser", "a: 1\n- b\n", nil, 2, "", "did not find expected key"},
		{"syntax error: scanner", "log: info\nx: \"abc\n", nil, 2, "", "unexpected end of stream"},
		{"not a mapping", "- log\n", nil, 1, "", "want KEY: VALUE lines"},
		{"two documents", "log: info\n---\nlog: debug\n", nil, 2, "", "a second YAML document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parse(t, tc.content, tc.args...)
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T), want a *FileError", err, err)
			}
			if fe.Line != tc.line || fe.Key != tc.key || !strings.Contains(fe.Msg, tc.msg) {
				t.Fatalf("got %q (line %d, key %q), want line %d, key %q, message containing %q", err, fe.Line, fe.Key, tc.line, tc.key, tc.msg)
			}
			want := fe.Path + ":" + strconv.Itoa(tc.line) + ": "
			if !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("error %q does not start with %q", err, want)
			}
		})
	}
}

// TestFileErrorsAll reports every problem of a file at once, one per line.
func TestFileErrorsAll(t *testing.T) {
	_, _, err := parse(t, "nope: 1\nhttp-bind-port: x\nlog: loud\n")
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{":1: nope: unknown key", ":2: http-bind-port: want a whole number", ":3: log: want debug"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.yaml")
	var c Config
	fs := c.FlagSet("perimeter run", io.Discard)
	if _, err := Parse(&c, fs, []string{"--config=" + missing}, nil); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("a missing file named by --config: error %v, want one", err)
	}
	// The default path is taken as it is: missing means defaults.
	var d Config
	dfs := d.FlagSet("perimeter run", io.Discard)
	src := &Source{name: "perimeter run", path: missing, set: map[string]bool{}}
	if err := src.fill(&d, dfs); err != nil {
		t.Fatalf("a missing file at the default path: %v", err)
	}
	if d.Kubeconfig != "/etc/perimeter/kubeconfig" {
		t.Fatalf("defaults not kept: %+v", d)
	}
}

func TestBadFlagIsUsageError(t *testing.T) {
	var c Config
	fs := c.FlagSet("perimeter run", io.Discard)
	_, err := Parse(&c, fs, []string{"--no-such-flag"}, nil)
	if !errors.Is(err, ErrUsage) {
		t.Fatalf("error %v, want ErrUsage", err)
	}
}

// A flag's own invalid value is reported as the flag, not as a file line.
func TestFlagValueNotLocatedInFile(t *testing.T) {
	_, _, err := parse(t, "log: info\n", "--configmap=nonamespace")
	var ke *KeyError
	var fe *FileError
	if !errors.As(err, &ke) || errors.As(err, &fe) {
		t.Fatalf("error %v, want a *KeyError only", err)
	}
	if err.Error() != `--configmap="nonamespace": want NAMESPACE/NAME` {
		t.Fatalf("error %q", err)
	}
}

// The check the daemon adds (BGP peers and such) is located like Validate.
func TestCheckErrorsLocated(t *testing.T) {
	p := writeFile(t, "log: info\nbgp-peer:\n  - 198.51.100.1\n  - bogus\n")
	var c Config
	fs := c.FlagSet("perimeter run", io.Discard)
	check := func(c *Config) error {
		for _, p := range c.BGP.Peers {
			if p == "bogus" {
				return &KeyError{Key: "bgp-peer", Got: `"bogus"`, Item: p, Reason: "not an address"}
			}
		}
		return nil
	}
	_, err := Parse(&c, fs, []string{"--config=" + p}, check)
	if err == nil || err.Error() != p+`:4: bgp-peer: not an address, got "bogus"` {
		t.Fatalf("error %v", err)
	}
}

func TestLoadAgain(t *testing.T) {
	p := writeFile(t, "log: info\nhttp-bind-port: 8080\n")
	var c Config
	fs := c.FlagSet("perimeter run", io.Discard)
	src, err := Parse(&c, fs, []string{"--config=" + p, "--http-bind-port=9090"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("log: debug\nhttp-bind-port: 8081\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	if n.Log != "debug" || n.HTTPBindPort != 9090 {
		t.Fatalf("reloaded: log %q port %d, want debug and the flag's 9090", n.Log, n.HTTPBindPort)
	}
}

// Every flag is a key of one group of the reference, and every key of the
// groups is a flag.
func TestKeysCoverFlags(t *testing.T) {
	var c Config
	fs := c.FlagSet("perimeter", io.Discard)
	seen := map[string]int{}
	for _, g := range groups {
		for _, k := range g.keys {
			seen[k]++
			if fs.Lookup(k) == nil {
				t.Errorf("group %q lists %s, which is not a flag", g.title, k)
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if seen[f.Name] != 1 {
			t.Errorf("flag --%s is in %d groups of the reference, want 1", f.Name, seen[f.Name])
		}
	})
	for k := range liveKeys {
		if fs.Lookup(k) == nil {
			t.Errorf("live key %s is not a flag", k)
		}
	}
}
