#!/usr/bin/env bash
# cp: the kubeadm control plane (also schedulable), Calico in BGP mode
# without encapsulation from vagrant/calico/*.yaml, perimeter's RBAC and the
# demo app, the edge's kubeconfig, and the share account that hands join
# commands and that kubeconfig to the other machines. Safe to run again.
#   control-plane.sh NODE_IP CP_ADDRESS K8S_VERSION CALICO_VERSION POD_CIDR
set -euo pipefail
# shellcheck source=lib.sh
. /perimeter/vagrant/provision/lib.sh

NODE_IP=$1
K8S_VERSION=$3
CALICO=$4
POD_CIDR=$5
SRC=/perimeter
export KUBECONFIG=/etc/kubernetes/admin.conf

if [[ -f $KUBECONFIG ]]; then
	log "kubeadm init: done already"
else
	log "kubeadm init (Kubernetes v$K8S_VERSION)"
	# No token is printed or kept: nodes get a fresh one from share.sh.
	kubeadm init --kubernetes-version "v$K8S_VERSION" \
		--apiserver-advertise-address "$NODE_IP" --pod-network-cidr "$POD_CIDR" \
		--node-name "$(hostname)" --token-ttl 15m --skip-token-print
fi
api_ready() { kubectl get --raw /readyz >/dev/null 2>&1; }
retry 300 "the API server (if a first kubeadm init failed halfway: kubeadm reset -f, then provision again)" api_ready
install -d -o vagrant -g vagrant -m 0700 /home/vagrant/.kube
install -o vagrant -g vagrant -m 0600 "$KUBECONFIG" /home/vagrant/.kube/config

# Demo pods may run on cp too.
taints=$(kubectl get node "$(hostname)" -o jsonpath='{.spec.taints[*].key}')
if [[ $taints == *node-role.kubernetes.io/control-plane* ]]; then
	kubectl taint node "$(hostname)" node-role.kubernetes.io/control-plane:NoSchedule-
fi

log "Calico $CALICO: CRDs, then the operator"
calico=https://raw.githubusercontent.com/projectcalico/calico/$CALICO/manifests
# Since v3.30 tigera-operator.yaml carries no CRDs: operator-crds.yaml has
# them all (operator.tigera.io and crd.projectcalico.org). Server-side
# apply: the CRDs are too large for client-side apply's annotation.
kubectl apply --server-side --force-conflicts -f "$calico/operator-crds.yaml"
kubectl wait --for condition=established --timeout=120s \
	crd/installations.operator.tigera.io crd/tigerastatuses.operator.tigera.io \
	crd/ippools.crd.projectcalico.org crd/bgpconfigurations.crd.projectcalico.org \
	crd/bgppeers.crd.projectcalico.org
kubectl apply --server-side --force-conflicts -f "$calico/tigera-operator.yaml"

# The lab's own Calico objects, before calico-node starts: the IPPool (BGP,
# no IP-in-IP, no VXLAN), the BGPConfiguration (mesh on, AS 64512) and the
# edge as a BGPPeer. make lab applies the same files.
kubectl apply -f "$SRC/vagrant/calico/"

# ipPools: [] - the operator creates no pool of its own; the one above is
# the only one. nodeAddressAutodetectionV4: each node's BGP address is its
# Node's InternalIP, i.e. the kubelet's --node-ip on the host-only network
# (common.sh), never the NAT address every VirtualBox VM shares.
kubectl apply -f - <<'YAML'
apiVersion: operator.tigera.io/v1
kind: Installation
metadata:
  name: default
spec:
  calicoNetwork:
    bgp: Enabled
    ipPools: []
    nodeAddressAutodetectionV4:
      kubernetes: NodeInternalIP
YAML
log "waiting for Calico and for cp to be Ready"
# The operator creates tigerastatus/calico some time after it starts.
calico_available() {
	kubectl wait --for condition=Available --timeout=10s tigerastatus/calico >/dev/null 2>&1
}
retry 900 "tigerastatus/calico to be Available (kubectl get tigerastatus)" calico_available
kubectl wait --for condition=Ready --timeout=300s "node/$(hostname)"

log "perimeter's RBAC and the demo app"
kubectl apply -f "$SRC/packaging/rbac.yaml"
kubectl apply -f "$SRC/vagrant/demo.yaml"

log "the edge's kubeconfig: User perimeter, a client certificate from the cluster CA"
EDGE=$LAB_DIR/edge
CA=/etc/kubernetes/pki/ca.crt
install -d -m 0700 "$LAB_DIR" "$EDGE"
# Kept across runs; made again when missing, from another CA (kubeadm reset)
# or within 30 days of expiry.
if [[ ! -s $EDGE/perimeter.crt ]] ||
	! openssl verify -CAfile "$CA" "$EDGE/perimeter.crt" >/dev/null 2>&1 ||
	! openssl x509 -checkend 2592000 -noout -in "$EDGE/perimeter.crt" >/dev/null; then
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$EDGE/perimeter.key" -subj /CN=perimeter -out "$EDGE/perimeter.csr"
	openssl x509 -req -in "$EDGE/perimeter.csr" -CA "$CA" -CAkey /etc/kubernetes/pki/ca.key \
		-set_serial "0x$(openssl rand -hex 16)" -days 365 -out "$EDGE/perimeter.crt"
fi
kcdir=$(mktemp -d)
trap 'rm -rf "$kcdir"' EXIT
kc=$kcdir/kubeconfig
kubectl --kubeconfig "$kc" config set-cluster lab --server "https://$NODE_IP:6443" \
	--certificate-authority "$CA" --embed-certs >/dev/null
kubectl --kubeconfig "$kc" config set-credentials perimeter \
	--client-certificate "$EDGE/perimeter.crt" --client-key "$EDGE/perimeter.key" --embed-certs >/dev/null
kubectl --kubeconfig "$kc" config set-context lab --cluster lab --user perimeter >/dev/null
kubectl --kubeconfig "$kc" config use-context lab >/dev/null
put 0600 root:root "$EDGE/kubeconfig" <"$kc"
# What the daemon will be allowed to do, checked here rather than on the edge.
kubectl --kubeconfig "$EDGE/kubeconfig" auth can-i watch endpointslices.discovery.k8s.io --all-namespaces >/dev/null ||
	die "the edge's kubeconfig cannot watch EndpointSlices: is packaging/rbac.yaml applied?"

log "share account for the other machines (see share.sh and the Vagrantfile)"
for f in share_key.pub cp_host_key; do
	[[ -s $SECRETS/$f ]] || die "$SECRETS/$f is missing: the Vagrantfile creates it on the host; run 'vagrant rsync' and provision again"
done
install -m 0755 "$SRC/vagrant/provision/share.sh" /usr/local/sbin/perimeter-lab-share
if ! id labshare >/dev/null 2>&1; then
	useradd --system --create-home --home-dir /var/lib/labshare --shell /bin/sh labshare
fi
# No password at all ('*'): the key below is the only way in. (A locked
# account, '!', is refused by sshd without PAM.)
usermod -p '*' labshare
install -d -o labshare -g labshare -m 0700 /var/lib/labshare/.ssh
put 0600 labshare:labshare /var/lib/labshare/.ssh/authorized_keys \
	<<<"restrict,from=\"${NODE_IP%.*}.0/24\",command=\"/usr/local/sbin/perimeter-lab-share\" $(cat "$SECRETS/share_key.pub")"
sudoers=$(mktemp)
cat >"$sudoers" <<'SUDO'
# The lab's share account runs its forced command as root, with exactly the
# arguments it accepts.
labshare ALL=(root) NOPASSWD: /usr/local/sbin/perimeter-lab-share join, /usr/local/sbin/perimeter-lab-share edge-kubeconfig
SUDO
visudo -cqf "$sudoers"
put 0440 root:root /etc/sudoers.d/perimeter-lab <"$sudoers"
rm -f "$sudoers"
# cp's host key for the lab, generated on the host, so that the other
# machines can check whom they talk to; the box's ed25519 key stays for
# everything else (vagrant ssh).
put 0600 root:root /etc/ssh/perimeter_lab_host_key <"$SECRETS/cp_host_key"
sshd_changed=$CHANGED
{
	echo "# The lab's pinned host key (see vagrant/Vagrantfile), and the box's own."
	for key in /etc/ssh/ssh_host_ed25519_key /etc/ssh/ssh_host_ecdsa_key; do
		if [[ -f $key ]]; then
			echo "HostKey $key"
		fi
	done
	echo "HostKey /etc/ssh/perimeter_lab_host_key"
} >"$kcdir/sshd.conf"
put 0644 root:root /etc/ssh/sshd_config.d/perimeter-lab.conf <"$kcdir/sshd.conf"
if ((CHANGED || sshd_changed)); then
	# Never leave a configuration behind that would keep sshd from starting.
	if ! sshd -t; then
		rm -f /etc/ssh/sshd_config.d/perimeter-lab.conf
		die "sshd refuses /etc/ssh/sshd_config.d/perimeter-lab.conf (removed)"
	fi
	systemctl reload ssh
fi
sshd -T | grep -x 'hostkey /etc/ssh/perimeter_lab_host_key' >/dev/null ||
	die "sshd does not read /etc/ssh/sshd_config.d/*.conf: add 'Include /etc/ssh/sshd_config.d/*.conf' to /etc/ssh/sshd_config"

log "cp is ready: vagrant ssh cp -c 'kubectl get nodes -o wide'"
