package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// DefaultPath is where the packages install the configuration file.
const DefaultPath = "/etc/perimeter/perimeter.yaml"

// ErrUsage wraps a command-line error the flag package has already printed.
var ErrUsage = errors.New("usage")

// FileError is a problem of the configuration file, at a line.
type FileError struct {
	Path string
	Line int    // 0: the file as a whole
	Key  string // empty when the line has no key (a YAML syntax error)
	Msg  string
}

func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString(e.Path)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Source remembers how a Config was made (command line, file), so that a
// reload makes the next one the same way.
type Source struct {
	name     string
	args     []string
	path     string
	explicit bool
	// set are the flags given on the command line: they win over the file.
	set   map[string]bool
	check func(*Config) error
}

// Path is the configuration file.
func (s *Source) Path() string { return s.path }

// Parse parses args into fs (made by c.FlagSet, perhaps with more flags of
// its own), fills what the command line left unset from the configuration
// file, and validates the result with c.Validate and check (when not nil).
// A command-line error wraps ErrUsage; a problem of the file is a
// *FileError; a bad value given as a flag is a *KeyError.
func Parse(c *Config, fs *flag.FlagSet, args []string, check func(*Config) error) (*Source, error) {
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	src := &Source{name: fs.Name(), args: args, path: c.ConfigFile, set: map[string]bool{}, check: check}
	fs.Visit(func(f *flag.Flag) { src.set[canonical(f.Name)] = true })
	src.explicit = src.set["config"]
	if c.Version {
		return src, nil
	}
	return src, src.fill(c, fs)
}

// Load makes a new Config from the same command line and the file as it is
// now: what a reload applies.
func (s *Source) Load() (*Config, error) {
	c := new(Config)
	fs := c.FlagSet(s.name, io.Discard)
	if err := fs.Parse(s.args); err != nil {
		return nil, err
	}
	return c, s.fill(c, fs)
}

func (s *Source) fill(c *Config, fs *flag.FlagSet) error {
	f, err := readFile(s.path, s.explicit)
	if err != nil {
		return err
	}
	// Values the file failed to set keep their defaults, which are valid:
	// the checks below then report the file's other problems alongside.
	applyErr := f.apply(fs, s.set)
	err = c.Validate()
	if s.check != nil {
		err = errors.Join(err, s.check(c))
	}
	if err = errors.Join(applyErr, err); err != nil {
		return f.locate(err)
	}
	c.values = map[string]string{}
	for _, k := range fileKeys() {
		if k.Alias == "" {
			c.values[k.Name] = fs.Lookup(k.Name).Value.String()
		}
	}
	return nil
}

// file is the parsed configuration file and where each key was set.
type file struct {
	path  string
	root  *yaml.Node // a mapping, or nil for an empty or missing file
	lines map[string]int
	items map[string]map[string]int
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func readFile(path string, explicit bool) (*file, error) {
	f := &file{path: path, lines: map[string]int{}, items: map[string]map[string]int{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return f, nil
	}
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return f, nil
		}
		return nil, f.syntax(err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); err == nil {
		return nil, &FileError{Path: path, Line: more.Line, Msg: "a second YAML document: want one"}
	} else if !errors.Is(err, io.EOF) {
		return nil, f.syntax(err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	switch {
	case root.Kind == yaml.MappingNode:
		f.root = root
	case root.Kind == yaml.ScalarNode && root.Tag == "!!null":
	default:
		return nil, &FileError{Path: path, Line: root.Line, Msg: "want KEY: VALUE lines (a YAML mapping)"}
	}
	return f, nil
}

func (f *file) syntax(err error) error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		// yaml.v3 counts lines from 0 in the parser's errors (all of
		// them "did not find expected ..."), from 1 in the scanner's.
		if strings.HasPrefix(m[2], "did not find expected") {
			line++
		}
		return &FileError{Path: f.path, Line: line, Msg: m[2]}
	}
	return &FileError{Path: f.path, Msg: strings.TrimPrefix(msg, "yaml: ")}
}

// apply sets every key of the file that the command line did not set.
// Keys the command line set are still checked, into a scratch flag set: a
// bad file is refused whatever the command line says.
func (f *file) apply(fs *flag.FlagSet, set map[string]bool) error {
	if f.root == nil {
		return nil
	}
	var scratch Config
	sfs := scratch.FlagSet("scratch", io.Discard)
	keys := map[string]Key{}
	for _, k := range fileKeys() {
		keys[k.Name] = k
	}
	var errs []error
	seen := map[string]int{}
	c := f.root.Content
	for i := 0; i+1 < len(c); i += 2 {
		kn, vn := c[i], resolve(c[i+1])
		if kn.Kind != yaml.ScalarNode {
			errs = append(errs, &FileError{Path: f.path, Line: kn.Line, Msg: "want a key name"})
			continue
		}
		name := kn.Value
		bad := func(line int, format string, a ...any) {
			errs = append(errs, &FileError{Path: f.path, Line: line, Key: name, Msg: fmt.Sprintf(format, a...)})
		}
		k, ok := keys[name]
		switch {
		case !ok && flagOnly(name) && fs.Lookup(name) != nil:
			bad(kn.Line, "a command-line flag only, not a key of the file")
			continue
		case !ok:
			msg := "unknown key"
			if s := suggest(name, keys); s != "" {
				msg += " (did you mean " + s + "?)"
			}
			bad(kn.Line, "%s", msg)
			continue
		}
		canon := canonical(name)
		if first, dup := seen[canon]; dup {
			bad(kn.Line, "duplicate key (first set at line %d)", first)
			continue
		}
		seen[canon] = kn.Line
		values, err := nodeValues(k, vn)
		if err != nil {
			bad(err.line, "%s", err.msg)
			continue
		}
		target := fs
		if set[canon] {
			target = sfs
		} else {
			f.lines[canon] = kn.Line
			f.items[canon] = map[string]int{}
		}
		for _, v := range values {
			if err := target.Set(name, v.text); err != nil {
				bad(v.line, "%s", setError(k, v.text, err))
				break
			}
			if !set[canon] {
				f.items[canon][v.text] = v.line
			}
		}
	}
	return errors.Join(errs...)
}

// resolve follows a YAML alias (*anchor) to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

type value struct {
	text string
	line int
}

type nodeError struct {
	line int
	msg  string
}

// nodeValues turns a YAML value into the flag values it stands for, or says
// why its type is wrong for k.
func nodeValues(k Key, n *yaml.Node) ([]value, *nodeError) {
	if k.Kind == KindList {
		switch n.Kind {
		case yaml.SequenceNode:
			var out []value
			for _, item := range n.Content {
				item = resolve(item)
				t, err := scalar(k, item)
				if err != nil {
					return nil, err
				}
				out = append(out, value{t, item.Line})
			}
			return out, nil
		case yaml.MappingNode:
			return nil, &nodeError{n.Line, "want a list or one value, got a mapping"}
		}
	}
	t, err := scalar(k, n)
	if err != nil {
		return nil, err
	}
	return []value{{t, n.Line}}, nil
}

func scalar(k Key, n *yaml.Node) (string, *nodeError) {
	switch n.Kind {
	case yaml.SequenceNode:
		return "", &nodeError{n.Line, "want one value, got a list"}
	case yaml.MappingNode:
		return "", &nodeError{n.Line, "want one value, got a mapping"}
	}
	if n.Tag == "!!null" {
		return "", &nodeError{n.Line, `no value (remove the key for the default, or write "" for an empty string)`}
	}
	got := n.Value
	switch k.Kind {
	case KindBool:
		var b bool
		if n.Tag != "!!bool" || n.Decode(&b) != nil {
			return "", &nodeError{n.Line, fmt.Sprintf("want true or false, got %q", got)}
		}
		return strconv.FormatBool(b), nil
	case KindInt:
		var i int64
		if n.Tag != "!!int" || n.Decode(&i) != nil {
			return "", &nodeError{n.Line, fmt.Sprintf("want a whole number, got %q", got)}
		}
		return strconv.FormatInt(i, 10), nil
	case KindDuration:
		if n.Tag != "!!str" {
			return "", &nodeError{n.Line, fmt.Sprintf("want a duration with its unit such as 500ms, 30s or 1m30s, got %q", got)}
		}
	case KindString, KindList:
		if n.Tag == "!!bool" {
			return "", &nodeError{n.Line, fmt.Sprintf("want a string, got the boolean %s (quote it if meant)", got)}
		}
	}
	return got, nil
}

// setError words a flag's refusal of a value for the file.
func setError(k Key, v string, err error) string {
	switch k.Kind {
	case KindDuration:
		if _, perr := time.ParseDuration(v); perr != nil {
			return fmt.Sprintf("want a duration with its unit such as 500ms, 30s or 1m30s, got %q", v)
		}
	case KindUint:
		return fmt.Sprintf("want a number from 1 to 4294967295, got %q", v)
	}
	return err.Error()
}

// locate puts the file's line in front of the errors about values it set.
func (f *file) locate(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, f.locate(e))
		}
		return errors.Join(out...)
	}
	var ke *KeyError
	if !errors.As(err, &ke) {
		return err
	}
	key := canonical(ke.Key)
	line, ok := f.lines[key]
	if !ok {
		return err
	}
	if l, ok := f.items[key][ke.Item]; ok && ke.Item != "" {
		line = l
	}
	return &FileError{Path: f.path, Line: line, Key: ke.Key, Msg: strings.TrimPrefix(ke.inFile(), ke.Key+": ")}
}

// suggest names the key a misspelt one most likely meant, or "".
func suggest(name string, keys map[string]Key) string {
	norm := strings.ToLower(strings.TrimLeft(strings.ReplaceAll(name, "_", "-"), "-"))
	if _, ok := keys[norm]; ok {
		return norm
	}
	best, bestD := "", 3
	for k := range keys {
		if d := distance(norm, k); d < bestD || (d == bestD && k < best) {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the Levenshtein distance of two short strings.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
