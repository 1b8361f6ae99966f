package haproxy

import (
	_ "embed"
	"fmt"
	"path/filepath"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// RequestMirror (model.RouteMirror). HAProxy 2.6 cannot mirror requests by
// itself; the daemon ships one fixed Lua script that registers an HTTP
// action sending a copy of the request from a task of its own, so the
// request is never delayed. The script is written next to haproxy.cfg and
// loaded only while some backend mirrors: a Lua state costs each worker
// memory.

//go:embed lua/mirror.lua
var mirrorLua []byte

const (
	// mirrorLuaFile is the script's name under ConfigDir.
	mirrorLuaFile = "perimeter-mirror.lua"
	// mirrorAction is the action the script registers.
	mirrorAction = "lua.perimeter-mirror"
)

func (r renderer) mirrorLuaPath() string {
	return filepath.Join(filepath.Dir(r.mapsDir), mirrorLuaFile)
}

// routeMirrors renders one action per mirror that copies any request. The
// only argument is a backend name the model made, checked again here; the
// share becomes a random draw of integers, so nothing of the route's text
// reaches haproxy.cfg.
func routeMirrors(ms []model.RouteMirror, add func(string, ...any)) (mirrors bool, err error) {
	for _, m := range ms {
		if !backendNameRE.MatchString(m.Backend) {
			return false, fmt.Errorf("mirror backend %q is not a backend name", m.Backend)
		}
		if m.Den < 1 || m.Num < 0 || m.Num > m.Den {
			return false, fmt.Errorf("mirror share %d/%d", m.Num, m.Den)
		}
		switch {
		case m.Num == 0:
			continue
		case m.Num == m.Den:
			add("http-request %s %s", mirrorAction, m.Backend)
		default:
			// rand(den) draws 0..den-1: below num in num of den draws.
			add("http-request %s %s if { rand(%d) lt %d }", mirrorAction, m.Backend, m.Den, m.Num)
		}
		mirrors = true
	}
	return mirrors, nil
}
