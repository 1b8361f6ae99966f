#!/bin/sh
# The edge host: HAProxy from Debian, perimeter built from this checkout,
# peering with every node and learning the pod blocks.
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q haproxy
systemctl disable --now haproxy
install -m 0755 /perimeter/bin/perimeter /usr/bin/perimeter  # built on the host by `make build`
install -d -m 0750 /etc/perimeter
until [ -f /perimeter/vagrant/.edge.kubeconfig ]; do sleep 5; done
install -m 0600 /perimeter/vagrant/.edge.kubeconfig /etc/perimeter/kubeconfig
install -m 0644 /perimeter/packaging/rt_protos.d/perimeter.conf /etc/iproute2/rt_protos.d/perimeter.conf
getent passwd perimeter >/dev/null || useradd --system --home-dir /var/lib/perimeter --shell /usr/sbin/nologin perimeter
chown perimeter: /etc/perimeter/kubeconfig
install -m 0644 /perimeter/systemd/perimeter.service /etc/systemd/system/perimeter.service
cat >/etc/default/perimeter <<'ENV'
PERIMETER_ARGS=--bgp-local-as=64512 --bgp-listen-address=192.168.56.20 --bgp-peers-from-nodes --pod-cidr=10.244.0.0/16
ENV
systemctl daemon-reload
systemctl enable --now perimeter
