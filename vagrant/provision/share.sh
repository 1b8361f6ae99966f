#!/bin/sh
# perimeter-lab-share: the forced command of cp's share account (labshare),
# which the workers and the edge reach over SSH with the lab's share key
# (see the Vagrantfile). It answers two requests, and only as root through a
# sudoers rule naming exactly these two:
#   join             a kubeadm join command with a fresh 15-minute token and
#                    the CA hash, so a node can join at any time, days after
#                    cp came up, without a long-lived token
#   edge-kubeconfig  the edge's kubeconfig (User "perimeter")
set -eu

if [ "$(id -u)" -ne 0 ]; then
	exec sudo -n /usr/local/sbin/perimeter-lab-share "${SSH_ORIGINAL_COMMAND:-}"
fi

case "${1:-}" in
join)
	exec kubeadm token create --ttl 15m --print-join-command
	;;
edge-kubeconfig)
	exec cat /etc/perimeter-lab/edge/kubeconfig
	;;
*)
	echo "perimeter-lab-share: want 'join' or 'edge-kubeconfig'" >&2
	exit 2
	;;
esac
