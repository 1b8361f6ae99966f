package model

import (
	"errors"
	"fmt"
	"slices"
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

// balanceParser accepts HAProxy 2.6's balance algorithms with their
// options, as the HAProxy Kubernetes Ingress Controller passes them on:
// one of balanceAlgorithms, "uri" [len N] [depth N] [whole] [path-only],
// "url_param" NAME [check_post], hdr(NAME) [use_domain_only], random(N),
// rdp-cookie[(NAME)]. Every word is checked, so the value is safe to write
// as is; it is normalised to single spaces.
func balanceParser() parser[string] {
	return parser[string]{
		desc: "roundrobin|static-rr|leastconn|first|source|random[(N)]|uri [len N] [depth N] [whole] [path-only]|url_param <name> [check_post]|hdr(<header-name>) [use_domain_only]|rdp-cookie[(<name>)]",
		parse: func(s string) (string, error) {
			if strings.ContainsAny(s, "\t\r\n") {
				return "", errors.New("a line break or a tab in the value")
			}
			if rest, ok := strings.CutPrefix(s, "hdr("); ok {
				name, opts, ok := strings.Cut(rest, ")")
				if !ok {
					return "", errors.New("hdr( without closing parenthesis")
				}
				if err := validHeaderName(name); err != nil {
					return "", err
				}
				switch o := strings.Fields(opts); {
				case len(o) == 0:
					return "hdr(" + name + ")", nil
				case len(o) == 1 && o[0] == "use_domain_only" && strings.HasPrefix(opts, " "):
					return "hdr(" + name + ") use_domain_only", nil
				}
				return "", errors.New("hdr() takes only use_domain_only")
			}
			w := strings.Fields(s)
			if len(w) == 0 {
				return "", errors.New("empty")
			}
			alg, opts := w[0], w[1:]
			out := strings.Join(w, " ")
			switch {
			case slices.Contains(balanceAlgorithms, alg) && alg != "uri":
				if len(opts) > 0 {
					return "", fmt.Errorf("%s takes no option", alg)
				}
				return alg, nil
			case alg == "uri":
				for i := 0; i < len(opts); i++ {
					switch opts[i] {
					case "whole", "path-only":
					case "len", "depth":
						if i+1 >= len(opts) || !smallNumber(opts[i+1]) {
							return "", fmt.Errorf("uri %s wants a number", opts[i])
						}
						i++
					default:
						return "", fmt.Errorf("uri option %q unknown (want len N, depth N, whole, path-only)", opts[i])
					}
				}
				return out, nil
			case alg == "url_param":
				if len(opts) == 0 || !paramName(opts[0]) {
					return "", errors.New("url_param wants a parameter name ([A-Za-z0-9_.-])")
				}
				if len(opts) > 2 || len(opts) == 2 && opts[1] != "check_post" {
					return "", errors.New("url_param takes only check_post after the name")
				}
				return out, nil
			case strings.HasPrefix(alg, "random(") || strings.HasPrefix(alg, "rdp-cookie"):
				if len(opts) > 0 {
					return "", fmt.Errorf("%s takes no option", alg)
				}
				if n, ok := strings.CutPrefix(alg, "random("); ok {
					if n, ok = strings.CutSuffix(n, ")"); !ok || !smallNumber(n) || n == "0" {
						return "", errors.New("random(N) wants a number of draws from 1")
					}
					return alg, nil
				}
				if alg == "rdp-cookie" {
					return alg, nil
				}
				if n, ok := strings.CutPrefix(alg, "rdp-cookie("); ok {
					if n, ok = strings.CutSuffix(n, ")"); ok && paramName(n) {
						return alg, nil
					}
				}
				return "", errors.New("rdp-cookie wants (<cookie-name>) or nothing")
			}
			return "", fmt.Errorf("unknown algorithm (want one of %s, url_param, hdr(<header-name>), random(N) or rdp-cookie)", strings.Join(balanceAlgorithms, ", "))
		},
	}
}

// smallNumber is 1 to 5 digits: a length, a depth, a number of draws.
func smallNumber(s string) bool { return s != "" && len(s) <= 5 && allDigits(s) }

// paramName is a URL parameter or cookie name HAProxy takes as one word.
func paramName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}
