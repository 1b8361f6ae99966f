package haproxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// runtimeAPI is the worker's stats socket (Runtime API).
type runtimeAPI interface {
	// Execute runs commands in order and returns one response per command.
	// It stops at the first command HAProxy refuses and returns an error
	// naming it, together with the responses so far.
	Execute(ctx context.Context, cmds []string) ([]string, error)
	// WorkerPID is the pid of the worker that answers on the socket.
	WorkerPID(ctx context.Context) (int, error)
	// ExecuteTLS runs one certificate command with its payload (empty:
	// none) and checks HAProxy's answer.
	ExecuteTLS(ctx context.Context, cmd, payload string) error
}

// socketRuntime speaks to the stats socket with raw commands. Several
// commands share one connection, separated by ";" (one line per
// connection in non-interactive mode); HAProxy ends each command's output
// with an empty line, so responses can be told apart. client-native's
// runtime client would open one connection per command.
type socketRuntime struct {
	path string
}

// Runtime API lines are limited by HAProxy's buffer (tune.bufsize, 16 KiB
// by default); stay well below.
const maxLineBytes = 8 << 10

const socketTimeout = 10 * time.Second

func (r *socketRuntime) Execute(ctx context.Context, cmds []string) ([]string, error) {
	var out []string
	for len(cmds) > 0 {
		n, size := 0, 0
		for n < len(cmds) && (n == 0 || size+len(cmds[n])+1 <= maxLineBytes) {
			size += len(cmds[n]) + 1
			n++
		}
		chunk := cmds[:n]
		cmds = cmds[n:]
		raw, err := r.roundTrip(ctx, strings.Join(chunk, ";"))
		if err != nil {
			return out, err
		}
		resps := splitResponses(raw)
		for i, cmd := range chunk {
			if i >= len(resps) {
				return out, fmt.Errorf("runtime api: no response to %q", cmd)
			}
			if err := checkResponse(cmd, resps[i]); err != nil {
				return out, err
			}
			out = append(out, resps[i])
		}
	}
	return out, nil
}

func (r *socketRuntime) WorkerPID(ctx context.Context) (int, error) {
	raw, err := r.roundTrip(ctx, "show info")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(raw, "\n") {
		if v, ok := strings.CutPrefix(l, "Pid: "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("runtime api: no Pid in show info")
}

func (r *socketRuntime) roundTrip(ctx context.Context, line string) (string, error) {
	return unixRoundTrip(ctx, r.path, line)
}

// unixRoundTrip sends one line to a HAProxy CLI socket and reads until
// HAProxy closes the connection.
func unixRoundTrip(ctx context.Context, path, line string) (string, error) {
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", path)
	if err != nil {
		return "", fmt.Errorf("connect %s: %w", path, err)
	}
	defer conn.Close()
	deadline := time.Now().Add(socketTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if _, err := io.WriteString(conn, line+"\n"); err != nil {
		return "", fmt.Errorf("send to %s: %w", path, err)
	}
	// The master CLI waits for more commands until it sees the end of
	// the input; the stats socket does not mind.
	if err := conn.(*net.UnixConn).CloseWrite(); err != nil {
		return "", fmt.Errorf("send to %s: %w", path, err)
	}
	data, err := io.ReadAll(bufio.NewReader(conn))
	if err != nil {
		return string(data), fmt.Errorf("read from %s: %w", path, err)
	}
	return string(data), nil
}

// splitResponses cuts the output of ";"-separated commands: each response
// ends with an empty line; a command without output yields only that line.
func splitResponses(raw string) []string {
	if raw == "" {
		return nil
	}
	var out []string
	var cur []string
	for _, l := range strings.Split(raw, "\n") {
		if l == "" {
			out = append(out, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = append(cur, l)
	}
	// strings.Split leaves an empty element after the final newline.
	if len(out) > 0 && len(cur) == 0 && strings.HasSuffix(raw, "\n") {
		out = out[:len(out)-1]
	}
	if len(cur) > 0 {
		out = append(out, strings.Join(cur, "\n"))
	}
	return out
}

// checkResponse knows what success looks like for the commands we send:
// most are silent, the others answer with a known sentence.
func checkResponse(cmd, resp string) error {
	resp = strings.TrimSpace(resp)
	ok := resp == ""
	switch {
	case strings.HasPrefix(cmd, "set server ") && strings.Contains(cmd, " addr "):
		ok = strings.HasPrefix(resp, "IP changed from") || strings.HasPrefix(resp, "no need to change the addr")
	case strings.HasPrefix(cmd, "prepare map "):
		ok = strings.HasPrefix(resp, "New version created:")
	case strings.HasPrefix(cmd, "show "):
		ok = true
	}
	if !ok {
		return &runtimeError{Command: cmd, Response: resp}
	}
	return nil
}

type runtimeError struct {
	Command, Response string
}

func (e *runtimeError) Error() string {
	return fmt.Sprintf("runtime api: %q: %s", e.Command, e.Response)
}
