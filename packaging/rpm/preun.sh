# %preun of perimeter: an erase stops and disables the daemon (on SIGTERM it
# stops HAProxy and withdraws its routes); an upgrade does not stop it.
# $1: 0 erase, 1 upgrade.
set -e
if [ "$1" -eq 0 ]; then
	systemctl --no-reload disable perimeter.service >/dev/null 2>&1 || :
	if [ -d /run/systemd/system ]; then
		systemctl stop perimeter.service >/dev/null 2>&1 || :
	fi
fi
exit 0
