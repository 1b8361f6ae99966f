package haproxy

import "context"

// MasterReloads reads the reload counter of the HAProxy master listening on
// the master CLI socket at path; tests and tools use it to show that a
// change did (or did not) cause a reload.
func MasterReloads(ctx context.Context, path string) (int, error) {
	pl, err := (&masterSocket{path: path}).ShowProc(ctx)
	if err != nil {
		return 0, err
	}
	return pl.Reloads, nil
}
