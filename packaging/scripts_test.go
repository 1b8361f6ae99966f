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

func TestMaintainerScriptsWithoutSystemd(t *testing.T) {
	testenv.RequireRoot(t)
	deb, _ := packages(t)
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
	// A copy: the chroot sees only what is mounted into it.
	b, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p", "perimeter.deb"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// Mount and network namespaces of its own: the overlay and the
	// purge's route flush never reach the host, and go with the process.
	mnt := filepath.Join(dir, "mnt")
	setup := strings.Join([]string{
		"set -e",
		"mount --make-rprivate /",
		"mount -t overlay overlay -o lowerdir=" + root + ",upperdir=" + filepath.Join(dir, "upper") + ",workdir=" + filepath.Join(dir, "work") + " " + mnt,
		"mkdir -p " + mnt + "/p",
		"mount --bind " + filepath.Join(dir, "p") + " " + mnt + "/p",
		"exec chroot " + mnt + " /bin/sh -c \"$0\"",
	}, "\n")
	cmd := exec.Command("unshare", "--mount", "--net", "sh", "-c", setup, scriptsRun)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("maintainer scripts: %v", err)
	}

	states := map[string]map[string]string{}
	var cur map[string]string
	for _, l := range strings.Split(string(out), "\n") {
		if name, ok := strings.CutPrefix(l, "== "); ok {
			cur = map[string]string{}
			states[name] = cur
			continue
		}
		if k, v, ok := strings.Cut(l, "="); ok && cur != nil {
			cur[k] = strings.TrimSpace(v)
		}
	}
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
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	gone := map[string]string{
		"user": "", "group": "", "dir /etc/perimeter": "", "dir /var/lib/perimeter": "", "dir /run/perimeter": "",
		"kubeconfig": "", "statoverride": "", "enabled": "", "masked": "", "files": "", "routes": "0 0",
	}
	for _, want := range []struct {
		state string
		kv    map[string]string
	}{
		{"install", with(installed, "kubeconfig", "")},
		{"configure-again", with(installed, "kubeconfig", "")},
		{"upgrade", with(installed, "kubeconfig", "apiVersion: v1")},
		// Masked until installed again; configuration and user kept.
		{"remove", with(installed, "kubeconfig", "apiVersion: v1", "masked", "/dev/null",
			"files", "/etc/iproute2/rt_protos.d/perimeter.conf")},
		{"reinstall", with(installed, "kubeconfig", "apiVersion: v1")},
		{"purge", gone},
		{"purge-again", gone},
	} {
		got := states[want.state]
		if got == nil {
			t.Errorf("%s: no state printed", want.state)
			continue
		}
		for k, v := range want.kv {
			if got[k] != v {
				t.Errorf("after %s: %s = %q, want %q", want.state, k, got[k], v)
			}
		}
	}
	if f := states["install"]["files"]; !strings.Contains(f, "/usr/bin/perimeter") {
		t.Errorf("after install: files %q", f)
	}
}
