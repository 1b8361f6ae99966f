#!/bin/sh
# Builds dist/perimeter_<version>-1_amd64.deb and
# dist/perimeter-<version>-1.x86_64.rpm (run by `make package`).
#   VERSION   package version (default: from git, see version.sh)
#   NFPM      the nfpm binary (the Makefile installs the pinned one)
#   PKG_MAINTAINER  Maintainer of the packages
set -eu
cd "$(dirname "$0")/.."

: "${GO:=go}"
: "${MAKE:=make}"
: "${NFPM:=nfpm}"
: "${PKG_MAINTAINER:=Perimeter maintainers <maintainers@perimeter-ingress.invalid>}"
PKG_VERSION=$(packaging/version.sh)
export PKG_VERSION PKG_MAINTAINER
# Reproducible: file times, the man page's date and the changelog's are the
# commit's.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct HEAD)
fi
export SOURCE_DATE_EPOCH

# A directory of this build's own: builds of two versions may run at once
# (a test builds an old and a new package for an upgrade).
mkdir -p dist
build=$(mktemp -d dist/build.XXXXXX)
trap 'rm -rf "$build"' EXIT
export PKG_BUILD="$build"

# The Makefile's build: static (CGO_ENABLED=0), -trimpath, stripped (-s -w),
# with the package version as `perimeter version`.
"$MAKE" --no-print-directory build BIN="$build/perimeter" VERSION="$PKG_VERSION"

date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)
"$GO" run ./packaging/docgen -version "$PKG_VERSION" -date "$date" >"$build/perimeter.8"
gzip -n -9 -c "$build/perimeter.8" >"$build/perimeter.8.gz"
# The binary links Go modules under other licenses (BSD, MIT, Apache-2.0
# with NOTICE files): their terms ship with it, verbatim.
"$GO" run ./packaging/docgen -licenses "$build/licenses" "$build/perimeter"
find "$build/licenses" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
# Every key commented out at its default, from the daemon's own reference.
"$build/perimeter" config-reference --format=yaml >"$build/perimeter.yaml"

# One entry: the packaging of this version. Built from git, the commit says
# what changed upstream.
{
	printf 'perimeter (%s-1) unstable; urgency=medium\n\n' "$PKG_VERSION"
	printf '  * Package of git commit %s.\n\n' "$(git rev-parse --short=12 HEAD)"
	printf ' -- %s  %s\n' "$PKG_MAINTAINER" "$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
} >"$build/changelog.Debian"
gzip -n -9 -c "$build/changelog.Debian" >"$build/changelog.Debian.gz"

deb=dist/perimeter_${PKG_VERSION}-1_amd64.deb
rpm=dist/perimeter-${PKG_VERSION}-1.x86_64.rpm
"$NFPM" package --config packaging/nfpm.yaml --packager deb --target "$deb"
# The rpm's %changelog, from a changelog in chglog's format. Its version
# must parse as semver: X.Y.Z, then the rest and the release as one
# prerelease identifier (0.0.0~git20261125.84e3f6e-1 is
# 0.0.0-git20261125-84e3f6e-1 there).
base=$(printf '%s' "$PKG_VERSION" | sed -E 's/^([0-9]+(\.[0-9]+){0,2}).*/\1/')
pre=$(printf '%s' "${PKG_VERSION#"$base"}-1" | sed -E 's/^[-.~+]+//; s/[.~+]/-/g')
cat >"$build/changelog.rpm.yaml" <<EOF
- semver: $base-$pre
  date: $(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
  packager: $PKG_MAINTAINER
  changes:
    - note: Package of git commit $(git rev-parse --short=12 HEAD).
EOF
{
	cat packaging/nfpm.yaml
	echo "changelog: $build/changelog.rpm.yaml"
} >"$build/nfpm-rpm.yaml"
"$NFPM" package --config "$build/nfpm-rpm.yaml" --packager rpm --target "$rpm"
echo "$deb"
echo "$rpm"
