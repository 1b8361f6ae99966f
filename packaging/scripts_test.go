package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// The maintainer scripts without systemd, as in a chroot, an image build or
// a container: dpkg installs, configures again, upgrades, removes and purges
// the package in an overlay of a Debian 12 root, in a network namespace of
// its own holding routes of protocol 201. The real systemd side (enable,
// hand-over restart, stop) is internal/e2e/nspawn's.
const scriptsRun = `
set -e
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
state() {
	echo "== $1"
	echo "user=$(getent passwd perimeter | cut -d: -f6,7)"
	echo "group=$(getent group perimeter | cut -d: -f1)"
	for d in /etc/perimeter /var/lib/perimeter /run/perimeter; do
		echo "dir $d=$(stat -c '%a %U:%G' "$d" 2>/dev/null)"
	done
	echo "kubeconfig=$(cat /etc/perimeter/kubeconfig 2>/dev/null)"
	echo "statoverride=$(dpkg-statoverride --list /etc/perimeter || true)"
	echo "enabled=$(readlink /etc/systemd/system/multi-user.target.wants/perimeter.service || true)"
	echo "masked=$(readlink /etc/systemd/system/perimeter.service || true)"
	echo "files=$(ls -d /usr/bin/perimeter /usr/share/doc/perimeter /etc/iproute2/rt_protos.d/perimeter.conf 2>/dev/null | tr '\n' ' ')"
	echo "routes=$(ip -4 route show table all proto 201 | wc -l) $(ip -6 route show table all proto 201 | wc -l)"
}
ip link set lo up
ip -4 route add 198.18.200.0/24 dev lo proto 201
ip -4 route add 198.18.201.0/24 dev lo proto 201 table 100
ip -6 route add 2001:db8:201::/64 dev lo proto 201

dpkg -i /p/perimeter.deb >/dev/null
state install
DPKG_MAINTSCRIPT_PACKAGE=perimeter DPKG_MAINTSCRIPT_NAME=postinst /var/lib/dpkg/info/perimeter.postinst configure "$(dpkg-query -W -f '${Version}' perimeter)"
state configure-again
printf 'apiVersion: v1\n' >/etc/perimeter/kubeconfig
chgrp perimeter /etc/perimeter/kubeconfig
chmod 0640 /etc/perimeter/kubeconfig
dpkg -i /p/perimeter.deb >/dev/null
state upgrade
cp /var/lib/dpkg/info/perimeter.postrm /p/postrm
dpkg -r perimeter >/dev/null
state remove
dpkg -i /p/perimeter.deb >/dev/null
state reinstall
mkdir -p /run/perimeter
touch /run/perimeter/haproxy.pid /var/lib/perimeter/haproxy.cfg
dpkg -P perimeter >/dev/null
state purge
DPKG_MAINTSCRIPT_PACKAGE=perimeter DPKG_MAINTSCRIPT_NAME=postrm /bin/sh /p/postrm purge
state purge-again
`

// inDebianRoot runs script in a throwaway overlay of the cached Debian 12
// root, in mount and network namespaces of its own: the overlay and any
// route flush never reach the host, and go with the process. pkg is copied
// to /p/ in the root (the chroot sees only what is mounted into it).
// chroot: the script runs inside the root; else on the host with $ROOT.
func inDebianRoot(t *testing.T, pkg, script string, chroot bool) string {
	t.Helper()
	root, err := testenv.DebianRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{"upper", "work", "mnt", "p"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(pkg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p", filepath.Base(pkg)), b, 0o644); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	run := `ROOT=` + mnt + ` exec /bin/sh -c "$0"`
	if chroot {
		run = "exec chroot " + mnt + ` /bin/sh -c "$0"`
	}
	setup := strings.Join([]string{
		"set -e",
		"mount --make-rprivate /",
		"mount -t overlay overlay -o lowerdir=" + root + ",upperdir=" + filepath.Join(dir, "upper") + ",workdir=" + filepath.Join(dir, "work") + " " + mnt,
		"mkdir -p " + mnt + "/p",
		"mount --bind " + filepath.Join(dir, "p") + " " + mnt + "/p",
		run,
	}, "\n")
	out, err := exec.Command("unshare", "--mount", "--net", "sh", "-c", setup, script).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("maintainer scripts: %v", err)
	}
	return string(out)
}

// states parses the "== name" sections of key=value lines the scripts print.
func states(out string) map[string]map[string]string {
	states := map[string]map[string]string{}
	var cur map[string]string
	for _, l := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(l, "== "); ok {
			cur = map[string]string{}
			states[name] = cur
			continue
		}
		if k, v, ok := strings.Cut(l, "="); ok && cur != nil {
			cur[k] = strings.TrimSpace(v)
		}
	}
	return states
}

func with(base map[string]string, kv ...string) map[string]string {
	m := map[string]string{}
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

type wantState struct {
	state string
	kv    map[string]string
}

func checkStates(t *testing.T, got map[string]map[string]string, want []wantState) {
	t.Helper()
	for _, w := range want {
		g := got[w.state]
		if g == nil {
			t.Errorf("%s: no state printed", w.state)
			continue
		}
		for k, v := range w.kv {
			if g[k] != v {
				t.Errorf("after %s: %s = %q, want %q", w.state, k, g[k], v)
			}
		}
	}
}

func TestMaintainerScriptsWithoutSystemd(t *testing.T) {
	testenv.RequireRoot(t)
	deb, _ := packages(t)
	out := inDebianRoot(t, deb, strings.ReplaceAll(scriptsRun, "/p/perimeter.deb", "/p/"+filepath.Base(deb)), true)
	got := states(out)
	installed := map[string]string{
		"user":                   "/var/lib/perimeter:/usr/sbin/nologin",
		"group":                  "perimeter",
		"dir /etc/perimeter":     "750 root:perimeter",
		"dir /var/lib/perimeter": "750 perimeter:perimeter",
		"dir /run/perimeter":     "",
		"statoverride":           "root perimeter 750 /etc/perimeter",
		"enabled":                "/lib/systemd/system/perimeter.service",
		"masked":                 "",
		"routes":                 "2 1",
	}
	gone := map[string]string{
		"user": "", "group": "", "dir /etc/perimeter": "", "dir /var/lib/perimeter": "", "dir /run/perimeter": "",
		"kubeconfig": "", "statoverride": "", "enabled": "", "masked": "", "files": "", "routes": "0 0",
	}
	checkStates(t, got, []wantState{
		{"install", with(installed, "kubeconfig", "")},
		{"configure-again", with(installed, "kubeconfig", "")},
		{"upgrade", with(installed, "kubeconfig", "apiVersion: v1")},
		// Masked until installed again; configuration and user kept.
		{"remove", with(installed, "kubeconfig", "apiVersion: v1", "masked", "/dev/null",
			"files", "/etc/iproute2/rt_protos.d/perimeter.conf")},
		{"reinstall", with(installed, "kubeconfig", "apiVersion: v1")},
		{"purge", gone},
		{"purge-again", gone},
	})
	if f := got["install"]["files"]; !strings.Contains(f, "/usr/bin/perimeter") {
		t.Errorf("after install: files %q", f)
	}
}

// The rpm's scriptlets, the same way: rpm --root installs, upgrades (a
// reinstall of the same version runs the upgrade branches) and erases the
// package in the Debian root, whose useradd and systemctl stand in for a
// RHEL's.
const rpmRun = `
set -e
state() { chroot "$ROOT" /bin/sh -c "$STATE" state "$1"; }
ip link set lo up
ip -4 route add 198.18.200.0/24 dev lo proto 201
ip -6 route add 2001:db8:201::/64 dev lo proto 201
rpmdb --root "$ROOT" --initdb
rpm --force-debian --root "$ROOT" -i --nodeps "$ROOT/p/$RPM"
state install
printf 'apiVersion: v1\n' >"$ROOT/etc/perimeter/kubeconfig"
rpm --force-debian --root "$ROOT" -U --replacepkgs --nodeps "$ROOT/p/$RPM"
state upgrade
rpm --force-debian --root "$ROOT" -e --nodeps perimeter
state erase
`

func TestRPMScriptletsWithoutSystemd(t *testing.T) {
	testenv.RequireRoot(t)
	requireTools(t, "rpm")
	_, rpm := packages(t)
	// The state function of the deb's run, as a script of its own.
	st := scriptsRun[strings.Index(scriptsRun, "state() {")+len("state() {") : strings.Index(scriptsRun, "\n}\n")]
	st = "export PATH=/usr/sbin:/usr/bin:/sbin:/bin\n" + st
	script := "RPM=" + filepath.Base(rpm) + "\nSTATE='" + strings.ReplaceAll(st, "'", `'\''`) + "'\n" + rpmRun
	got := states(inDebianRoot(t, rpm, script, false))
	installed := map[string]string{
		"user":                   "/var/lib/perimeter:/sbin/nologin",
		"group":                  "perimeter",
		"dir /etc/perimeter":     "750 root:perimeter",
		"dir /var/lib/perimeter": "750 perimeter:perimeter",
		"dir /run/perimeter":     "",
		"enabled":                "/lib/systemd/system/perimeter.service",
		"routes":                 "1 1",
	}
	checkStates(t, got, []wantState{
		{"install", with(installed, "kubeconfig", "")},
		{"upgrade", with(installed, "kubeconfig", "apiVersion: v1")},
		// RPM's way: the admin's kubeconfig and the system user stay.
		{"erase", with(installed, "dir /var/lib/perimeter", "", "enabled", "", "routes", "0 0", "files", "",
			"kubeconfig", "apiVersion: v1")},
	})
}
