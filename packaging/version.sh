#!/bin/sh
# Prints the package version, valid for dpkg and rpm alike.
#   VERSION=1.2.3 (or v1.2.3) given: that, without the "v".
#   on a tag v1.2.3:            1.2.3
#   3 commits after v1.2.3:     1.2.3+git20261125.3.84e3f6e (after 1.2.3, before 1.2.4)
#   no tag yet:                 0.0.0~git20261125.84e3f6e (before any release)
# The date is the commit's (UTC), so a rebuild gives the same version, and
# snapshots of later days sort after earlier ones. A work tree with
# uncommitted changes gets "+dirty" so it never passes for the commit.
set -eu

valid() {
	# Debian upstream version without an epoch or revision: starts with a
	# digit; letters, digits, . + ~ only (no "-": the revision is separate;
	# no ":": rpm's Version cannot carry an epoch).
	printf '%s\n' "$1" | grep -Eq '^[0-9][A-Za-z0-9.+~]*$'
}

if [ -n "${VERSION:-}" ]; then
	v=${VERSION#v}
	if ! valid "$v"; then
		echo "version.sh: VERSION=$VERSION is not a valid package version (want e.g. 1.2.3 or 1.2.3~rc1)" >&2
		exit 1
	fi
	printf '%s\n' "$v"
	exit 0
fi

cd "$(dirname "$0")/.."
hash=$(git rev-parse --short=7 HEAD)
date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d HEAD)
dirty=
if ! git diff --quiet HEAD -- 2>/dev/null; then
	dirty=+dirty
fi
if desc=$(git describe --tags --match 'v[0-9]*' --long HEAD 2>/dev/null); then
	# v1.2.3-N-gHASH
	n=${desc%-g*}
	n=${n##*-}
	tag=${desc%-*-g*}
	tag=${tag#v}
	if [ "$n" = 0 ]; then
		v=$tag$dirty
	else
		v=$tag+git$date.$n.$hash$dirty
	fi
else
	v=0.0.0~git$date.$hash$dirty
fi
if ! valid "$v"; then
	echo "version.sh: cannot make a package version of $v; tag releases vX.Y.Z or set VERSION" >&2
	exit 1
fi
printf '%s\n' "$v"
