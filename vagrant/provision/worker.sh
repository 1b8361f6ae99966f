#!/usr/bin/env bash
# A worker joins the cluster with a join command cp makes for it on demand
# (a fresh short-lived token and the CA hash: see share.sh). Safe to run
# again: a node that has joined is left as it is.
#   worker.sh NODE_IP CP_ADDRESS K8S_VERSION CALICO_VERSION POD_CIDR
set -euo pipefail
# shellcheck source=lib.sh
. /perimeter/vagrant/provision/lib.sh

CP=$2

if [[ -f /etc/kubernetes/kubelet.conf ]]; then
	log "$(hostname) has joined the cluster already"
	exit 0
fi

lab_ssh_setup "$CP"
log "asking cp for a join command (cp may still be coming up)"
join=$(mktemp)
trap 'rm -f "$join"' EXIT
RETRY_ERR=$LAB_DIR/fetch.err retry 1800 "a join command from cp at $CP" fetch_from_cp "$CP" join "$join"

# Run the command by its parts, not as text from another machine.
read -r kubeadm verb endpoint token_flag token hash_flag hash <"$join"
if [[ "$kubeadm $verb $token_flag $hash_flag" != "kubeadm join --token --discovery-token-ca-cert-hash" ||
	$endpoint != "$CP:6443" ||
	! $token =~ ^[a-z0-9]{6}\.[a-z0-9]{16}$ ||
	! $hash =~ ^sha256:[0-9a-f]{64}$ ]]; then
	die "unexpected join command from cp: $(head -c 200 "$join")"
fi
log "kubeadm join $endpoint"
kubeadm join "$endpoint" --token "$token" --discovery-token-ca-cert-hash "$hash" --node-name "$(hostname)"
