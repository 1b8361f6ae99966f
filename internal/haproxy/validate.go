package haproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// configChecker validates a config file the way `haproxy -c` does.
type configChecker interface {
	// Check returns a *checkError when HAProxy rejects the file, another
	// error when it could not run.
	Check(ctx context.Context, path string) error
}

// checkError carries HAProxy's ALERT lines for a rejected config.
type checkError struct {
	Alerts []string
}

func (e *checkError) Error() string {
	if len(e.Alerts) == 0 {
		return "haproxy rejected the configuration"
	}
	return "haproxy rejected the configuration: " + e.Alerts[0]
}

type programChecker struct {
	program string
	sandbox *sandbox // nil: unrestricted
}

func (c *programChecker) Check(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, c.program, "-c", "-f", path)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = haproxyEnv
	// Checked exactly as it will run: a file HAProxy may not read fails
	// here, attributed to the backend that names it.
	err := c.sandbox.start(cmd.Start)
	if err == nil {
		err = cmd.Wait()
	}
	if err == nil {
		return nil
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && ctx.Err() == nil {
		return &checkError{Alerts: alertLines(out.String())}
	}
	return fmt.Errorf("run %s -c: %w: %s", c.program, err, strings.TrimSpace(out.String()))
}

var alertRE = regexp.MustCompile(`^\[ALERT\]\s*(?:\(\d+\)\s*)?:\s*(.*)$`)

// alertLines keeps the text of HAProxy's ALERT lines, without the summary
// lines that only say that there were errors.
func alertLines(out string) []string {
	var alerts []string
	for _, l := range strings.Split(out, "\n") {
		m := alertRE.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		msg := m[1]
		if strings.Contains(msg, "Error(s) found in configuration file") || strings.Contains(msg, "Fatal errors found in configuration") {
			continue
		}
		alerts = append(alerts, msg)
	}
	if len(alerts) == 0 {
		// Keep something to report when HAProxy used another format.
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				alerts = append(alerts, l)
			}
		}
	}
	return alerts
}

var (
	parsingRE = regexp.MustCompile(`parsing \[([^\]]*):(\d+)\]\s*:?\s*(.*)$`)
	proxyRE   = regexp.MustCompile(`(?i)(?:backend|proxy) '([^']+)'\s*:?\s*(.*)$`)
)

// blame maps one ALERT line to the section it is about: through the line
// number for parsing errors, through the proxy name otherwise. It returns
// HAProxy's reason without the location.
func blame(cfg, alert string) (kind, name, reason string) {
	if m := parsingRE.FindStringSubmatch(alert); m != nil {
		line, _ := strconv.Atoi(m[2])
		kind, name = sectionAt(cfg, line)
		return kind, name, m[3]
	}
	if m := proxyRE.FindStringSubmatch(alert); m != nil {
		return "backend", m[1], m[2]
	}
	return "", "", alert
}

// check renders st, writes it next to the live config and runs the checker.
func (d *Driver) check(ctx context.Context, st *state) (cfg string, err error) {
	cfg, err = d.rend.config(st, d.cache)
	if err != nil {
		return "", err
	}
	if m := d.opts.MaxConfigSize; m > 0 && len(cfg) > m {
		return cfg, &sizeError{size: len(cfg), max: m}
	}
	// The candidate's certificates and error pages are read by the check.
	if err := d.sync(d.rend.checkFiles(st), false); err != nil {
		return "", err
	}
	tmp, err := writeTemp(d.paths.config, configFileOf(cfg).data)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp)
	// HAProxy names the file in its messages; name the live file instead
	// so the log lines are understandable.
	err = d.checker.Check(ctx, tmp)
	var ce *checkError
	if errors.As(err, &ce) {
		for i, a := range ce.Alerts {
			ce.Alerts[i] = strings.ReplaceAll(a, tmp, d.paths.config)
		}
	}
	return cfg, err
}
