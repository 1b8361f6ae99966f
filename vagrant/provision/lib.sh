# shellcheck shell=bash
# Helpers of the provisioning scripts, which source this file from the
# synced folder. Everything here is safe to run again: `vagrant provision`
# reruns every script on a machine that is already set up.

export DEBIAN_FRONTEND=noninteractive
# The SSH keys the Vagrantfile generated on the host (see there), and where a
# guest keeps its own copy.
SECRETS=/perimeter/vagrant/.lab
LAB_DIR=/etc/perimeter-lab

log() { printf '==> %s\n' "$*"; }
die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

# retry SECONDS WHAT COMMAND...: runs COMMAND every 5 s until it succeeds;
# after SECONDS it gives up and says what it was waiting for, instead of
# waiting forever, and shows the file RETRY_ERR names, if any (the last
# failure's messages).
retry() {
	local limit=$1 what=$2
	shift 2
	local deadline=$((SECONDS + limit))
	until "$@"; do
		if ((SECONDS >= deadline)); then
			if [[ -s ${RETRY_ERR:-} ]]; then
				sed 's/^/  /' "$RETRY_ERR" >&2
			fi
			die "gave up after ${limit}s waiting for $what"
		fi
		sleep 5
	done
}

# put MODE OWNER:GROUP PATH: writes stdin to PATH (atomically, with that
# mode and owner) unless PATH already has exactly that content, mode and
# owner, and sets CHANGED to 1 when it wrote, else 0, so that a caller
# restarts a service only when its configuration changed. Call it as a plain
# command fed by a redirection, not in a pipeline or a condition, so that an
# error stops the script (set -e) and CHANGED reaches the caller.
CHANGED=0
# shellcheck disable=SC2034 # CHANGED is read by the scripts sourcing this.
put() {
	local mode=$1 owner=$2 path=$3 tmp
	tmp=$(mktemp "$path.XXXXXX")
	cat >"$tmp"
	if [[ -f $path ]] && cmp -s "$tmp" "$path" &&
		[[ $(stat -c '%04a %U:%G' "$path") == "$mode $owner" ]]; then
		rm -f "$tmp"
		CHANGED=0
		return
	fi
	chmod "$mode" "$tmp"
	chown "$owner" "$tmp"
	mv -f "$tmp" "$path"
	CHANGED=1
}

# apt_install PACKAGE[=VERSION]...: installs without prompts, keeping a
# configuration file an earlier run (or the admin) changed.
apt_install() {
	apt-get install -y -q --no-install-recommends --allow-change-held-packages \
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"
}

# lab_ssh_setup CP_ADDRESS: the share key, and cp's host key pinned, for
# from_cp.
lab_ssh_setup() {
	local cp=$1 f
	for f in share_key cp_host_key.pub; do
		[[ -s $SECRETS/$f ]] || die "$SECRETS/$f is missing: the Vagrantfile creates it on the host; run 'vagrant rsync' and provision again"
	done
	install -d -m 0700 "$LAB_DIR"
	put 0600 root:root "$LAB_DIR/share_key" <"$SECRETS/share_key"
	put 0600 root:root "$LAB_DIR/known_hosts" <<<"$cp $(cut -d' ' -f1,2 "$SECRETS/cp_host_key.pub")"
}

# from_cp CP_ADDRESS REQUEST: cp's answer to REQUEST (join, edge-kubeconfig;
# see share.sh) over SSH on the private network, cp's host key checked.
from_cp() {
	ssh -i "$LAB_DIR/share_key" -o IdentitiesOnly=yes -o BatchMode=yes \
		-o ConnectTimeout=5 -o StrictHostKeyChecking=yes \
		-o UserKnownHostsFile="$LAB_DIR/known_hosts" \
		-o HostKeyAlgorithms=rsa-sha2-512,rsa-sha2-256 -o LogLevel=ERROR \
		"labshare@$1" "$2"
}

# fetch_from_cp CP_ADDRESS REQUEST FILE: from_cp into FILE, failing (for
# retry) while cp cannot answer yet. Until cp is set up, ssh fails (no
# account yet, or the box's own host key); the last error is kept in
# $LAB_DIR/fetch.err (for RETRY_ERR) rather than repeated every few seconds.
fetch_from_cp() {
	local tmp
	tmp=$(mktemp)
	if from_cp "$1" "$2" >"$tmp" 2>"$LAB_DIR/fetch.err" && [[ -s $tmp ]]; then
		mv -f "$tmp" "$3"
	else
		rm -f "$tmp"
		return 1
	fi
}
