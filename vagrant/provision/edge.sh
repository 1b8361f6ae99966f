#!/usr/bin/env bash
# The edge host: the perimeter package built by `make package` on the host
# (dist/perimeter_*.deb, with HAProxy from Debian as its dependency), its
# configuration file vagrant/edge/perimeter.yaml, and the kubeconfig cp made
# for it. Safe to run again; a newer package in dist/ is an upgrade (the
# package restarts the daemon as a hand-over).
#   edge.sh NODE_IP CP_ADDRESS K8S_VERSION CALICO_VERSION POD_CIDR
set -euo pipefail
# shellcheck source=lib.sh
. /perimeter/vagrant/provision/lib.sh

CP=$2
SRC=/perimeter

# The newest package for this machine in dist/.
arch=$(dpkg --print-architecture)
deb='' version=''
for f in "$SRC"/dist/perimeter_*_"$arch".deb; do
	[[ -f $f ]] || continue
	v=$(dpkg-deb --field "$f" Version)
	if [[ -z $deb ]] || dpkg --compare-versions "$v" gt "$version"; then
		deb=$f version=$v
	fi
done
[[ -n $deb ]] || die "no $SRC/dist/perimeter_*_$arch.deb: run 'make package' on the host, then 'vagrant rsync edge && vagrant provision edge'"

log "installing $deb"
apt-get update -q
# The path makes apt install the file and resolve its dependencies
# (haproxy) from Debian, as a user would.
apt_install "$deb" curl openssh-client
# The package runs its own HAProxy; Debian's haproxy.service would hold
# port 80 with the stock configuration.
systemctl mask --now haproxy.service

# As the package leaves it (dpkg-statoverride in its postinst): the daemon
# reads this directory as group perimeter, nobody else may.
install -d -m 0750 -o root -g perimeter /etc/perimeter

lab_ssh_setup "$CP"
log "fetching the edge's kubeconfig from cp (cp may still be coming up)"
kc=$(mktemp)
trap 'rm -f "$kc"' EXIT
RETRY_ERR=$LAB_DIR/fetch.err retry 1800 "the edge kubeconfig from cp at $CP" fetch_from_cp "$CP" edge-kubeconfig "$kc"
grep -q '^current-context: lab$' "$kc" || die "cp sent something that is not the edge's kubeconfig"
restart=0
put 0640 root:perimeter /etc/perimeter/kubeconfig <"$kc"
restart=$((restart | CHANGED))
# Over the package's commented default (a conffile: later upgrades keep this
# one, --force-confold).
put 0644 root:root /etc/perimeter/perimeter.yaml <"$SRC/vagrant/edge/perimeter.yaml"
restart=$((restart | CHANGED))

# Enabled by the package on first install, not started (it had no
# kubeconfig yet). Type=notify: start returns once the first configuration
# is served.
systemctl enable perimeter.service
if ((restart)) && systemctl -q is-active perimeter.service; then
	log "configuration changed: restarting perimeter (a hand-over, HAProxy keeps serving)"
	systemctl restart perimeter.service
else
	systemctl start perimeter.service
fi
systemctl --no-pager --lines=0 status perimeter.service
log "edge is up; see vagrant/README.md: perimeter bgp status, ip route show proto perimeter,
    curl -H 'Host: demo.local' http://127.0.0.1/"
