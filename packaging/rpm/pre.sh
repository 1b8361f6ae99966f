# %pre of perimeter: the system user exists before the files that belong to
# it are unpacked. $1: 1 install, 2 upgrade.
set -e
getent group perimeter >/dev/null || groupadd -r perimeter
getent passwd perimeter >/dev/null || \
	useradd -r -g perimeter -d /var/lib/perimeter -s /sbin/nologin \
		-c "Perimeter ingress daemon" perimeter
exit 0
