#!/bin/sh
# lintian --pedantic and rpmlint on the packages `make package` built (the
# newest in dist/, or those given as arguments). Fails on any lintian error
# or warning and on any rpmlint error; prints everything they report.
set -eu
cd "$(dirname "$0")/.."

# The newest: ls -t sorts by time, and the names are make package's own.
# shellcheck disable=SC2012
deb=${1:-$(ls -t dist/perimeter_*_amd64.deb | head -n 1)}
# shellcheck disable=SC2012
rpm=${2:-$(ls -t dist/perimeter-*.x86_64.rpm | head -n 1)}

echo "lintian --pedantic $deb"
lintian --pedantic --display-info --fail-on error,warning "$deb"
echo "rpmlint $rpm"
# nfpm's rpm payload names its files with absolute paths (/usr/bin/perimeter,
# not ./usr/bin/perimeter), and rpmlint unpacks it with a plain `cpio -id`:
# run as root, that would write the package into /. A cpio that strips the
# leading / keeps the files in rpmlint's scratch directory.
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
printf '#!/bin/sh\nexec %s --no-absolute-filenames "$@"\n' "$(command -v cpio)" >"$shim/cpio"
chmod +x "$shim/cpio"
PATH="$shim:$PATH" rpmlint --config packaging/rpmlint.toml "$rpm"
