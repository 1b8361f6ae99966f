package haproxy

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// The one writer keeps the config directory equal to the state: an error
// page no longer used is removed, certificates are private.
func TestWriterPrunesAndProtects(t *testing.T) {
	u := newUnitDriver(t, Options{HTTPSBindPort: 443})
	dir := u.opts.ConfigDir
	want := desired(oneBackend("ns_a_80", 2, eps("198.18.0.1")))
	want.TLS.Default = &model.Certificate{Name: model.DefaultCertificateName, PEM: testPEM(t, "default")}
	want.TLS.Certificates = []*model.Certificate{{Name: "ns_a-tls", PEM: testPEM(t, "a.test"), Hosts: []string{"a.test"}}}
	want.ErrorPages = []model.ErrorPage{{Code: 503, Content: "HTTP/1.0 503 Busy\r\n\r\nold\n"}}
	mustApply(t, u.Driver, want)
	old := errorPageOf(want.ErrorPages[0]).file

	want.ErrorPages = []model.ErrorPage{{Code: 503, Content: "HTTP/1.0 503 Busy\r\n\r\nnew\n"}}
	want.TLS.Certificates = nil
	if res := mustApply(t, u.Driver, want); !res.Reloaded {
		t.Fatalf("a new error page did not reload: %+v", res)
	}
	pages, err := os.ReadDir(filepath.Join(dir, errorsDirName))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pages {
		names = append(names, p.Name())
	}
	if nw := errorPageOf(want.ErrorPages[0]).file; !slices.Equal(names, []string{nw}) {
		t.Fatalf("error pages on disk %q, want only %q (not the old %q)", names, nw, old)
	}
	if _, err := os.Stat(filepath.Join(dir, certsDirName, "ns_a-tls.pem")); !os.IsNotExist(err) {
		t.Fatalf("certificate no longer used still on disk: %v", err)
	}
	for rel, mode := range map[string]os.FileMode{
		filepath.Join(certsDirName, defaultCertFile):            0o600,
		filepath.Join(certsDirName, crtListName):                0o600,
		configFile:                                              0o640,
		filepath.Join(mapsDirName, model.MapSSLRedirect+".map"): 0o640,
		filepath.Join(errorsDirName, names[0]):                  0o640,
	} {
		st, err := os.Stat(filepath.Join(dir, rel))
		if err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want mode %v", rel, st.Mode().Perm(), err, mode)
		}
	}
}

// Render returns what Apply writes: the same list of files.
func TestRenderListsEveryFile(t *testing.T) {
	u := newUnitDriver(t, Options{HTTPSBindPort: 443})
	want := desired(oneBackend("ns_a_80", 2, eps("198.18.0.1")))
	want.TLS.Default = &model.Certificate{Name: model.DefaultCertificateName, PEM: testPEM(t, "default")}
	want.ErrorPages = []model.ErrorPage{{Code: 503, Content: "HTTP/1.0 503 Busy\r\n\r\n"}}
	mustApply(t, u.Driver, want)
	files, err := Render(u.opts, want)
	if err != nil {
		t.Fatal(err)
	}
	var onDisk []string
	err = filepath.WalkDir(u.opts.ConfigDir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(u.opts.ConfigDir, p)
		onDisk = append(onDisk, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(onDisk)
	var rendered []string
	for rel := range files {
		rendered = append(rendered, rel)
	}
	slices.Sort(rendered)
	if !slices.Equal(onDisk, rendered) {
		t.Fatalf("on disk %q, Render %q", onDisk, rendered)
	}
}

// TestMapFileCacheFollowsEqualMap: an equal map made afresh replaces the
// cached one, so that the next look-up is by identity.
func TestMapFileCacheFollowsEqualMap(t *testing.T) {
	c := &renderCache{}
	a := map[string]string{"a.test/": "ns_a_80"}
	first := c.mapFile(model.MapExact, a)
	b := maps.Clone(a)
	if got := c.mapFile(model.MapExact, b); !bytes.Equal(got, first) {
		t.Fatalf("equal map rendered %q, want %q", got, first)
	}
	if !sameMap(c.maps[model.MapExact].m, b) {
		t.Error("the cache still compares with the first map")
	}
}

// The writer remembers haproxy.cfg by its digest: the same text rendered
// anew is not written again, a changed one is, and nothing holds the old
// text.
func TestWriterRemembersConfigByDigest(t *testing.T) {
	dir := t.TempDir()
	disk := diskFiles{}
	cfg := "global\n\tmaxconn 100\n"
	if err := syncFiles(dir, map[string]file{configFile: configFileOf(cfg)}, disk, false); err != nil {
		t.Fatal(err)
	}
	if d := disk[configFile]; !d.digest || d.data != nil {
		t.Fatalf("haproxy.cfg kept as %+v, want its digest only", d)
	}
	p := filepath.Join(dir, configFile)
	before, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	// Equal text in other bytes: not written (a write renames a new inode
	// into place).
	if err := syncFiles(dir, map[string]file{configFile: configFileOf(string([]byte(cfg)))}, disk, false); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Fatal("unchanged haproxy.cfg was written again")
	}
	changed := "global\n\tmaxconn 200\n"
	if err := syncFiles(dir, map[string]file{configFile: configFileOf(changed)}, disk, false); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != changed {
		t.Fatalf("haproxy.cfg after a change: %q, %v", got, err)
	}
}
