// Package packaging tests the packages `make package` builds: lintian and
// rpmlint pass, and the .deb and .rpm hold what an operator is promised.
// The files of this directory are the packaging itself; the package has
// tests only.
package packaging

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/config"
)

// PERIMETER_DEB and PERIMETER_RPM name packages already built (by `make
// package`; absolute, or relative to the top of the repository): the tests
// inspect those instead of building their own.
const (
	envDeb = "PERIMETER_DEB"
	envRPM = "PERIMETER_RPM"
)

var built struct {
	once     sync.Once
	deb, rpm string
	err      error
	out      string
}

// packages returns the .deb and .rpm to test, building them once per test
// binary with `make package`.
func packages(t *testing.T) (deb, rpm string) {
	t.Helper()
	if deb, rpm = os.Getenv(envDeb), os.Getenv(envRPM); deb != "" && rpm != "" {
		return abs(t, fromTop(deb)), abs(t, fromTop(rpm))
	}
	if testing.Short() {
		t.Skip("skipped with -short: builds the packages (make package); or set " + envDeb + " and " + envRPM)
	}
	built.once.Do(func() {
		cmd := exec.Command("make", "--no-print-directory", "package")
		cmd.Dir = ".."
		out, err := cmd.CombinedOutput()
		built.out, built.err = string(out), err
		// build.sh prints the paths of the two packages last.
		for _, l := range strings.Split(built.out, "\n") {
			switch {
			case strings.HasPrefix(l, "dist/") && strings.HasSuffix(l, ".deb"):
				built.deb = filepath.Join("..", l)
			case strings.HasPrefix(l, "dist/") && strings.HasSuffix(l, ".rpm"):
				built.rpm = filepath.Join("..", l)
			}
		}
	})
	if built.err != nil || built.deb == "" || built.rpm == "" {
		t.Fatalf("make package: %v\n%s", built.err, built.out)
	}
	return abs(t, built.deb), abs(t, built.rpm)
}

// fromTop resolves a path relative to the top of the repository, where
// `make` runs; the test runs in packaging/.
func fromTop(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join("..", path)
}

// abs makes a path independent of the working directory (lint.sh changes
// it).
func abs(t *testing.T, path string) string {
	t.Helper()
	a, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// requireTools skips when a linter is missing on a developer's machine, but
// fails in CI, which installs them (.ci/run).
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not found, and CI=true: .ci/run installs it", tool)
			}
			t.Skipf("%s not found: apt-get install lintian rpm rpmlint (CI=true fails instead of skipping)", tool)
		}
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestLint runs packaging/lint.sh, as `make package-lint` does: lintian
// --pedantic with no error or warning (overrides carry their reason in
// packaging/lintian-overrides), rpmlint with no error.
func TestLint(t *testing.T) {
	requireTools(t, "lintian", "rpmlint", "rpm")
	deb, rpm := packages(t)
	cmd := exec.Command("./lint.sh", deb, rpm)
	out, err := cmd.CombinedOutput()
	t.Logf("packaging/lint.sh:\n%s", out)
	if err != nil {
		t.Fatalf("lint.sh: %v", err)
	}
	tag := regexp.MustCompile(`^(perimeter(\.x86_64)?: )?[EW]: `)
	section := ""
	for _, l := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(l, "lintian "):
			section = "lintian"
		case strings.HasPrefix(l, "rpmlint "):
			section = "rpmlint"
		case section == "lintian" && tag.MatchString(l):
			t.Errorf("lintian: %s", l)
		case section == "rpmlint" && strings.Contains(l, ": E: "):
			t.Errorf("rpmlint: %s", l)
		}
	}
	summary := regexp.MustCompile(`\d+ errors, \d+ warnings`).FindString(string(out))
	if !strings.HasPrefix(summary, "0 errors, ") {
		t.Errorf("rpmlint reported %q, want 0 errors", summary)
	}
	overrides, err := os.ReadFile("lintian-overrides")
	if err != nil {
		t.Fatal(err)
	}
	n := len(regexp.MustCompile(`(?m)^perimeter: `).FindAll(overrides, -1))
	report(t, fmt.Sprintf("packages %s, %s:\n  lintian --pedantic: 0 errors, 0 warnings (%d overrides, each with its reason)\n  rpmlint: %s\n",
		filepath.Base(deb), filepath.Base(rpm), n, summary))
}

// report appends to the summary `make test` prints ($PERIMETER_TEST_REPORT):
// the output of a passing package is not shown.
func report(t *testing.T, text string) {
	t.Helper()
	t.Log(text)
	path := os.Getenv("PERIMETER_TEST_REPORT")
	if path == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(text)
	if err = errors.Join(err, f.Close()); err != nil {
		t.Fatal(err)
	}
}

// debFile is one entry of `dpkg-deb -c`.
type debFile struct{ mode, owner string }

func debContents(t *testing.T, deb string) map[string]debFile {
	t.Helper()
	files := map[string]debFile{}
	sc := bufio.NewScanner(strings.NewReader(run(t, "dpkg-deb", "-c", deb)))
	for sc.Scan() {
		// drwxr-xr-x root/root 0 2026-11-25 12:28 ./etc/perimeter/
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/")
		files[name] = debFile{mode: f[0], owner: f[1]}
	}
	return files
}

func debMember(t *testing.T, deb, path string) []byte {
	t.Helper()
	tar := exec.Command("tar", "-xO", "."+path)
	fsys := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
	pipe, err := fsys.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	tar.Stdin = pipe
	var out bytes.Buffer
	tar.Stdout = &out
	if err := fsys.Start(); err != nil {
		t.Fatal(err)
	}
	if err := tar.Run(); err != nil {
		t.Fatalf("%s from %s: %v", path, deb, err)
	}
	if err := fsys.Wait(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestDebContents(t *testing.T) {
	requireTools(t, "dpkg-deb")
	deb, _ := packages(t)
	files := debContents(t, deb)
	for path, mode := range map[string]string{
		"/usr/bin/perimeter":                           "-rwxr-xr-x",
		"/lib/systemd/system/perimeter.service":        "-rw-r--r--",
		"/etc/perimeter":                               "drwxr-xr-x", // 0750 root:perimeter by dpkg-statoverride in postinst
		"/etc/perimeter/perimeter.yaml":                "-rw-r--r--",
		"/etc/iproute2/rt_protos.d/perimeter.conf":     "-rw-r--r--",
		"/usr/share/man/man8/perimeter.8.gz":           "-rw-r--r--",
		"/usr/share/doc/perimeter/copyright":           "-rw-r--r--",
		"/usr/share/doc/perimeter/changelog.Debian.gz": "-rw-r--r--",
		"/usr/share/doc/perimeter/rbac.yaml":           "-rw-r--r--",
		"/usr/share/lintian/overrides/perimeter":       "-rw-r--r--",
		"/usr/share/doc/perimeter/modules/go/LICENSE":  "-rw-r--r--",
		// A text shipped once; the same text of another module is a link.
		"/usr/share/doc/perimeter/modules/k8s.io/client-go/LICENSE": "l",
	} {
		f, ok := files[path]
		switch {
		case !ok:
			t.Errorf("%s: not in the package", path)
		case mode == "l" && f.mode[0] == 'l':
		case f.mode != mode:
			t.Errorf("%s: mode %s, want %s", path, f.mode, mode)
		}
	}
	for path, f := range files {
		if f.owner != "root/root" {
			t.Errorf("%s: owner %s, want root/root (postinst sets the others)", path, f.owner)
		}
	}

	unit := debMember(t, deb, "/lib/systemd/system/perimeter.service")
	if want, _ := os.ReadFile("../systemd/perimeter.service"); !bytes.Equal(unit, want) {
		t.Errorf("the unit in the package is not systemd/perimeter.service")
	}
	yaml := debMember(t, deb, "/etc/perimeter/perimeter.yaml")
	if string(yaml) != config.YAML() {
		t.Errorf("/etc/perimeter/perimeter.yaml is not `perimeter config-reference --format=yaml`")
	}
	if !bytes.Contains(debMember(t, deb, "/usr/share/doc/perimeter/copyright"), []byte("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/")) {
		t.Errorf("copyright is not machine-readable (DEP-5)")
	}
}

func TestDebControl(t *testing.T) {
	requireTools(t, "dpkg-deb")
	deb, _ := packages(t)
	field := func(name string) string { return strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, name)) }
	if got := field("Package"); got != "perimeter" {
		t.Errorf("Package: %q", got)
	}
	if got := field("Architecture"); got != "amd64" {
		t.Errorf("Architecture: %q", got)
	}
	depends := field("Depends")
	for _, want := range []string{"haproxy (>= 2.6)", "adduser"} {
		if !strings.Contains(depends, want) {
			t.Errorf("Depends: %q, want %q in it", depends, want)
		}
	}
	version := field("Version")
	if !strings.HasSuffix(filepath.Base(deb), "_"+version+"_amd64.deb") {
		t.Errorf("Version %s is not the one in the file name %s", version, filepath.Base(deb))
	}

	conffiles := strings.Fields(run(t, "dpkg-deb", "-I", deb, "conffiles"))
	for _, want := range []string{"/etc/perimeter/perimeter.yaml", "/etc/iproute2/rt_protos.d/perimeter.conf"} {
		if !contains(conffiles, want) {
			t.Errorf("conffiles %v: %s missing", conffiles, want)
		}
	}

	// The maintainer scripts: POSIX sh with set -e, parsed by dash.
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		script := run(t, "dpkg-deb", "-I", deb, s)
		if !strings.HasPrefix(script, "#!/bin/sh\n") || !regexp.MustCompile(`(?m)^set -e$`).MatchString(script) {
			t.Errorf("%s: want #!/bin/sh and set -e", s)
		}
		cmd := exec.Command("sh", "-n")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: sh -n: %v\n%s", s, err, out)
		}
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// TestDebBinary: static, stripped, and it says the package's version.
func TestDebBinary(t *testing.T) {
	requireTools(t, "dpkg-deb")
	deb, _ := packages(t)
	bin := filepath.Join(t.TempDir(), "perimeter")
	if err := os.WriteFile(bin, debMember(t, deb, "/usr/bin/perimeter"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("/usr/bin/perimeter is dynamically linked (%v)", p.Type)
		}
	}
	if f.Section(".symtab") != nil {
		t.Errorf("/usr/bin/perimeter is not stripped (.symtab)")
	}
	version := strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, "Version"))
	upstream := version[:strings.LastIndex(version, "-")]
	if got := strings.TrimSpace(run(t, bin, "version")); got != "perimeter "+upstream {
		t.Errorf("perimeter version: %q, want %q", got, "perimeter "+upstream)
	}
}

// TestManPage: perimeter(8) names every flag, and is gzipped without a
// name or time stamp (gzip -n), as reproducible builds need.
func TestManPage(t *testing.T) {
	requireTools(t, "dpkg-deb")
	deb, _ := packages(t)
	gz := debMember(t, deb, "/usr/share/man/man8/perimeter.8.gz")
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "" || !r.ModTime.IsZero() {
		t.Errorf("perimeter.8.gz carries name %q and time %v: want gzip -n", r.Name, r.ModTime)
	}
	var page bytes.Buffer
	if _, err := page.ReadFrom(r); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(page.Bytes(), []byte(".TH PERIMETER 8 ")) {
		t.Errorf("not a section 8 man page: %.40q", page.String())
	}
	for _, k := range config.Keys() {
		if !strings.Contains(page.String(), `\fB`+strings.ReplaceAll("--"+k.Name, "-", `\-`)+`\fR`) &&
			!strings.Contains(page.String(), ".B "+strings.ReplaceAll("--"+k.Name, "-", `\-`)+"\n") {
			t.Errorf("perimeter(8) does not document --%s", k.Name)
		}
	}
}

// TestRPM: the same promises, in RPM's terms.
func TestRPM(t *testing.T) {
	requireTools(t, "rpm")
	_, rpm := packages(t)
	if req := run(t, "rpm", "-qp", "--requires", rpm); !strings.Contains(req, "haproxy >= 2.6") {
		t.Errorf("Requires: want haproxy >= 2.6, got\n%s", req)
	}
	cfg := strings.Fields(run(t, "rpm", "-qpc", rpm))
	for _, want := range []string{"/etc/perimeter/perimeter.yaml", "/etc/iproute2/rt_protos.d/perimeter.conf"} {
		if !contains(cfg, want) {
			t.Errorf("%%config files %v: %s missing", cfg, want)
		}
	}
	// path size mtime digest mode owner group ...
	dump := map[string][]string{}
	for _, l := range strings.Split(run(t, "rpm", "-qp", "--dump", rpm), "\n") {
		if f := strings.Fields(l); len(f) >= 7 {
			dump[f[0]] = f[4:7]
		}
	}
	for path, want := range map[string]string{
		"/usr/bin/perimeter":                    "0100755 root root",
		"/lib/systemd/system/perimeter.service": "0100644 root root",
		"/etc/perimeter":                        "040750 root perimeter",
		"/var/lib/perimeter":                    "040750 perimeter perimeter",
		"/usr/share/man/man8/perimeter.8.gz":    "0100644 root root",
	} {
		if got := strings.Join(dump[path], " "); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
	scripts := run(t, "rpm", "-qp", "--scripts", rpm)
	for _, want := range []string{"useradd -r", "systemctl try-restart perimeter.service", "--no-reload enable perimeter.service"} {
		if !strings.Contains(scripts, want) {
			t.Errorf("scriptlets lack %q", want)
		}
	}
}
