// Package nspawn tests the Debian package end to end on a real systemd: a
// Debian 12 machine booted with systemd-nspawn installs the .deb that `make
// package` builds, runs the daemon as the packaged unit against the test
// API server, and is restarted, upgraded, reloaded, frozen, stopped and
// purged under load. The package has tests only.
package nspawn
