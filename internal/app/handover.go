package app

import "errors"

// A hand-over restart (SIGUSR1, systemd's RestartKillSignal): the daemon
// exits leaving HAProxy serving and its BGP routes in the kernel; the next
// daemon with the same --runtime-dir adopts that HAProxy, reloads it with its
// own configuration and sweeps the routes its peers no longer announce. A
// stop (SIGTERM) still takes HAProxy and, unless --bgp-keep-routes-on-exit,
// the routes with it.

// errHandOver ends Run cleanly, like a cancelled context.
var errHandOver = errors.New("hand-over restart")
