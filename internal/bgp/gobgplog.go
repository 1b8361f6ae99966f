package bgp

import (
	"context"
	"log/slog"
	"strings"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
)

// gobgpLogger sends GoBGP's logs to slog. GoBGP is chatty at Info about
// things the speaker logs itself (sessions up and down), so its Info becomes
// Debug; and its Fatal/Panic must never end the process (the default logger
// calls os.Exit), so they become Error.
type gobgpLogger struct {
	log *slog.Logger
}

func newGoBGPLogger(l *slog.Logger) gobgpLogger {
	return gobgpLogger{log: l.With("component", "gobgp")}
}

func (g gobgpLogger) emit(level slog.Level, msg string, fields gobgplog.Fields) {
	// Harmless in VMs and containers without IP_MINTTL support; the last
	// is how GoBGP records a path our import policy rejected.
	if strings.HasPrefix(msg, "cannot set TTL") || strings.HasPrefix(msg, "cannot set minimal TTL") ||
		strings.HasPrefix(msg, "No matching path for withdraw found") {
		level = slog.LevelDebug
	}
	if !g.log.Enabled(context.Background(), level) {
		return
	}
	args := make([]any, 0, 2*len(fields))
	for k, v := range fields {
		args = append(args, k, v)
	}
	g.log.Log(context.Background(), level, msg, args...)
}

func (g gobgpLogger) Panic(msg string, fields gobgplog.Fields) { g.emit(slog.LevelError, msg, fields) }
func (g gobgpLogger) Fatal(msg string, fields gobgplog.Fields) { g.emit(slog.LevelError, msg, fields) }
func (g gobgpLogger) Error(msg string, fields gobgplog.Fields) { g.emit(slog.LevelError, msg, fields) }
func (g gobgpLogger) Warn(msg string, fields gobgplog.Fields)  { g.emit(slog.LevelWarn, msg, fields) }
func (g gobgpLogger) Info(msg string, fields gobgplog.Fields)  { g.emit(slog.LevelDebug, msg, fields) }
func (g gobgpLogger) Debug(msg string, fields gobgplog.Fields) {
	g.emit(slog.LevelDebug-4, msg, fields)
}

// SetLevel is ignored: slog's handler decides.
func (g gobgpLogger) SetLevel(gobgplog.LogLevel) {}

// GetLevel lets GoBGP skip building debug messages nobody will see.
func (g gobgpLogger) GetLevel() gobgplog.LogLevel {
	if g.log.Enabled(context.Background(), slog.LevelDebug-4) {
		return gobgplog.DebugLevel
	}
	if g.log.Enabled(context.Background(), slog.LevelDebug) {
		return gobgplog.InfoLevel
	}
	return gobgplog.WarnLevel
}
