package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ortserve/ortserve/server"
)

// ErrUsage marks errors that are the user's invocation, not the work: exit code 2. Every
// error Load returns is one; cmd/server's other commands use it too.
var ErrUsage = errors.New("usage error")

// Error is every problem found in serve's settings, one per line. It is a usage error.
type Error []string

// Error is the problems, one a line.
func (e Error) Error() string { return strings.Join(e, "\n") }

// Is says that e is ErrUsage.
func (e Error) Is(target error) bool { return target == ErrUsage }

// usagef is a usage or data error: exit code 2.
func usagef(format string, args ...any) error {
	return fmt.Errorf("%w (%w)", fmt.Errorf(format, args...), ErrUsage)
}

// Args are the serve arguments that read the config file path, if any: how a command that
// loads versions as serve does (bench --self, gate, tune, inspect) reads serve's settings.
func Args(path string) []string {
	if path == "" {
		return nil
	}
	return []string{"--config", path}
}

// Parse reads serve's settings from args, the environment and the --config file. Flag
// errors and --help's usage go to stderr.
func Parse(args []string, stderr io.Writer) (Serve, error) {
	return Load(args, os.Getenv, stderr)
}

// Load is Parse with the environment given as getenv. A problem with the settings is an
// Error, each of its lines naming where the value came from.
func Load(args []string, getenv func(string) string, stderr io.Writer) (Serve, error) {
	// The flags are parsed first on their own, to learn --config and which flags were given;
	// those are applied last, over the file and the environment.
	given := Default()
	fs := flags(&given)
	fs.SetOutput(stderr)
	fs.VisitAll(func(f *flag.Flag) {
		if key := fileKey(f.Name); key != "" {
			f.Usage += fmt.Sprintf(" (file: %s, env: %s)", key, EnvName(f.Name))
		} else {
			f.Usage += fmt.Sprintf(" (env: %s)", EnvName(f.Name))
		}
	})
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: server serve [--config FILE] [flags]

Settings come from defaults, then the --config file, then ORTSERVE_* environment variables,
then flags; each overrides the ones before it. docs/config.md describes them all.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return given, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return given, fmt.Errorf("unexpected arguments %v (%w)", fs.Args(), ErrUsage)
	}

	c := Default()
	l := newLoader(&c)
	c.Config = getenv(EnvName("config"))
	if isSet(fs, "config") {
		c.Config = given.Config
	}
	if c.Config != "" {
		if data, err := os.ReadFile(c.Config); err != nil {
			l.problems = append(l.problems, fmt.Sprintf("config %s: %v", c.Config, err))
		} else {
			l.file(c.Config, data)
		}
	}
	l.env(getenv)
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "config" {
			l.set(f.Name, f.Value.String(), source{kind: fromFlag})
		}
	})
	l.validate()
	if len(l.problems) > 0 {
		return c, Error(l.problems)
	}
	return c, nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// source is where a setting's value came from.
type source struct {
	kind int
	file string
	line int
}

const (
	fromDefault = iota
	fromFile
	fromEnv
	fromFlag
)

// loader applies layers of settings to a Serve and collects the problems it finds.
type loader struct {
	c        *Serve
	flags    *flag.FlagSet // bound to c's fields
	from     map[string]source
	problems []string
}

func newLoader(c *Serve) *loader {
	return &loader{c: c, flags: flags(c), from: map[string]source{}}
}

// subject names a setting's value as the user gave it, for a problem's line.
func (l *loader) subject(name, value string, src source) string {
	key := fileKey(name)
	if f := l.flags.Lookup(name); f != nil {
		if _, ok := f.Value.(flag.Getter).Get().(string); ok {
			value = strconv.Quote(value)
		}
	}
	switch src.kind {
	case fromFile:
		return fmt.Sprintf("config %s: line %d: %s %s", src.file, src.line, key, value)
	case fromEnv:
		return fmt.Sprintf("%s=%s (%s)", EnvName(name), value, key)
	case fromFlag:
		return fmt.Sprintf("--%s %s (%s)", name, value, key)
	}
	return fmt.Sprintf("%s %s (the default)", key, value)
}

// set gives a setting a value from src.
func (l *loader) set(name, value string, src source) {
	f := l.flags.Lookup(name)
	before := f.Value.String()
	// A repeatable flag adds to its list within one layer; a layer replaces the one before.
	reset := func() {
		if r, ok := f.Value.(interface{ Reset() }); ok {
			r.Reset()
		}
	}
	reset()
	if err := l.flags.Set(name, value); err != nil {
		reset()
		_ = l.flags.Set(name, before) // a failed Set may have stored a zero; before is the flag's own value, which parses
		want := "want a valid value"
		switch f.Value.(flag.Getter).Get().(type) {
		case int, int64:
			want = "want a whole number"
		case bool:
			want = "want true or false"
		case time.Duration:
			want = "want a duration such as 250ms, 5s or 1m30s"
		}
		if msg := err.Error(); msg != "parse error" { // flag's word for any syntax error
			want = msg + ": " + want
		}
		l.problems = append(l.problems, l.subject(name, value, src)+": "+want)
		return
	}
	l.from[name] = src
}

// env applies the ORTSERVE_* variables that are set and not empty.
func (l *loader) env(getenv func(string) string) {
	l.flags.VisitAll(func(f *flag.Flag) {
		if v := getenv(EnvName(f.Name)); v != "" && f.Name != "config" {
			l.set(f.Name, v, source{kind: fromEnv})
		}
	})
}

// file applies a config file's settings. Unknown keys are errors, so that a typo does not
// silently leave a default in place.
func (l *loader) file(path string, data []byte) {
	bad := func(format string, args ...any) {
		l.problems = append(l.problems, fmt.Sprintf("config %s: ", path)+fmt.Sprintf(format, args...))
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if !errors.Is(err, io.EOF) { // an empty file changes nothing
			bad("%v", err)
		}
		return
	}
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		bad("more than one YAML document: keep one")
		return
	}
	if len(doc.Content) == 0 {
		return
	}
	l.mapping(path, "", doc.Content[0], bad)
}

// mapping applies the keys of a mapping node: the file's top level, or a section of it.
func (l *loader) mapping(path, section string, n *yaml.Node, bad func(string, ...any)) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty document or section
	}
	if n.Kind != yaml.MappingNode {
		what := "the file"
		if section != "" {
			what = section
		}
		bad("line %d: %s must be a mapping of keys to values", n.Line, what)
		return
	}
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			bad("line %d: a key must be a plain name", k.Line)
			continue
		}
		key := k.Value
		if section != "" {
			key = section + "." + k.Value
		}
		if line, ok := first[k.Value]; ok {
			bad("line %d: %s is given twice (first on line %d)", k.Line, key, line)
			continue
		}
		first[k.Value] = k.Line
		if section == "" && isSection(key) {
			l.mapping(path, key, v, bad)
			continue
		}
		var name string
		for _, fk := range FileKeys {
			if fk.Key == key {
				name = fk.Flag
			}
		}
		switch {
		case name == "":
			where := ""
			if section != "" {
				where = " in " + section
			}
			bad("line %d: unknown key %q%s: known are %s", k.Line, k.Value, where, strings.Join(keysIn(section), ", "))
		case v.Kind != yaml.ScalarNode:
			bad("line %d: %s must be a single value", v.Line, key)
		case v.Tag == "!!null":
			bad("line %d: %s has no value: give one or leave the key out", v.Line, key)
		default:
			value := v.Value
			if pathFlags[name] && value != "" && value != Off && !filepath.IsAbs(value) {
				value = filepath.Join(filepath.Dir(path), value)
			}
			if name == "model" {
				value = relModelDirs(value, filepath.Dir(path))
			}
			l.set(name, value, source{kind: fromFile, file: path, line: v.Line})
		}
	}
}

// resolve follows aliases (*name) to the node they stand for.
func resolve(n *yaml.Node) *yaml.Node {
	for range 8 {
		if n.Kind != yaml.AliasNode || n.Alias == nil {
			break
		}
		n = n.Alias
	}
	return n
}

func isSection(name string) bool {
	return slices.ContainsFunc(FileKeys, func(k FileKey) bool {
		return strings.HasPrefix(k.Key, name+".")
	})
}

// keysIn lists the keys of a section ("" for the top level), sections included.
func keysIn(section string) []string {
	var out []string
	for _, k := range FileKeys {
		rest, ok := k.Key, section == ""
		if section != "" {
			rest, ok = strings.CutPrefix(k.Key, section+".")
		}
		if !ok {
			continue
		}
		rest, _, _ = strings.Cut(rest, ".")
		if !slices.Contains(out, rest) {
			out = append(out, rest)
		}
	}
	return out
}

// devices are the --device values that runtime/ort.ParseDevice takes. They are not asked of
// it: runtime/ort is cgo, and this package builds without. cmd/server's TestDevices holds
// the two to agree.
var devices = []string{"auto", "cuda", "cpu"}

// validate checks the merged settings, a problem per bad value.
func (l *loader) validate() {
	c := l.c
	check := func(ok bool, name, format string, args ...any) {
		if !ok {
			f := l.flags.Lookup(name)
			l.problems = append(l.problems, l.subject(name, f.Value.String(), l.from[name])+": "+fmt.Sprintf(format, args...))
		}
	}
	atLeast := func(least int64, name string, v int64) { check(v >= least, name, "must be ≥ %d", least) }

	_, _, err := net.SplitHostPort(c.Addr)
	check(err == nil, "addr", "want host:port, such as 127.0.0.1:8080 or :8080")
	if c.GRPCAddr != "" {
		_, _, err := net.SplitHostPort(c.GRPCAddr)
		check(err == nil, "grpc-addr", "want host:port, such as 127.0.0.1:8001 or :8001, or leave it empty for no gRPC")
	}
	if _, set := l.from["models"]; len(c.Model) > 0 && !set {
		c.Models = "" // --model alone serves its folders only, not the default repository
	}
	check(c.Models != "" || len(c.Model) > 0, "models", "name the model repository's folder, or a model folder with --model")
	names := map[string]bool{}
	for _, s := range c.Model {
		md, _ := parseModelDir(s) // Set has checked it
		check(md.Name == "" || !names[md.Name], "model", "the name %s is given twice: name each folder's model once", md.Name)
		names[md.Name] = true
	}
	check(c.ORTLib != "", "ort-lib", "name the ONNX Runtime library, libonnxruntime.so")
	check(slices.Contains(devices, c.Device), "device", "unknown device %q: use auto, cuda or cpu", c.Device)
	atLeast(0, "device-id", int64(c.DeviceID))
	atLeast(0, "sessions", int64(c.Sessions))
	atLeast(0, "threads", int64(c.Threads))
	atLeast(1, "max-batch", int64(c.Batch.MaxBatchSize))
	atLeast(0, "max-batch-tokens", int64(c.Batch.MaxBatchTokens))
	check(c.Batch.MaxQueueDelay >= 0, "max-queue-delay", "must be ≥ 0")
	check(c.Packing == "auto" || c.Packing == "on" || c.Packing == "off", "packing", "want auto, on or off")
	atLeast(1, "max-queue-requests", int64(c.Batch.MaxQueueRequests))
	atLeast(1, "max-queue-tokens", int64(c.Batch.MaxQueueTokens))
	check(c.Calibration >= 0, "calibration-budget", "must be ≥ 0")
	atLeast(1, "max-body-bytes", c.HTTP.MaxBodyBytes)
	atLeast(1, "max-inputs", int64(c.HTTP.MaxInputs))
	atLeast(0, "max-input-chars", int64(c.HTTP.MaxInputChars))
	atLeast(1, "max-in-flight", int64(c.HTTP.MaxInFlight))
	check(c.HTTP.RequestTimeout >= 0, "request-timeout", "must be ≥ 0")
	check(c.Reload >= 0, "reload-interval", "must be ≥ 0")
	check(c.Grace >= 0, "grace", "must be ≥ 0")
	check(c.DrainDelay >= 0, "drain-delay", "must be ≥ 0")
	check(c.DrainDelay <= c.Grace || c.Grace < 0, "drain-delay", "must be ≤ --grace %v, which bounds the whole shutdown: raise --grace or shorten the delay", c.Grace)
	check(c.Conn.ReadTimeout >= 0, "read-timeout", "must be ≥ 0 (0: none)")
	check(c.Conn.WriteTimeout >= 0, "write-timeout", "must be ≥ 0 (0: none)")
	check(c.Conn.IdleTimeout >= 0, "idle-timeout", "must be ≥ 0 (0: none)")
	atLeast(0, "max-conns-per-client", int64(c.Conn.MaxConnsPerClient))
	if err := server.ParseAuthExempt(c.HTTP.AuthExempt); err != nil {
		check(false, "auth-exempt", "the routes that may go without a key are health and metrics")
	}
	check(len(c.HTTP.AuthExempt) == 0 || len(c.HTTP.APIKeys) > 0 || c.APIKeyFile != "", "auth-exempt", "exempts routes from API keys, but no key is set: give --api-key or --api-key-file")
	if c.APIKeyFile != "" {
		keys, err := readKeyFile(c.APIKeyFile)
		check(err == nil, "api-key-file", "%v", err)
		c.HTTP.APIKeys = append(c.HTTP.APIKeys, keys...)
	}
	if err := c.Tracing.Validate(); err != nil {
		l.problems = append(l.problems, err.Error())
	}
	if len(l.problems) == 0 {
		// The batcher's own rules, should they ever be stricter than the checks above.
		if err := c.Batch.Validate(); err != nil {
			l.problems = append(l.problems, err.Error())
		}
	}
}

// readKeyFile reads API keys, one a line; blank lines and lines starting with # are skipped.
func readKeyFile(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: name a readable file of keys, one a line", errors.Unwrap(err))
	}
	var keys []string
	for line := range strings.Lines(string(data)) {
		if k := strings.TrimSpace(line); k != "" && !strings.HasPrefix(k, "#") {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys in it: put one a line")
	}
	return keys, nil
}
