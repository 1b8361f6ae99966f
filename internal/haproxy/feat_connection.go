package haproxy

import (
	parser "github.com/haproxytech/client-native/v6/config-parser"
	"github.com/haproxytech/client-native/v6/config-parser/types"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// connectionDefaults writes http-connection-mode, the fin timeouts and
// logasap into the defaults section, where every frontend and backend
// inherits them. The model only lets known modes through; anything else
// keeps HAProxy's keep-alive.
func (r renderer) connectionDefaults(w *cfgWriter, c model.ConnectionSettings) {
	switch c.Mode {
	case model.ConnServerClose:
		w.set(parser.Defaults, defaultsName, "option http-server-close", &types.SimpleOption{})
	case model.ConnClose:
		w.set(parser.Defaults, defaultsName, "option httpclose", &types.SimpleOption{})
	}
	if c.TimeoutClientFin > 0 {
		w.set(parser.Defaults, defaultsName, "timeout client-fin", &types.SimpleTimeout{Value: haproxyDuration(c.TimeoutClientFin)})
	}
	if c.TimeoutServerFin > 0 {
		w.set(parser.Defaults, defaultsName, "timeout server-fin", &types.SimpleTimeout{Value: haproxyDuration(c.TimeoutServerFin)})
	}
	if c.LogASAP {
		w.set(parser.Defaults, defaultsName, "option logasap", &types.SimpleOption{})
	}
}
