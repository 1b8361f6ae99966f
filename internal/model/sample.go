package model

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Sample expressions written by tenants (request-capture, %[...] in
// request-set-header and response-set-header) are checked against an
// allow-list of fetches and converters, with the number and kind of their
// arguments, so that an accepted expression is one HAProxy accepts too, and
// reads only the transaction it runs in: nothing of the process (env,
// hostname, variables, Lua), of other proxies (be_*, nbsrv, stick tables)
// and no side effects (debug, set-var).

// SampleContext is where an expression runs: it decides which fetches have
// something to read.
type SampleContext uint8

// Sample contexts.
const (
	// SampleRequest: http-request rules and captures.
	SampleRequest SampleContext = 1 << iota
	// SampleResponse: http-response rules.
	SampleResponse
	sampleBoth = SampleRequest | SampleResponse
)

// sampleType is the kind of value a fetch or converter gives, as far as
// HAProxy's casts care: an address cannot become a boolean.
type sampleType uint8

const (
	typeAny  sampleType = iota // str, int, bool, bin: castable to each other
	typeAddr                   // ipv4/ipv6
)

// argKind is what an argument may be.
type argKind uint8

const (
	argName argKind = iota + 1 // header, cookie or parameter name
	argInt                     // a decimal integer, optionally negative
	argUint                    // a decimal integer >= 0
	argSep                     // one separator character
	argText                    // a short word of [A-Za-z0-9._-]
	argEnum                    // one of the function's enum values
	argTrim                    // characters to trim
)

// sampleFunc is one allowed fetch or converter.
type sampleFunc struct {
	name string
	// ctx is where a fetch has data (converters run anywhere).
	ctx SampleContext
	// args are the argument kinds, the first minArgs required.
	args    []argKind
	minArgs int
	enum    []string
	// refusesAddr: HAProxy has no cast from an address to what this
	// converter takes.
	refusesAddr bool
	out         sampleType
	// example is a valid use, for docs and the haproxy -c test.
	example string
}

var sampleFetches = []sampleFunc{
	// Request.
	{name: "req.hdr", ctx: SampleRequest, args: []argKind{argName, argInt}, example: "req.hdr(host)"},
	{name: "req.fhdr", ctx: SampleRequest, args: []argKind{argName, argInt}, example: "req.fhdr(user-agent)"},
	{name: "req.hdr_cnt", ctx: SampleRequest, args: []argKind{argName}, example: "req.hdr_cnt(x-forwarded-for)"},
	{name: "hdr_cnt", ctx: SampleRequest, args: []argKind{argName}, example: "hdr_cnt(via)"},
	{name: "req.hdr_ip", ctx: SampleRequest, args: []argKind{argName, argInt}, minArgs: 1, out: typeAddr, example: "req.hdr_ip(x-real-ip)"},
	{name: "req.cook", ctx: SampleRequest, args: []argKind{argName}, example: "req.cook(session)"},
	{name: "req.cook_cnt", ctx: SampleRequest, args: []argKind{argName}, example: "req.cook_cnt(session)"},
	{name: "url_param", ctx: SampleRequest, args: []argKind{argName, argSep}, example: "url_param(id)"},
	{name: "urlp", ctx: SampleRequest, args: []argKind{argName, argSep}, example: "urlp(id)"},
	{name: "path", ctx: SampleRequest, example: "path"},
	{name: "pathq", ctx: SampleRequest, example: "pathq"},
	{name: "query", ctx: SampleRequest, example: "query"},
	{name: "base", ctx: SampleRequest, example: "base"},
	{name: "url", ctx: SampleRequest, example: "url"},
	{name: "req.ver", ctx: SampleRequest, example: "req.ver"},
	// Request in http-request rules, response in http-response rules.
	{name: "hdr", ctx: sampleBoth, args: []argKind{argName, argInt}, example: "hdr(user-agent)"},
	{name: "cookie", ctx: sampleBoth, args: []argKind{argName}, example: "cookie(session)"},
	// The transaction and its connection.
	{name: "method", ctx: sampleBoth, example: "method"},
	{name: "src", ctx: sampleBoth, out: typeAddr, example: "src"},
	{name: "src_port", ctx: sampleBoth, example: "src_port"},
	{name: "dst_port", ctx: sampleBoth, example: "dst_port"},
	{name: "fc_http_major", ctx: sampleBoth, example: "fc_http_major"},
	{name: "ssl_fc", ctx: sampleBoth, example: "ssl_fc"},
	{name: "ssl_fc_sni", ctx: sampleBoth, example: "ssl_fc_sni"},
	{name: "ssl_fc_protocol", ctx: sampleBoth, example: "ssl_fc_protocol"},
	{name: "ssl_fc_cipher", ctx: sampleBoth, example: "ssl_fc_cipher"},
	{name: "ssl_c_used", ctx: sampleBoth, example: "ssl_c_used"},
	{name: "ssl_c_verify", ctx: sampleBoth, example: "ssl_c_verify"},
	{name: "ssl_c_s_dn", ctx: sampleBoth, args: []argKind{argText}, example: "ssl_c_s_dn(CN)"},
	{name: "ssl_c_i_dn", ctx: sampleBoth, args: []argKind{argText}, example: "ssl_c_i_dn(CN)"},
	{name: "capture.req.method", ctx: sampleBoth, example: "capture.req.method"},
	{name: "capture.req.uri", ctx: sampleBoth, example: "capture.req.uri"},
	{name: "capture.req.ver", ctx: sampleBoth, example: "capture.req.ver"},
	{name: "unique-id", ctx: sampleBoth, example: "unique-id"},
	{name: "uuid", ctx: sampleBoth, example: "uuid"},
	{name: "date", ctx: sampleBoth, args: []argKind{argInt}, example: "date"},
	{name: "rand", ctx: sampleBoth, args: []argKind{argUint}, example: "rand(100)"},
	// Response.
	{name: "res.hdr", ctx: SampleResponse, args: []argKind{argName, argInt}, example: "res.hdr(content-type)"},
	{name: "res.fhdr", ctx: SampleResponse, args: []argKind{argName, argInt}, example: "res.fhdr(cache-control)"},
	{name: "res.hdr_cnt", ctx: SampleResponse, args: []argKind{argName}, example: "res.hdr_cnt(set-cookie)"},
	{name: "res.cook", ctx: SampleResponse, args: []argKind{argName}, example: "res.cook(session)"},
	{name: "res.ver", ctx: SampleResponse, example: "res.ver"},
	{name: "status", ctx: SampleResponse, example: "status"},
}

var sampleConverters = []sampleFunc{
	{name: "lower", example: "lower"},
	{name: "upper", example: "upper"},
	{name: "base64", example: "base64"},
	{name: "b64dec", example: "b64dec"},
	{name: "hex", example: "hex"},
	{name: "url_dec", example: "url_dec"},
	{name: "url_enc", example: "url_enc"},
	{name: "length", example: "length"},
	{name: "bytes", args: []argKind{argUint, argUint}, minArgs: 1, example: "bytes(0,8)"},
	{name: "field", args: []argKind{argInt, argSep, argUint}, minArgs: 2, example: "field(1,:)"},
	{name: "word", args: []argKind{argInt, argSep, argUint}, minArgs: 2, example: "word(1,/)"},
	{name: "ltrim", args: []argKind{argTrim}, minArgs: 1, example: "ltrim(/)"},
	{name: "rtrim", args: []argKind{argTrim}, minArgs: 1, example: "rtrim(/)"},
	{name: "json", args: []argKind{argEnum}, enum: []string{"ascii", "utf8", "utf8s", "utf8p", "utf8ps"}, example: "json(utf8s)"},
	{name: "crc32", args: []argKind{argUint}, example: "crc32"},
	{name: "djb2", args: []argKind{argUint}, example: "djb2"},
	{name: "sdbm", args: []argKind{argUint}, example: "sdbm"},
	{name: "wt6", args: []argKind{argUint}, example: "wt6"},
	{name: "xxh3", args: []argKind{argUint}, example: "xxh3"},
	{name: "xxh32", args: []argKind{argUint}, example: "xxh32"},
	{name: "xxh64", args: []argKind{argUint}, example: "xxh64"},
	{name: "sha1", example: "sha1"},
	{name: "sha2", args: []argKind{argEnum}, enum: []string{"224", "256", "384", "512"}, example: "sha2(256)"},
	{name: "http_date", args: []argKind{argInt, argEnum}, enum: []string{"s", "ms", "us"}, example: "http_date"},
	{name: "ipmask", args: []argKind{argUint, argUint}, minArgs: 1, out: typeAddr, example: "ipmask(24)"},
	{name: "iif", args: []argKind{argText, argText}, minArgs: 2, refusesAddr: true, example: "iif(yes,no)"},
	{name: "not", refusesAddr: true, example: "not"},
	{name: "bool", refusesAddr: true, example: "bool"},
}

// Limits of one expression.
const (
	maxSampleLen   = 256
	maxSampleConvs = 8
	maxArgLen      = 64
)

// sampleSeps are the separators field, word and url_param may take: one
// character that needs no quoting in haproxy.cfg, a capture or %[...].
const sampleSeps = ":./-_=&|@!~*+?"

func findSample(list []sampleFunc, name string) *sampleFunc {
	for i := range list {
		if list[i].name == name {
			return &list[i]
		}
	}
	return nil
}

// checkSample reports why expr is not an allowed sample expression in ctx:
// fetch[(args)][,converter[(args)]]...
func checkSample(expr string, ctx SampleContext) error {
	if expr == "" {
		return errors.New("empty sample expression")
	}
	if len(expr) > maxSampleLen {
		return fmt.Errorf("sample expression longer than %d characters", maxSampleLen)
	}
	parts, err := splitSample(expr)
	if err != nil {
		return err
	}
	if len(parts)-1 > maxSampleConvs {
		return fmt.Errorf("more than %d converters", maxSampleConvs)
	}
	var typ sampleType
	for i, p := range parts {
		list, what := sampleConverters, "converter"
		if i == 0 {
			list, what = sampleFetches, "fetch"
		}
		f := findSample(list, p.name)
		if f == nil {
			return fmt.Errorf("%s %q is not allowed (allowed: %s)", what, p.name, strings.Join(sampleNames(list, ctx), ", "))
		}
		if i == 0 && f.ctx&ctx == 0 {
			where := "requests"
			if ctx == SampleResponse {
				where = "responses"
			}
			return fmt.Errorf("fetch %q has nothing to read in %s", p.name, where)
		}
		if i > 0 && f.refusesAddr && typ == typeAddr {
			return fmt.Errorf("converter %q cannot take an address", p.name)
		}
		if err := checkArgs(f, p.args, p.parens); err != nil {
			return fmt.Errorf("%s %s: %v", what, p.name, err)
		}
		typ = f.out
	}
	return nil
}

type samplePart struct {
	name   string
	args   []string
	parens bool
}

// splitSample cuts expr into its fetch and converters.
func splitSample(expr string) ([]samplePart, error) {
	var out []samplePart
	rest := expr
	for {
		i := 0
		for i < len(rest) && (isAlnum(rest[i]) || rest[i] == '.' || rest[i] == '_' || rest[i] == '-') {
			i++
		}
		if i == 0 {
			return nil, fmt.Errorf("%q is not a sample expression like hdr(name) or cookie(name),lower", expr)
		}
		p := samplePart{name: rest[:i]}
		rest = rest[i:]
		if strings.HasPrefix(rest, "(") {
			end := strings.IndexByte(rest, ')')
			if end < 0 {
				return nil, fmt.Errorf("%q: ( without )", expr)
			}
			p.parens = true
			if inner := rest[1:end]; inner != "" {
				p.args = strings.Split(inner, ",")
			}
			rest = rest[end+1:]
		}
		out = append(out, p)
		if rest == "" {
			return out, nil
		}
		if rest[0] != ',' {
			return nil, fmt.Errorf("%q: unexpected %q after %s", expr, rest[0], p.name)
		}
		rest = rest[1:]
	}
}

func checkArgs(f *sampleFunc, args []string, parens bool) error {
	if parens && len(args) == 0 && f.minArgs == 0 && len(f.args) == 0 {
		return nil // "lower()" is the same as "lower"
	}
	if len(args) < f.minArgs {
		return fmt.Errorf("wants at least %d argument(s)", f.minArgs)
	}
	if len(args) > len(f.args) {
		return fmt.Errorf("takes at most %d argument(s)", len(f.args))
	}
	for i, a := range args {
		if err := checkArg(f, f.args[i], a); err != nil {
			return fmt.Errorf("argument %d %q: %v", i+1, a, err)
		}
	}
	return nil
}

func checkArg(f *sampleFunc, kind argKind, a string) error {
	if len(a) > maxArgLen {
		return fmt.Errorf("longer than %d characters", maxArgLen)
	}
	switch kind {
	case argName:
		if a == "" {
			return errors.New("empty name")
		}
		for i := 0; i < len(a); i++ {
			if c := a[i]; !isAlnum(c) && strings.IndexByte("._-", c) < 0 {
				return fmt.Errorf("character %q outside [A-Za-z0-9._-]", c)
			}
		}
	case argInt, argUint:
		digits := a
		if kind == argInt {
			digits = strings.TrimPrefix(a, "-")
		}
		if digits == "" || len(digits) > 9 || !allDigits(digits) {
			return errors.New("not an integer")
		}
	case argSep:
		if len(a) != 1 || strings.IndexByte(sampleSeps, a[0]) < 0 {
			return fmt.Errorf("want one separator of %s", sampleSeps)
		}
	case argTrim:
		if a == "" {
			return errors.New("empty")
		}
		for i := 0; i < len(a); i++ {
			if strings.IndexByte(sampleSeps, a[i]) < 0 && !isAlnum(a[i]) {
				return fmt.Errorf("character %q outside [A-Za-z0-9%s]", a[i], sampleSeps)
			}
		}
	case argText:
		if a == "" {
			return errors.New("empty")
		}
		for i := 0; i < len(a); i++ {
			if c := a[i]; !isAlnum(c) && strings.IndexByte("._-", c) < 0 {
				return fmt.Errorf("character %q outside [A-Za-z0-9._-]", c)
			}
		}
	case argEnum:
		if !slices.Contains(f.enum, a) {
			return fmt.Errorf("want one of %s", strings.Join(f.enum, ", "))
		}
	}
	return nil
}

func sampleNames(list []sampleFunc, ctx SampleContext) []string {
	var out []string
	for _, f := range list {
		if f.ctx == 0 || f.ctx&ctx != 0 {
			out = append(out, f.name)
		}
	}
	return out
}

// SampleExamples lists a valid use of every allowed fetch in ctx and of
// every allowed converter after a fetch, for documentation and for tests
// that run them through `haproxy -c`.
func SampleExamples(ctx SampleContext) []string {
	var out []string
	var text, addr string
	for _, f := range sampleFetches {
		if f.ctx&ctx == 0 {
			continue
		}
		out = append(out, f.example)
		switch {
		case f.out == typeAddr && addr == "":
			addr = f.example
		case f.out == typeAny && text == "" && len(f.args) > 0:
			text = f.example
		}
	}
	for _, c := range sampleConverters {
		out = append(out, text+","+c.example)
		if !c.refusesAddr {
			out = append(out, addr+","+c.example)
		}
	}
	return out
}

// parseHeaderFormat splits a header value into what HAProxy writes
// literally and %[...] sample expressions, checking each expression in
// ctx. It returns the value as an HAProxy log-format string: literal text
// with '%' doubled, and the expressions. "%%" is a literal '%' (as in
// HAProxy); any other '%' not followed by '[' is literal too.
func parseHeaderFormat(v string, ctx SampleContext) (format string, samples bool, err error) {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		switch {
		case strings.HasPrefix(v[i:], "%%"):
			b.WriteString("%%")
			i++
		case strings.HasPrefix(v[i:], "%["):
			end := strings.IndexByte(v[i:], ']')
			if end < 0 {
				return "", false, errors.New("%[ without ]")
			}
			expr := v[i+2 : i+end]
			if err := checkSample(expr, ctx); err != nil {
				return "", false, err
			}
			b.WriteString("%[" + expr + "]")
			samples = true
			i += end
		default:
			b.WriteString("%%")
		}
	}
	return b.String(), samples, nil
}

// CheckHeaderFormat reports why format is not a log-format string
// parseHeaderFormat could have produced for ctx: the renderer's last check
// before it writes one into haproxy.cfg.
func CheckHeaderFormat(format string, ctx SampleContext) error {
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		switch {
		case strings.HasPrefix(format[i:], "%%"):
			i++
		case strings.HasPrefix(format[i:], "%["):
			end := strings.IndexByte(format[i:], ']')
			if end < 0 {
				return errors.New("%[ without ]")
			}
			if err := checkSample(format[i+2:i+end], ctx); err != nil {
				return err
			}
			i += end
		default:
			return errors.New("lone % in a log-format string at " + strconv.Itoa(i))
		}
	}
	return nil
}
