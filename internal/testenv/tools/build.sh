#!/bin/sh
# Builds the test bed's kube-apiserver and etcd from the Go module proxy into
# the cache directory (default ~/.cache/perimeter/bin). A binary already there
# at the right version is kept, so only the first run pays the build (~4 min).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
K8S=1.37.1
ETCD=3.6.16
OUT=${PERIMETER_BIN_DIR:-${XDG_CACHE_HOME:-${HOME:-/var/tmp}/.cache}/perimeter/bin}
mkdir -p "$OUT"

stamp() { [ -x "$OUT/$1" ] && [ "$(cat "$OUT/$1.version" 2>/dev/null)" = "$2" ]; }

if ! stamp etcd "$ETCD"; then
	echo "building etcd $ETCD into $OUT" >&2
	(cd "$HERE/etcdbin" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$OUT/etcd" .)
	echo "$ETCD" >"$OUT/etcd.version"
fi

if ! stamp kube-apiserver "$K8S"; then
	echo "building kube-apiserver $K8S into $OUT (first time only, a few minutes)" >&2
	MINOR=$(echo "$K8S" | cut -d. -f2)
	LD="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		LD="$LD -X $p.gitVersion=v$K8S -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean"
	done
	(cd "$HERE/k8sbin" && CGO_ENABLED=0 go build -trimpath -ldflags "$LD" -o "$OUT/kube-apiserver" ./cmd/kube-apiserver)
	echo "$K8S" >"$OUT/kube-apiserver.version"
fi
echo "$OUT"
