package testenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
)

// MasterReloads reads the reload counter of the HAProxy master whose CLI
// listens on the unix socket at path ("show proc", the master's line), for
// tests that show a change did or did not reload.
func MasterReloads(ctx context.Context, path string) (int, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return 0, err
		}
	}
	if _, err := io.WriteString(conn, "show proc\n"); err != nil {
		return 0, err
	}
	// The master CLI answers once the input ends.
	if err := conn.(*net.UnixConn).CloseWrite(); err != nil {
		return 0, err
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		return 0, err
	}
	// "<pid> master <reloads> [failed: N] <uptime> <version>"
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) >= 3 && f[1] == "master" {
			return strconv.Atoi(f[2])
		}
	}
	return 0, fmt.Errorf("show proc: no master line in %q", out)
}
