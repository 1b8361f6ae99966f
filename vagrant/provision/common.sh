#!/usr/bin/env bash
# A Kubernetes node (cp, worker1, worker2): kernel settings that survive a
# reboot, containerd, and the pinned kubeadm, kubelet and kubectl, whose
# kubelet uses the host-only address. Safe to run again.
#   common.sh NODE_IP K8S_VERSION K8S_PACKAGE_VERSION CONTAINERD_VERSION
set -euo pipefail
# shellcheck source=lib.sh
. /perimeter/vagrant/provision/lib.sh

NODE_IP=$1
K8S_VERSION=$2
K8S_PACKAGE=$3
CONTAINERD_VERSION=$4
K8S_MINOR=${K8S_VERSION%.*}

log "kernel modules and sysctls for pod networking (now and at boot)"
put 0644 root:root /etc/modules-load.d/k8s.conf <<'CONF'
overlay
br_netfilter
CONF
modprobe overlay
modprobe br_netfilter
put 0644 root:root /etc/sysctl.d/90-k8s.conf <<'CONF'
net.ipv4.ip_forward = 1
net.bridge.bridge-nf-call-iptables = 1
net.bridge.bridge-nf-call-ip6tables = 1
CONF
sysctl --system >/dev/null

log "swap off (now and at boot: fstab entries commented out, swap units masked)"
swapoff -a
sed -Ei 's/^([^#].*[[:space:]]swap[[:space:]])/# \1/' /etc/fstab
while read -r unit _; do
	systemctl mask "$unit" >/dev/null
done < <(systemctl list-units --type=swap --all --plain --no-legend)

log "containerd $CONTAINERD_VERSION"
apt-get update -q
apt_install "containerd=$CONTAINERD_VERSION" ca-certificates curl gpg openssl sudo
apt-mark hold containerd >/dev/null
# The systemd cgroup driver (kubelet's default) and kubeadm's pause image.
config=$(containerd config default |
	sed -e 's/SystemdCgroup = false/SystemdCgroup = true/' \
		-e 's|sandbox_image = .*|sandbox_image = "registry.k8s.io/pause:3.10"|')
install -d -m 0755 /etc/containerd
put 0644 root:root /etc/containerd/config.toml <<<"$config"
if ((CHANGED)); then
	systemctl restart containerd
fi
put 0644 root:root /etc/crictl.yaml <<'CONF'
runtime-endpoint: unix:///run/containerd/containerd.sock
image-endpoint: unix:///run/containerd/containerd.sock
CONF

log "kubeadm, kubelet, kubectl $K8S_PACKAGE"
install -d -m 0755 /etc/apt/keyrings
curl -fsSL "https://pkgs.k8s.io/core:/stable:/v$K8S_MINOR/deb/Release.key" |
	gpg --dearmor --yes -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg
put 0644 root:root /etc/apt/sources.list.d/kubernetes.list <<<"deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] https://pkgs.k8s.io/core:/stable:/v$K8S_MINOR/deb/ /"
apt-get update -q
apt_install "kubelet=$K8S_PACKAGE" "kubeadm=$K8S_PACKAGE" "kubectl=$K8S_PACKAGE"
apt-mark hold kubelet kubeadm kubectl >/dev/null

# Without --node-ip the kubelet registers the first interface's address,
# which on VirtualBox is the same NAT address 10.0.2.15 on every VM; Calico
# takes the node address from the Node's InternalIP (the Installation's
# nodeAddressAutodetectionV4), so this is what BGP uses too.
put 0644 root:root /etc/default/kubelet <<<"KUBELET_EXTRA_ARGS=--node-ip=$NODE_IP"
if ((CHANGED)) && systemctl -q is-active kubelet; then
	systemctl restart kubelet
fi
