package main

// `server serve` takes its settings in layers, each overriding the ones before it: defaults
// (defaultServeConfig), a YAML file (--config or ORTSERVE_CONFIG), ORTSERVE_* environment
// variables, and flags given on the command line. Every layer sets values through the same
// flag.Value, so a setting parses the same wherever it comes from. The merged result is
// validated once; every problem found is reported on its own line, naming where the value
// came from (file and line, variable or flag), and is a usage error: exit code 2.

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

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/ort"
	"github.com/ortserve/ortserve/server"
)

// fileKeys are the config file's keys, in docs/config.md's order, and the flag each sets.
// "section.key" is key inside the mapping section.
var fileKeys = []struct{ key, flag string }{
	{"listen", "addr"},
	{"models", "models"},
	{"model", "model"},
	{"ort_lib", "ort-lib"},
	{"device", "device"},
	{"device_id", "device-id"},
	{"sessions", "sessions"},
	{"threads", "threads"},
	{"strict_placement", "strict-placement"},
	{"batching.max_batch_size", "max-batch"},
	{"batching.max_batch_tokens", "max-batch-tokens"},
	{"batching.packing", "packing"},
	{"batching.max_queue_delay", "max-queue-delay"},
	{"batching.max_queue_requests", "max-queue-requests"},
	{"batching.max_queue_tokens", "max-queue-tokens"},
	{"slo", "slo"},
	{"limits.max_body_bytes", "max-body-bytes"},
	{"limits.max_inputs", "max-inputs"},
	{"limits.max_input_chars", "max-input-chars"},
	{"limits.auto_truncate", "auto-truncate"},
	{"limits.max_in_flight", "max-in-flight"},
	{"limits.request_timeout", "request-timeout"},
	{"http.read_timeout", "read-timeout"},
	{"http.write_timeout", "write-timeout"},
	{"http.idle_timeout", "idle-timeout"},
	{"http.max_conns_per_client", "max-conns-per-client"},
	{"http.allowed_hosts", "allowed-hosts"},
	{"auth.api_keys", "api-key"},
	{"auth.api_key_file", "api-key-file"},
	{"auth.exempt", "auth-exempt"},
	{"reload_interval", "reload-interval"},
	{"shutdown_grace", "grace"},
	{"shutdown_drain_delay", "drain-delay"},
}

// pathFlags take paths; in the config file a relative one is from the file's folder. The
// folders of --model are too, each of its list (relModelDirs).
var pathFlags = map[string]bool{"models": true, "ort-lib": true, "api-key-file": true}

// envName is the environment variable of a flag: --max-batch is ORTSERVE_MAX_BATCH.
func envName(flagName string) string {
	return "ORTSERVE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// fileKey is the config file key that a flag sets, or "".
func fileKey(flagName string) string {
	for _, k := range fileKeys {
		if k.flag == flagName {
			return k.key
		}
	}
	return ""
}

// configError is every problem found in serve's settings, one per line. It is a usage error.
type configError []string

func (e configError) Error() string        { return strings.Join(e, "\n") }
func (e configError) Is(target error) bool { return target == errUsage }

// parseServe reads serve's settings from args, the environment and the --config file.
func parseServe(args []string, stderr io.Writer) (serveConfig, error) {
	return loadServe(args, os.Getenv, stderr)
}

// loadServe is parseServe with the environment given as getenv.
func loadServe(args []string, getenv func(string) string, stderr io.Writer) (serveConfig, error) {
	// The flags are parsed first on their own, to learn --config and which flags were given;
	// those are applied last, over the file and the environment.
	given := defaultServeConfig()
	fs := serveFlags(&given)
	fs.SetOutput(stderr)
	fs.VisitAll(func(f *flag.Flag) {
		if key := fileKey(f.Name); key != "" {
			f.Usage += fmt.Sprintf(" (file: %s, env: %s)", key, envName(f.Name))
		} else {
			f.Usage += fmt.Sprintf(" (env: %s)", envName(f.Name))
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
		return given, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return given, fmt.Errorf("unexpected arguments %v (%w)", fs.Args(), errUsage)
	}

	c := defaultServeConfig()
	l := newLoader(&c)
	c.Config = getenv(envName("config"))
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
		return c, configError(l.problems)
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

// loader applies layers of settings to a serveConfig and collects the problems it finds.
type loader struct {
	c        *serveConfig
	flags    *flag.FlagSet // bound to c's fields
	from     map[string]source
	problems []string
}

func newLoader(c *serveConfig) *loader {
	return &loader{c: c, flags: serveFlags(c), from: map[string]source{}}
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
		return fmt.Sprintf("%s=%s (%s)", envName(name), value, key)
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
		if v := getenv(envName(f.Name)); v != "" && f.Name != "config" {
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
		for _, fk := range fileKeys {
			if fk.key == key {
				name = fk.flag
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
			if pathFlags[name] && value != "" && !filepath.IsAbs(value) {
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
	return slices.ContainsFunc(fileKeys, func(k struct{ key, flag string }) bool {
		return strings.HasPrefix(k.key, name+".")
	})
}

// keysIn lists the keys of a section ("" for the top level), sections included.
func keysIn(section string) []string {
	var out []string
	for _, k := range fileKeys {
		rest, ok := k.key, section == ""
		if section != "" {
			rest, ok = strings.CutPrefix(k.key, section+".")
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
	_, err = ort.ParseDevice(c.Device)
	check(err == nil, "device", "unknown device %q: use auto, cuda or cpu", c.Device)
	atLeast(0, "device-id", int64(c.DeviceID))
	atLeast(0, "sessions", int64(c.Sessions))
	atLeast(0, "threads", int64(c.Threads))
	atLeast(1, "max-batch", int64(c.Batch.MaxBatchSize))
	atLeast(0, "max-batch-tokens", int64(c.Batch.MaxBatchTokens))
	check(c.Batch.MaxQueueDelay >= 0, "max-queue-delay", "must be ≥ 0")
	check(c.Packing == "auto" || c.Packing == "on" || c.Packing == "off", "packing", "want auto, on or off")
	atLeast(1, "max-queue-requests", int64(c.Batch.MaxQueueRequests))
	atLeast(1, "max-queue-tokens", int64(c.Batch.MaxQueueTokens))
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

// listFlag is a comma-separated list of values; each layer that sets it (file, environment,
// flag) replaces the list, as for any other setting. Blanks are dropped.
type listFlag struct{ p *[]string }

func (f listFlag) String() string {
	if f.p == nil {
		return ""
	}
	return strings.Join(*f.p, ",")
}

func (f listFlag) Set(s string) error {
	*f.p = nil
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*f.p = append(*f.p, v)
		}
	}
	return nil
}

func (f listFlag) Get() any { return f.String() }

// modelFlag is --model: model folders served on their own, each DIR or NAME=DIR. On the
// command line it may be given more than once, and a value may list several, comma-separated,
// as the file and the environment do. Like any setting, each layer that sets it replaces the
// list of the one before (loader.set resets it first).
type modelFlag struct{ p *[]string }

func (f modelFlag) String() string {
	if f.p == nil {
		return ""
	}
	return strings.Join(*f.p, ",")
}

func (f modelFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if _, err := parseModelDir(v); err != nil {
			return err
		}
		*f.p = append(*f.p, v)
	}
	return nil
}

func (f modelFlag) Get() any { return f.String() }

// Reset empties the list, for the next layer to set it anew.
func (f modelFlag) Reset() { *f.p = nil }

// sources are where serve finds its models: the repository and the --model folders. The
// commands that find a model by name (gate, inspect, tune, bench) look there too
// (models.Find), so that each knows the models serve serves.
func (c serveConfig) sources() models.Sources {
	src := models.Sources{Root: c.Models}
	for _, s := range c.Model {
		md, _ := parseModelDir(s) // validated
		src.Models = append(src.Models, md)
	}
	return src
}

// parseModelDir reads one --model value: DIR, or NAME=DIR to serve the folder's model under
// NAME. A value whose part before "=" holds a path separator is a folder.
func parseModelDir(s string) (models.ModelDir, error) {
	name, dir, ok := strings.Cut(s, "=")
	if !ok || strings.ContainsAny(name, `/\`) {
		return models.ModelDir{Dir: s}, nil
	}
	switch {
	case name == "":
		return models.ModelDir{}, fmt.Errorf("%q: put the model's name before =, or leave the = out", s)
	case dir == "":
		return models.ModelDir{}, fmt.Errorf("%q: name the model folder after =", s)
	case strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "":
		return models.ModelDir{}, fmt.Errorf("model name %q: use letters, digits, '.', '_' and '-'", name)
	}
	return models.ModelDir{Name: name, Dir: dir}, nil
}

// relModelDirs takes --model's relative folders from base, the config file's folder.
func relModelDirs(value, base string) string {
	items := strings.Split(value, ",")
	for i, v := range items {
		v = strings.TrimSpace(v)
		md, err := parseModelDir(v)
		if err != nil || v == "" || filepath.IsAbs(md.Dir) {
			items[i] = v
			continue
		}
		items[i] = filepath.Join(base, md.Dir)
		if md.Name != "" {
			items[i] = md.Name + "=" + items[i]
		}
	}
	return strings.Join(items, ",")
}

// sloFlag is --slo: a latency objective as p95=50ms (runtime.ParseSLO), empty for none.
type sloFlag struct{ d *time.Duration }

func (f sloFlag) String() string {
	if f.d == nil {
		return ""
	}
	return runtime.FormatSLO(*f.d)
}

func (f sloFlag) Set(s string) error {
	d, err := runtime.ParseSLO(s)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

func (f sloFlag) Get() any { return f.String() }
