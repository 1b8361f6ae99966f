#!/bin/sh
# Debian's BIRD 1.6 (package "bird"), the line calico-node's BIRD fork comes
# from, unpacked into the cache: it conflicts with bird2, which the other
# tests run, so it is never installed. Prints the directory holding bird and
# birdc. Needs apt's package lists (apt-get update).
set -eu
want=1.6.8
cache=${XDG_CACHE_HOME:-$HOME/.cache}/perimeter/bird1
bin=$cache/root/usr/sbin
if [ -x "$bin/bird" ] && "$bin/bird" --version 2>&1 | grep -q "BIRD version $want"; then
	echo "$bin"
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
# apt drops privileges to _apt for downloads; a private directory it can
# write to avoids the warning and works for root and users alike.
chmod 0777 "$tmp"
apt-get download -q "bird=$(apt-cache policy bird | awk '/Candidate:/ {print $2}')" >&2
deb=$(ls bird_*.deb)
case $deb in
bird_$want-*) ;;
*) echo "bird1.sh: want BIRD $want, apt has $deb" >&2; exit 1 ;;
esac
rm -rf "$cache.new"
mkdir -p "$cache.new"
dpkg-deb -x "$deb" "$cache.new/root"
rm -rf "$cache"
mv "$cache.new" "$cache"
"$bin/bird" --version >&2
echo "$bin"
