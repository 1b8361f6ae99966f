// Package systemd tells the service manager about the daemon's state. Every
// call is a no-op when the daemon is not run by systemd.
package systemd

import (
	"context"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Ready says the daemon serves its first full configuration.
func Ready(status string) { _, _ = daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS="+status) }

// Status updates the one-line status `systemctl status` shows.
func Status(status string) { _, _ = daemon.SdNotify(false, "STATUS="+status) }

// Stopping says a clean shutdown has begun.
func Stopping() { _, _ = daemon.SdNotify(false, daemon.SdNotifyStopping) }

// Watchdog pings the watchdog at half its interval for as long as healthy
// reports true, so a wedged sync loop gets the daemon restarted.
func Watchdog(ctx context.Context, healthy func() bool) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval == 0 {
		return
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if healthy() {
				_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			}
		}
	}
}
