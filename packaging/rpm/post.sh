# %post of perimeter: on the first install the unit is enabled but not
# started (the kubeconfig is not there yet). $1: 1 install, 2 upgrade.
set -e
if [ "$1" -eq 1 ]; then
	systemctl --no-reload enable perimeter.service >/dev/null 2>&1 || :
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || :
fi
exit 0
