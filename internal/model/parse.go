package model

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A parser turns one annotation or ConfigMap value into a typed value. The
// desc is what the documentation shows as the accepted values. Parsers never
// return a value that could not be written into haproxy.cfg as is.
type parser[T any] struct {
	desc  string
	parse func(string) (T, error)
}

// boolParser accepts the spellings the HAProxy Kubernetes Ingress Controller
// accepts, in any case, so "OFF" and "Enabled" work.
func boolParser() parser[bool] {
	return parser[bool]{
		desc:  "true|false|on|off|enabled|disabled",
		parse: parseBool,
	}
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "on", "enabled":
		return true, nil
	case "false", "off", "disabled":
		return false, nil
	}
	return false, errors.New("not a boolean (want true, false, on, off, enabled or disabled)")
}

// maxTimer is the largest timer HAProxy accepts (2^31-1 ms, about 24.8 days).
const maxTimer = (1<<31 - 1) * time.Millisecond

// durationParser accepts HAProxy's time format: an integer with an optional
// unit (us, ms, s, m, h, d; none means milliseconds, as in haproxy.cfg). The
// result is a positive whole number of milliseconds so renderers can write it
// back without rounding.
func durationParser() parser[time.Duration] {
	return parser[time.Duration]{
		desc:  "duration: integer with unit ms, s, m, h or d (no unit: ms), e.g. 500ms, 2s",
		parse: parseDuration,
	}
}

var durationUnits = []struct {
	suffix string
	unit   time.Duration
}{
	// Longer suffixes first, so "ms" is not read as "m" + garbage.
	{"us", time.Microsecond},
	{"ms", time.Millisecond},
	{"s", time.Second},
	{"m", time.Minute},
	{"h", time.Hour},
	{"d", 24 * time.Hour},
}

func parseDuration(s string) (time.Duration, error) {
	num, unit := s, time.Millisecond
	for _, u := range durationUnits {
		if strings.HasSuffix(s, u.suffix) {
			num, unit = s[:len(s)-len(u.suffix)], u.unit
			break
		}
	}
	if num == "" || !allDigits(num) {
		return 0, errors.New("not a duration (want an integer with unit ms, s, m, h or d, e.g. 500ms)")
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > int64(maxTimer/unit) {
		return 0, fmt.Errorf("too large (at most %s)", maxTimer)
	}
	d := time.Duration(n) * unit
	switch {
	case d <= 0:
		return 0, errors.New("must be positive")
	case d%time.Millisecond != 0:
		return 0, errors.New("must be a whole number of milliseconds")
	}
	return d, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// intRange accepts a decimal integer in [lo, hi].
func intRange(lo, hi int) parser[int] {
	return parser[int]{
		desc: fmt.Sprintf("integer %d..%d", lo, hi),
		parse: func(s string) (int, error) {
			if s == "" || !allDigits(strings.TrimPrefix(s, "-")) {
				return 0, errors.New("not an integer")
			}
			n, err := strconv.Atoi(s)
			if err != nil || n < lo || n > hi {
				return 0, fmt.Errorf("out of range (want %d..%d)", lo, hi)
			}
			return n, nil
		},
	}
}

// enumParser accepts exactly one of values.
func enumParser(values ...string) parser[string] {
	return parser[string]{
		desc: strings.Join(values, "|"),
		parse: func(s string) (string, error) {
			for _, v := range values {
				if s == v {
					return v, nil
				}
			}
			return "", fmt.Errorf("unknown value (want one of %s)", strings.Join(values, ", "))
		},
	}
}

// validHeaderName keeps header names to token characters HAProxy needs no
// quoting for.
func validHeaderName(s string) error {
	if s == "" {
		return errors.New("empty header name")
	}
	if len(s) > 256 {
		return errors.New("header name longer than 256 characters")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("header name %q has a character outside [A-Za-z0-9-]", s)
		}
	}
	return nil
}

// balanceAlgorithms are the load-balance values accepted without argument.
var balanceAlgorithms = []string{"roundrobin", "static-rr", "leastconn", "first", "source", "random", "uri"}

// balanceParser accepts an HAProxy balance algorithm: one of
// balanceAlgorithms or hdr(<header-name>).
func balanceParser() parser[string] {
	return parser[string]{
		desc: strings.Join(balanceAlgorithms, "|") + "|hdr(<header-name>)",
		parse: func(s string) (string, error) {
			for _, a := range balanceAlgorithms {
				if s == a {
					return a, nil
				}
			}
			if name, ok := strings.CutPrefix(s, "hdr("); ok {
				name, ok = strings.CutSuffix(name, ")")
				if !ok {
					return "", errors.New("hdr( without closing parenthesis")
				}
				if err := validHeaderName(name); err != nil {
					return "", err
				}
				return s, nil
			}
			return "", fmt.Errorf("unknown algorithm (want one of %s or hdr(<header-name>))", strings.Join(balanceAlgorithms, ", "))
		},
	}
}
