package systemd

import (
	"strconv"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// Reloading says a reload of the configuration has begun (sd_notify(3):
// RELOADING=1 with the CLOCK_MONOTONIC time, which Type=notify-reload
// requires and older managers ignore). Reloaded must follow.
func Reloading() {
	msg := daemon.SdNotifyReloading
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) == nil {
		msg += "\nMONOTONIC_USEC=" + strconv.FormatInt(ts.Nano()/1000, 10)
	}
	_, _ = daemon.SdNotify(false, msg)
}

// Reloaded ends a reload: the daemon serves again, as status says.
func Reloaded(status string) { Ready(status) }
