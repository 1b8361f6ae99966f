# %postun of perimeter. $1: 0 erase, 1 upgrade.
# Upgrade: a running daemon is restarted, which its unit makes a hand-over
# (RestartKillSignal=SIGUSR1: HAProxy keeps serving, no request is dropped).
# Erase: the state, the runtime directory and any routes of protocol
# perimeter (201) go. As RPM does with changed configuration, and as Fedora's
# packaging guidelines ask of system users, a modified perimeter.yaml
# (.rpmsave), the kubeconfig and the perimeter user stay.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || :
fi
if [ "$1" -ge 1 ]; then
	if [ -d /run/systemd/system ]; then
		systemctl try-restart perimeter.service >/dev/null 2>&1 || :
	fi
	exit 0
fi
if command -v ip >/dev/null 2>&1; then
	ip -4 route flush table all proto 201 >/dev/null 2>&1 || :
	ip -6 route flush table all proto 201 >/dev/null 2>&1 || :
fi
rm -rf /var/lib/perimeter /run/perimeter
exit 0
