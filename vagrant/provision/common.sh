#!/bin/sh
# Container runtime and kubeadm on a cluster node.
set -eu
K8S_MINOR=$1
NODE_IP=$2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q containerd curl gpg apt-transport-https
mkdir -p /etc/containerd
containerd config default | sed 's/SystemdCgroup = false/SystemdCgroup = true/' >/etc/containerd/config.toml
systemctl restart containerd
modprobe br_netfilter
printf 'net.ipv4.ip_forward=1\nnet.bridge.bridge-nf-call-iptables=1\n' >/etc/sysctl.d/90-k8s.conf
sysctl --system >/dev/null
swapoff -a
mkdir -p /etc/apt/keyrings
curl -fsSL "https://pkgs.k8s.io/core:/stable:/v$K8S_MINOR/deb/Release.key" | gpg --dearmor -o /etc/apt/keyrings/k8s.gpg
echo "deb [signed-by=/etc/apt/keyrings/k8s.gpg] https://pkgs.k8s.io/core:/stable:/v$K8S_MINOR/deb/ /" >/etc/apt/sources.list.d/k8s.list
apt-get update -q
apt-get install -y -q kubelet kubeadm kubectl
echo "KUBELET_EXTRA_ARGS=--node-ip=$NODE_IP" >/etc/default/kubelet
