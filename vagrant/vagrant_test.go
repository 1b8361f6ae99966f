package vagrant

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/perimeter-ingress/perimeter/internal/config"
)

// object is one decoded manifest; numbers stay json.Number.
type object map[string]any

func (o object) str(path ...string) string {
	v := o.get(path...)
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		return fmt.Sprint(v)
	}
	return ""
}

func (o object) get(path ...string) any {
	var cur any = map[string]any(o)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func decode(t *testing.T, name string, data []byte) object {
	t.Helper()
	js, err := yaml.ToJSON(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var o object
	if err := dec.Decode(&o); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return o
}

// calicoSpecFields are the spec fields of Calico's crd.projectcalico.org/v1
// CRDs (libcalico-go/config/crd) that the lab may use: kubectl validates
// strictly, so a misspelt field would stop the control plane's provisioning.
var calicoSpecFields = map[string][]string{
	"BGPConfiguration": {"asNumber", "nodeToNodeMeshEnabled", "logSeverityScreen", "listenPort", "serviceClusterIPs", "serviceExternalIPs", "serviceLoadBalancerIPs", "communities", "prefixAdvertisements", "bindMode", "ignoredInterfaces", "nodeMeshPassword", "nodeMeshMaxRestartTime"},
	"IPPool":           {"cidr", "blockSize", "ipipMode", "vxlanMode", "natOutgoing", "nodeSelector", "allowedUses", "disabled", "disableBGPExport"},
	"BGPPeer":          {"peerIP", "asNumber", "node", "nodeSelector", "peerSelector", "keepOriginalNextHop", "password", "sourceAddress", "maxRestartTime", "numAllowedLocalASNumbers", "ttlSecurity", "filters"},
}

// calicoObjects reads calico/*.yaml: one object per file, by kind.
func calicoObjects(t *testing.T) map[string]object {
	t.Helper()
	files, err := fs.Glob(Calico, "calico/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no calico/*.yaml: %v", err)
	}
	objs := map[string]object{}
	for _, f := range files {
		data, err := Calico.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// One document per file, so that the lab can take them one by one.
		d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		var docs int
		for {
			var m map[string]any
			if err := d.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if m != nil {
				docs++
			}
		}
		if docs != 1 {
			t.Fatalf("%s: %d YAML documents, want 1", f, docs)
		}
		o := decode(t, f, data)
		if got := o.str("apiVersion"); got != "crd.projectcalico.org/v1" {
			t.Errorf("%s: apiVersion %q, want crd.projectcalico.org/v1", f, got)
		}
		kind := o.str("kind")
		if _, dup := objs[kind]; dup {
			t.Errorf("%s: a second %s", f, kind)
		}
		if o.str("metadata", "name") == "" {
			t.Errorf("%s: no metadata.name", f)
		}
		spec, _ := o.get("spec").(map[string]any)
		if spec == nil {
			t.Errorf("%s: no spec", f)
		}
		allowed, known := calicoSpecFields[kind]
		if !known {
			t.Errorf("%s: kind %q, want one of BGPConfiguration, IPPool, BGPPeer", f, kind)
		}
		for k := range spec {
			if !slices.Contains(allowed, k) {
				t.Errorf("%s: spec.%s is not a field of Calico's %s", f, k, kind)
			}
		}
		objs[kind] = o
	}
	for kind := range calicoSpecFields {
		if objs[kind] == nil {
			t.Errorf("no %s in calico/*.yaml", kind)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return objs
}

func asNumber(t *testing.T, what, s string) uint32 {
	t.Helper()
	var n uint32
	if _, err := fmt.Sscan(s, &n); err != nil || n == 0 {
		t.Fatalf("%s: %q is not an AS number", what, s)
	}
	return n
}

func TestCalicoManifests(t *testing.T) {
	objs := calicoObjects(t)

	bgp := objs["BGPConfiguration"]
	if name := bgp.str("metadata", "name"); name != "default" {
		t.Errorf("BGPConfiguration %q: Calico reads only the one named default", name)
	}
	if bgp.get("spec", "nodeToNodeMeshEnabled") != true {
		t.Error("BGPConfiguration: spec.nodeToNodeMeshEnabled must be true (full mesh between nodes)")
	}
	asNumber(t, "BGPConfiguration spec.asNumber", bgp.str("spec", "asNumber"))

	pool := objs["IPPool"]
	cidr, err := netip.ParsePrefix(pool.str("spec", "cidr"))
	if err != nil || !cidr.Addr().Is4() || cidr != cidr.Masked() {
		t.Errorf("IPPool spec.cidr %q: want an IPv4 network", pool.str("spec", "cidr"))
	}
	if bs := pool.str("spec", "blockSize"); bs != "26" {
		t.Errorf("IPPool spec.blockSize %s, want 26 (Calico's default, what perimeter expects)", bs)
	}
	for _, f := range []string{"ipipMode", "vxlanMode"} {
		if got := pool.str("spec", f); got != "Never" {
			t.Errorf("IPPool spec.%s %q, want Never: pods are routed over BGP, not tunnelled", f, got)
		}
	}
	if pool.get("spec", "disableBGPExport") == true || pool.get("spec", "disabled") == true {
		t.Error("IPPool: disabled or disableBGPExport would leave the edge without routes")
	}

	peer := objs["BGPPeer"]
	if _, err := netip.ParseAddr(peer.str("spec", "peerIP")); err != nil {
		t.Errorf("BGPPeer spec.peerIP %q: want an address (the edge's)", peer.str("spec", "peerIP"))
	}
	asNumber(t, "BGPPeer spec.asNumber", peer.str("spec", "asNumber"))
	if peer.get("spec", "node") != nil || peer.get("spec", "nodeSelector") != nil {
		t.Error("BGPPeer: a global peer (no node, no nodeSelector): every node peers with the edge")
	}
}

// TestEdgeConfig checks that the edge's perimeter.yaml has only keys of
// `perimeter run` with values its flags accept, and that it agrees with the
// Calico objects: the edge is the BGPPeer, in the AS it says, serving the
// IPPool's CIDR.
func TestEdgeConfig(t *testing.T) {
	// Loaded the way the daemon loads it: keys, types, values, validation.
	path := filepath.Join(t.TempDir(), "perimeter.yaml")
	if err := os.WriteFile(path, EdgeConfig, 0o644); err != nil {
		t.Fatal(err)
	}
	var c config.Config
	if _, err := config.Parse(&c, c.FlagSet("perimeter run", io.Discard), []string{"--config", path}, nil); err != nil {
		t.Fatalf("edge/perimeter.yaml: %v", err)
	}
	if c.Kubeconfig != "/etc/perimeter/kubeconfig" {
		t.Errorf("kubeconfig %q: edge.sh installs it at /etc/perimeter/kubeconfig", c.Kubeconfig)
	}
	if !c.BGP.PeersFromNodes {
		t.Error("bgp-peers-from-nodes must be true: the edge peers with every Node")
	}

	objs := calicoObjects(t)
	peer, pool, bgp := objs["BGPPeer"], objs["IPPool"], objs["BGPConfiguration"]
	if got, want := c.BGP.ListenAddress, peer.str("spec", "peerIP"); got != want {
		t.Errorf("bgp-listen-address %q, but the nodes dial the BGPPeer's peerIP %q", got, want)
	}
	if got, want := c.BGP.LocalAS, asNumber(t, "BGPPeer", peer.str("spec", "asNumber")); got != want {
		t.Errorf("bgp-local-as %d, but the BGPPeer says the edge is AS %d", got, want)
	}
	clusterAS := c.BGP.ClusterAS
	if clusterAS == 0 {
		clusterAS = c.BGP.LocalAS
	}
	if want := asNumber(t, "BGPConfiguration", bgp.str("spec", "asNumber")); clusterAS != want {
		t.Errorf("the edge expects the nodes in AS %d, the BGPConfiguration puts them in AS %d", clusterAS, want)
	}
	if want := pool.str("spec", "cidr"); !slices.Equal(c.BGP.PodCIDRs, []string{want}) {
		t.Errorf("pod-cidr %v, want the IPPool's [%s]", c.BGP.PodCIDRs, want)
	}
}

func scripts(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".lab" || d.Name() == ".vagrant") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".sh") {
			out = append(out, p)
		}
		return nil
	})
	if err != nil || len(out) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	sort.Strings(out)
	return out
}

// TestScriptsPinAndShare checks what a reader of the scripts would: exact
// package versions, and that the RBAC and the Calico objects come from the
// files this repository ships, not from copies.
func TestScriptsPinAndShare(t *testing.T) {
	all := map[string]string{}
	for _, s := range scripts(t) {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		all[s] = string(data)
	}
	pinned := regexp.MustCompile(`"(containerd|kubelet|kubeadm|kubectl)=\$[A-Z0-9_]+"`)
	common := all[filepath.Join("provision", "common.sh")]
	for _, pkg := range []string{"containerd", "kubelet", "kubeadm", "kubectl"} {
		found := false
		for _, m := range pinned.FindAllStringSubmatch(common, -1) {
			found = found || m[1] == pkg
		}
		if !found {
			t.Errorf("provision/common.sh: %s is not installed at a pinned version (PKG=$VERSION)", pkg)
		}
	}
	for s, text := range all {
		if strings.Contains(text, "kind: ClusterRole") || strings.Contains(text, "kind: BGPPeer") || strings.Contains(text, "kind: IPPool") {
			t.Errorf("%s: defines its own RBAC or Calico objects; apply packaging/rbac.yaml and vagrant/calico/ instead", s)
		}
		if strings.Contains(text, "kubectl create") {
			t.Errorf("%s: kubectl create fails when run again; use kubectl apply", s)
		}
	}
	cp := all[filepath.Join("provision", "control-plane.sh")]
	for _, want := range []string{`packaging/rbac.yaml`, `vagrant/calico/`, `operator-crds.yaml`, `--for condition=established`, `kubernetes: NodeInternalIP`, `/CN=perimeter`} {
		if !strings.Contains(cp, want) {
			t.Errorf("provision/control-plane.sh does not use %q", want)
		}
	}
	crds, operator := strings.Index(cp, `-f "$calico/operator-crds.yaml"`), strings.Index(cp, `-f "$calico/tigera-operator.yaml"`)
	if crds < 0 || operator < 0 || crds > operator {
		t.Error("provision/control-plane.sh: operator-crds.yaml must be applied before tigera-operator.yaml")
	}
	rbac, err := os.ReadFile(filepath.Join("..", "packaging", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)kind: User\s+name: perimeter$`).Match(rbac) {
		t.Error("packaging/rbac.yaml no longer binds User perimeter, the edge certificate's CN")
	}
}

// TestLibPut runs lib.sh's put, which writes only when content, mode or
// owner differ (what makes reruns restart nothing), and retry's deadline.
func TestLibPut(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("bash: ", err)
	}
	dir := t.TempDir()
	script := `set -euo pipefail
. provision/lib.sh
f=$1/conf
owner=$(id -un):$(id -gn)
put 0644 "$owner" "$f" <<<one; printf '%s' "$CHANGED"
put 0644 "$owner" "$f" <<<one; printf '%s' "$CHANGED"
put 0640 "$owner" "$f" <<<one; printf '%s' "$CHANGED"
put 0640 "$owner" "$f" <<<two; printf '%s' "$CHANGED"
printf ' %s ' "$(stat -c %04a "$f")"; cat "$f"
ls -A "$1" | tr '\n' ' '
echo boom >"$1/err"
(RETRY_ERR=$1/err retry 0 "the impossible" false) 2>&1 || true
`
	out, err := exec.Command("bash", "-c", script, "bash", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := "1011 0640 two\nconf   boom\nerror: gave up after 0s waiting for the impossible\n"
	if string(out) != want {
		t.Errorf("got %q, want %q", out, want)
	}
}

func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: skipping %s", name)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed (apt-get install %s): %v", name, pkg, err)
	}
	return p
}

func TestShellcheck(t *testing.T) {
	sc := requireTool(t, "shellcheck", "shellcheck")
	for _, s := range scripts(t) {
		// provision/.shellcheckrc lets it follow `. lib.sh`.
		out, err := exec.Command(sc, "--severity=style", s).CombinedOutput()
		if err != nil {
			t.Errorf("shellcheck %s: %v\n%s", s, err, out)
		}
	}
}

// TestVagrantValidate runs `vagrant validate` on a copy of this directory
// (the Vagrantfile writes the lab's keys next to itself). No hypervisor runs
// here, so --ignore-provider: Vagrant otherwise refuses to validate without a
// usable provider; everything else is checked, including that the synced
// folder and the provisioning scripts exist and that the BGPPeer's address is
// the edge's.
func TestVagrantValidate(t *testing.T) {
	vagrant := requireTool(t, "vagrant", "vagrant")
	root := t.TempDir()
	dir := filepath.Join(root, "vagrant")
	// Without the machine state and keys of a lab this checkout may run.
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == ".lab" || d.Name() == ".vagrant"):
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dir, p), 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(vagrant, "validate", "--ignore-provider")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"VAGRANT_HOME="+filepath.Join(root, "home"),
		"VAGRANT_DOTFILE_PATH="+filepath.Join(root, "dot"),
		"VAGRANT_CHECKPOINT_DISABLE=1",
		"VAGRANT_NO_COLOR=1",
	)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "validated successfully") {
		t.Fatalf("vagrant validate: %v\n%s", err, out)
	}

	// The keys it generated: the private key is PEM the guests' OpenSSH
	// reads, and the public line is that key in OpenSSH's format.
	for _, name := range []string{"share_key", "cp_host_key"} {
		checkKeyPair(t, filepath.Join(dir, ".lab", name))
	}
}

func checkKeyPair(t *testing.T, priv string) {
	t.Helper()
	if fi, err := os.Stat(priv); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", priv, fi.Mode().Perm())
	}
	data, err := os.ReadFile(priv)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "RSA PRIVATE KEY" {
		t.Fatalf("%s: not a PEM RSA private key", priv)
	}
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", priv, err)
	}
	pub, err := os.ReadFile(priv + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(pub))
	if len(fields) != 3 || fields[0] != "ssh-rsa" {
		t.Fatalf("%s.pub: %q, want ssh-rsa BLOB COMMENT", priv, pub)
	}
	blob, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil {
		t.Fatalf("%s.pub: %v", priv, err)
	}
	var parts [][]byte
	for len(blob) > 0 {
		if len(blob) < 4 {
			t.Fatalf("%s.pub: truncated blob", priv)
		}
		n := binary.BigEndian.Uint32(blob)
		if uint32(len(blob)-4) < n {
			t.Fatalf("%s.pub: truncated blob", priv)
		}
		parts, blob = append(parts, blob[4:4+n]), blob[4+n:]
	}
	if len(parts) != 3 || string(parts[0]) != "ssh-rsa" {
		t.Fatalf("%s.pub: blob has %d parts", priv, len(parts))
	}
	e, n := new(big.Int).SetBytes(parts[1]), new(big.Int).SetBytes(parts[2])
	// mpints are positive: a leading zero byte when the top bit is set.
	for _, p := range parts[1:] {
		if p[0]&0x80 != 0 || (p[0] == 0 && len(p) > 1 && p[1]&0x80 == 0) {
			t.Errorf("%s.pub: an mpint is not in its minimal positive form", priv)
		}
	}
	want := key.Public().(*rsa.PublicKey)
	if e.Int64() != int64(want.E) || n.Cmp(want.N) != 0 {
		t.Errorf("%s.pub is not the public half of %s", priv, priv)
	}
}
