package config

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// loadWith runs Load with file written to dir/serve.yaml (when not empty), env as the
// whole environment and args as the flags; "$DIR" in env values and args is dir.
func loadWith(t *testing.T, file string, env map[string]string, args ...string) (Serve, string, error) {
	t.Helper()
	dir := t.TempDir()
	if file != "" {
		if err := os.WriteFile(filepath.Join(dir, "serve.yaml"), []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range args {
		args[i] = strings.ReplaceAll(args[i], "$DIR", dir)
	}
	getenv := func(k string) string { return strings.ReplaceAll(env[k], "$DIR", dir) }
	c, err := Load(args, getenv, io.Discard)
	return c, dir, err
}

// Flags beat the environment, which beats the file, which beats the defaults; layers merge
// setting by setting.
func TestServeConfigPrecedence(t *testing.T) {
	const file = `
listen: 10.0.0.1:1
models: repo
device: cpu
batching:
  max_batch_size: 8
  max_queue_delay: 2ms
limits:
  max_inputs: 8
  max_input_chars: 1000
  auto_truncate: false
shutdown_grace: 1m
`
	fromFile := func(c *Serve, dir string) {
		c.Config = filepath.Join(dir, "serve.yaml")
		c.Addr, c.Models, c.Device = "10.0.0.1:1", filepath.Join(dir, "repo"), "cpu"
		c.Batch.MaxBatchSize, c.Batch.MaxQueueDelay = 8, 2*time.Millisecond
		c.HTTP.MaxInputs, c.HTTP.MaxInputChars, c.HTTP.AutoTruncate = 8, 1000, false
		c.Grace = time.Minute
	}
	tests := []struct {
		name string
		file string
		env  map[string]string
		args []string
		want func(c *Serve, dir string)
	}{
		{"defaults", "", nil, nil, func(*Serve, string) {}},
		{"file", file, nil, []string{"--config", "$DIR/serve.yaml"}, fromFile},
		{"file from ORTSERVE_CONFIG", file, map[string]string{"ORTSERVE_CONFIG": "$DIR/serve.yaml"}, nil, fromFile},
		{"--config over ORTSERVE_CONFIG", file, map[string]string{"ORTSERVE_CONFIG": "/nonexistent.yaml"}, []string{"--config", "$DIR/serve.yaml"}, fromFile},
		{"env over file", file, map[string]string{"ORTSERVE_ADDR": ":9", "ORTSERVE_MAX_BATCH": "4", "ORTSERVE_AUTO_TRUNCATE": "true", "ORTSERVE_MAX_QUEUE_DELAY": "1ms", "ORTSERVE_THREADS": "2"},
			[]string{"--config", "$DIR/serve.yaml"}, func(c *Serve, dir string) {
				fromFile(c, dir)
				c.Addr, c.Batch.MaxBatchSize, c.HTTP.AutoTruncate, c.Batch.MaxQueueDelay, c.Threads = ":9", 4, true, time.Millisecond, 2
			}},
		{"flags over env and file", file, map[string]string{"ORTSERVE_ADDR": ":9", "ORTSERVE_MAX_BATCH": "4", "ORTSERVE_MAX_INPUT_CHARS": "50"},
			[]string{"--config", "$DIR/serve.yaml", "--addr", ":7", "--max-batch", "2", "--auto-truncate=true", "--models", "/abs/repo"}, func(c *Serve, dir string) {
				fromFile(c, dir)
				c.Addr, c.Batch.MaxBatchSize, c.HTTP.AutoTruncate, c.Models, c.HTTP.MaxInputChars = ":7", 2, true, "/abs/repo", 50
			}},
		{"a flag given its default still wins", file, nil, []string{"--config", "$DIR/serve.yaml", "--max-inputs", "32", "--grace", "30s"}, func(c *Serve, dir string) {
			fromFile(c, dir)
			c.HTTP.MaxInputs, c.Grace = 32, 30*time.Second
		}},
		{"empty env is unset", file, map[string]string{"ORTSERVE_ADDR": ""}, []string{"--config", "$DIR/serve.yaml"}, fromFile},
		{"env alone", "", map[string]string{"ORTSERVE_MODELS": "/m", "ORTSERVE_STRICT_PLACEMENT": "true", "ORTSERVE_REQUEST_TIMEOUT": "2s", "ORTSERVE_RELOAD_INTERVAL": "0s", "ORTSERVE_CALIBRATION_BUDGET": "0s"}, nil, func(c *Serve, _ string) {
			c.Models, c.Strict, c.HTTP.RequestTimeout, c.Reload, c.Calibration = "/m", true, 2*time.Second, 0, 0
		}},
		{"connections and shutdown", "http: {read_timeout: 5s, idle_timeout: 0s}\nshutdown_drain_delay: 5s\n", map[string]string{"ORTSERVE_WRITE_TIMEOUT": "1m", "ORTSERVE_MAX_CONNS_PER_CLIENT": "8"},
			[]string{"--config", "$DIR/serve.yaml", "--grace", "20s"}, func(c *Serve, dir string) {
				c.Config = filepath.Join(dir, "serve.yaml")
				c.Conn = Conn{ReadTimeout: 5 * time.Second, WriteTimeout: time.Minute, IdleTimeout: 0, MaxConnsPerClient: 8}
				c.DrainDelay, c.Grace = 5*time.Second, 20*time.Second
			}},
		{"empty file", "# nothing yet\n", nil, []string{"--config", "$DIR/serve.yaml"}, func(c *Serve, dir string) {
			c.Config = filepath.Join(dir, "serve.yaml")
		}},
		{"empty section, anchors", "batching:\nlimits: &l {max_inputs: 3}\n", nil, []string{"--config", "$DIR/serve.yaml"}, func(c *Serve, dir string) {
			c.Config, c.HTTP.MaxInputs = filepath.Join(dir, "serve.yaml"), 3
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dir, err := loadWith(t, tt.file, tt.env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			want := Default()
			tt.want(&want, dir)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// Every problem gets its own line naming where the value came from; all are usage errors.
func TestServeConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  map[string]string
		args []string
		want []string // the lines, each by a part of it
	}{
		{"unknown key", "lisen: :8080\n", nil, nil, []string{`config $DIR/serve.yaml: line 1: unknown key "lisen": known are listen, models,`}},
		{"unknown key in a section", "batching:\n  max_batch: 4\n", nil, nil, []string{`line 2: unknown key "max_batch" in batching: known are max_batch_size,`}},
		{"bad duration", "batching:\n  max_queue_delay: 5\n", nil, nil, []string{`line 2: batching.max_queue_delay 5: want a duration such as 250ms`}},
		{"not a number", "threads: many\n", nil, nil, []string{`line 1: threads many: want a whole number`}},
		{"not a bool", "limits: {auto_truncate: yes}\n", nil, nil, []string{`line 1: limits.auto_truncate yes: want true or false`}},
		{"negative values", "sessions: -1\nlimits:\n  max_inputs: 0\n  max_input_chars: -5\n  request_timeout: -1s\n", nil, nil, []string{
			`config $DIR/serve.yaml: line 1: sessions -1: must be ≥ 0`,
			`line 3: limits.max_inputs 0: must be ≥ 1`,
			`line 4: limits.max_input_chars -5: must be ≥ 0`,
			`line 5: limits.request_timeout -1s: must be ≥ 0`,
		}},
		{"bad device", "device: tpu\n", nil, nil, []string{`line 1: device "tpu": unknown device "tpu": use auto, cuda or cpu`}},
		{"bad packing", "batching:\n  packing: yes\n", nil, nil, []string{`line 2: batching.packing "yes": want auto, on or off`}},
		{"bad listen", "listen: localhost\n", nil, nil, []string{`line 1: listen "localhost": want host:port`}},
		{"section not a mapping", "limits: 5\n", nil, nil, []string{`line 1: limits must be a mapping`}},
		{"value not a scalar", "listen: [a, b]\n", nil, nil, []string{`line 1: listen must be a single value`}},
		{"models as a mapping", "models:\n  minilm: {instances: 2}\n", nil, nil, []string{`line 2: models must be a single value`}},
		{"no value", "listen:\n", nil, nil, []string{`line 1: listen has no value`}},
		{"twice", "threads: 1\nthreads: 2\n", nil, nil, []string{`line 2: threads is given twice (first on line 1)`}},
		{"not a mapping", "- listen\n", nil, nil, []string{`line 1: the file must be a mapping`}},
		{"two documents", "threads: 1\n---\nthreads: 2\n", nil, nil, []string{`more than one YAML document`}},
		{"bad YAML", "listen: [\n", nil, nil, []string{`config $DIR/serve.yaml: yaml: line`}},
		{"missing file", "", nil, []string{"--config", "$DIR/none.yaml"}, []string{`config $DIR/none.yaml: open $DIR/none.yaml: no such file`}},
		{"bad env", "", map[string]string{"ORTSERVE_MAX_BATCH": "x", "ORTSERVE_GRACE": "-1s"}, nil, []string{
			`ORTSERVE_MAX_BATCH=x (batching.max_batch_size): want a whole number`,
			`ORTSERVE_GRACE=-1s (shutdown_grace): must be ≥ 0`,
		}},
		{"negative connection timeouts", "http:\n  read_timeout: -1s\n  write_timeout: -1ms\n  idle_timeout: -2m\n  max_conns_per_client: -1\n", nil, nil, []string{
			`line 2: http.read_timeout -1s: must be ≥ 0 (0: none)`,
			`line 3: http.write_timeout -1ms: must be ≥ 0 (0: none)`,
			`line 4: http.idle_timeout -2m0s: must be ≥ 0 (0: none)`,
			`line 5: http.max_conns_per_client -1: must be ≥ 0`,
		}},
		{"drain delay", "", map[string]string{"ORTSERVE_DRAIN_DELAY": "-1s"}, nil, []string{`ORTSERVE_DRAIN_DELAY=-1s (shutdown_drain_delay): must be ≥ 0`}},
		{"calibration budget", "batching:\n  calibration_budget: -1ms\n", nil, nil, []string{`line 2: batching.calibration_budget -1ms: must be ≥ 0`}},
		{"drain delay past the grace", "shutdown_grace: 10s\n", nil, []string{"--drain-delay", "15s"}, []string{
			`--drain-delay 15s (shutdown_drain_delay): must be ≤ --grace 10s, which bounds the whole shutdown: raise --grace or shorten the delay`,
		}},
		{"auth", "", map[string]string{"ORTSERVE_AUTH_EXEMPT": "health,embed"}, []string{"--api-key-file", "$DIR/none"}, []string{
			`ORTSERVE_AUTH_EXEMPT="health,embed" (auth.exempt): the routes that may go without a key are health and metrics`,
			`--api-key-file "$DIR/none" (auth.api_key_file): no such file or directory: name a readable file of keys, one a line`,
		}},
		{"exempt without a key", "auth: {exempt: metrics}\n", nil, nil, []string{`line 1: auth.exempt "metrics": exempts routes from API keys, but no key is set`}},
		{"bad flag over a good file", "limits: {max_inputs: 4}\n", nil, []string{"--max-inputs", "0"}, []string{`--max-inputs 0 (limits.max_inputs): must be ≥ 1`}},
		{"all at once", "threads: -1\nbatching: {max_batch_size: 0}\nnope: 1\n", map[string]string{"ORTSERVE_DEVICE": "gpu"}, []string{"--max-in-flight", "0"}, []string{
			`line 3: unknown key "nope"`,
			`ORTSERVE_DEVICE="gpu" (device): unknown device "gpu"`,
			`line 1: threads -1: must be ≥ 0`,
			`line 2: batching.max_batch_size 0: must be ≥ 1`,
			`--max-in-flight 0 (limits.max_in_flight): must be ≥ 1`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", "$DIR/serve.yaml"}, args...)
			}
			_, dir, err := loadWith(t, tt.file, tt.env, args...)
			if !errors.Is(err, ErrUsage) {
				t.Fatalf("got %v, want a usage error", err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("got %d lines, want %d:\n%v", len(lines), len(tt.want), err)
			}
			for i, want := range tt.want {
				if want = strings.ReplaceAll(want, "$DIR", dir); !strings.Contains(lines[i], want) {
					t.Errorf("line %d: got %q, want it to contain %q", i+1, lines[i], want)
				}
			}
		})
	}
}

// The example file is read unchanged, and holds the defaults.
func TestExampleConfig(t *testing.T) {
	const path = "../../../../docs/serve.example.yaml"
	c, err := Load([]string{"--config", path}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Config = path
	if !reflect.DeepEqual(c, want) {
		t.Errorf("docs/serve.example.yaml is not the defaults:\ngot  %+v\nwant %+v", c, want)
	}
	data, _ := os.ReadFile(path)
	for _, k := range FileKeys {
		leaf := k.Key[strings.LastIndex(k.Key, ".")+1:]
		if !bytes.Contains(data, []byte(leaf+":")) {
			t.Errorf("docs/serve.example.yaml lacks %s", k.Key)
		}
	}
}

// Every flag is a file key and is documented in docs/config.md, the settings' reference (the
// README links to it); every file key is a flag.
func TestConfigDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	var c Serve
	fs := flags(&c)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "config" && fileKey(f.Name) == "" {
			t.Errorf("--%s has no config file key: add it to FileKeys", f.Name)
		}
		for _, s := range []string{"`--" + f.Name + "`", EnvName(f.Name)} {
			if !bytes.Contains(doc, []byte(s)) {
				t.Errorf("docs/config.md does not mention %s", s)
			}
		}
	})
	for _, k := range FileKeys {
		if fs.Lookup(k.Flag) == nil {
			t.Errorf("file key %s names no flag --%s", k.Key, k.Flag)
		}
		if !bytes.Contains(doc, []byte("`"+k.Key+"`")) {
			t.Errorf("docs/config.md does not mention `%s`", k.Key)
		}
	}
}

// renderConfig writes c as a config file.
func renderConfig(c *Serve) []byte {
	fs := flags(c)
	doc := map[string]any{}
	for _, k := range FileKeys {
		v := fs.Lookup(k.Flag).Value.String()
		if section, key, ok := strings.Cut(k.Key, "."); ok {
			m, _ := doc[section].(map[string]string)
			if m == nil {
				m = map[string]string{}
				doc[section] = m
			}
			m[key] = v
		} else {
			doc[k.Key] = v
		}
	}
	out, _ := yaml.Marshal(doc)
	return out
}

// The file parser never panics, and what it accepts reads back the same once written out.
func FuzzServeConfigFile(f *testing.F) {
	example, _ := os.ReadFile("../../../../docs/serve.example.yaml")
	f.Add(example)
	for _, s := range []string{
		"", "listen: :1\nmodels: m\n", "batching: {max_queue_delay: 1h}\n", "limits:\n  max_input_chars: 10\n  auto_truncate: false\n",
		"a: &a [1]\nb: *a\n", "limits: *x\n", "? [a]\n: 1\n", "threads: 1\n---\n", "listen: !!binary aGk=\n", "device: \"\\u00e9\"\n",
	} {
		f.Add([]byte(s))
	}
	const path = "/etc/ortserve/serve.yaml"
	f.Fuzz(func(t *testing.T, data []byte) {
		c := Default()
		l := newLoader(&c)
		l.file(path, data)
		l.validate()
		if len(l.problems) > 0 {
			return
		}
		again := Default()
		l2 := newLoader(&again)
		out := renderConfig(&c)
		l2.file(path, out)
		l2.validate()
		if len(l2.problems) > 0 || !reflect.DeepEqual(c, again) {
			t.Fatalf("accepted %q, wrote %q, read back %+v (%q), want %+v", data, out, again, l2.problems, c)
		}
	})
}

// Settings spells out every file key, in FileKeys' order, as the file would give it, with
// relative paths made absolute.
func TestSettings(t *testing.T) {
	c := Default()
	c.Models, c.Batch.MaxBatchSize, c.HTTP.AllowedHosts = "repo", 8, []string{"a", "b"}
	got, err := c.Settings()
	if err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(FileKeys) {
		t.Fatalf("%d settings, want %d", len(got), len(FileKeys))
	}
	want := map[string]string{"models": filepath.Join(wd, "repo"), "batching.max_batch_size": "8", "http.allowed_hosts": "a,b", "auth.api_key_file": "", "shutdown_grace": "30s"}
	for i, s := range got {
		if s.Key != FileKeys[i].Key {
			t.Errorf("setting %d is %s, want %s", i, s.Key, FileKeys[i].Key)
		}
		if v, ok := want[s.Key]; ok && s.Value != v {
			t.Errorf("%s: %q, want %q", s.Key, s.Value, v)
		}
	}
}

// API keys come from --api-key (a comma-separated list, replaced by each layer, as any
// setting) and --api-key-file, relative to the config file, whose keys are added.
func TestServeAPIKeys(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keys"), []byte("# team A\nkey-a\n\n  key-b  \n"), 0o644)
	os.WriteFile(filepath.Join(dir, "serve.yaml"), []byte("auth:\n  api_keys: file-key\n  api_key_file: keys\n  exempt: health, metrics\nhttp: {allowed_hosts: \"localhost,Embed.Example\"}\n"), 0o644)
	env := map[string]string{"ORTSERVE_API_KEY": "env-1, env-2"}
	c, err := Load([]string{"--config", filepath.Join(dir, "serve.yaml")}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"env-1", "env-2", "key-a", "key-b"}; !slices.Equal(c.HTTP.APIKeys, want) {
		t.Errorf("keys %q, want %q", c.HTTP.APIKeys, want)
	}
	if !slices.Equal(c.HTTP.AuthExempt, []string{"health", "metrics"}) || !slices.Equal(c.HTTP.AllowedHosts, []string{"localhost", "Embed.Example"}) {
		t.Errorf("exempt %q, hosts %q", c.HTTP.AuthExempt, c.HTTP.AllowedHosts)
	}
}

// --model is a list: repeated on the command line it adds, and each layer (file,
// environment, flags) replaces the one before. Given alone, the default repository is not
// served; --models from any layer is.
func TestServeModelFlag(t *testing.T) {
	def := Default().Models
	tests := []struct {
		name   string
		file   string
		env    map[string]string
		args   []string
		models string
		model  []string
	}{
		{"none", "", nil, nil, def, nil},
		{"repeated flags, alone", "", nil, []string{"--model", "a=/x", "--model", "/y,/z"}, "", []string{"a=/x", "/y", "/z"}},
		{"with --models", "", nil, []string{"--models", "/repo", "--model", "/y"}, "/repo", []string{"/y"}},
		{"with ORTSERVE_MODELS", "", map[string]string{"ORTSERVE_MODELS": "/m"}, []string{"--model", "/y"}, "/m", []string{"/y"}},
		{"the flag replaces the environment", "", map[string]string{"ORTSERVE_MODEL": "a=/x, /y"}, []string{"--model", "/z"}, "", []string{"/z"}},
		{"the environment", "", map[string]string{"ORTSERVE_MODEL": "a=/x, /y"}, nil, "", []string{"a=/x", "/y"}},
		{"the file: relative to it", "model: a=rel, other, /abs, x/y=z\n", nil, []string{"--config", "$DIR/serve.yaml"}, "",
			[]string{"a=$DIR/rel", "$DIR/other", "/abs", "$DIR/x/y=z"}},
		{"the environment replaces the file", "model: a=rel\nmodels: repo\n", map[string]string{"ORTSERVE_MODEL": "/e"}, []string{"--config", "$DIR/serve.yaml"}, "$DIR/repo", []string{"/e"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, dir, err := loadWith(t, tt.file, tt.env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, m := range tt.model {
				want = append(want, strings.ReplaceAll(m, "$DIR", dir))
			}
			if c.Models != strings.ReplaceAll(tt.models, "$DIR", dir) || !reflect.DeepEqual(c.Model, want) {
				t.Errorf("models %q, model %q; want %q, %q", c.Models, c.Model, tt.models, want)
			}
		})
	}
}

func TestServeModelFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  map[string]string
		args []string
		want string
	}{
		{"no name before =", "", map[string]string{"ORTSERVE_MODEL": "=/x"}, nil, `ORTSERVE_MODEL="=/x" (model): "=/x": put the model's name before =, or leave the = out`},
		{"no folder after =", "model: a=\n", nil, []string{"--config", "$DIR/serve.yaml"}, `line 1: model "a=": "a=": name the model folder after =`},
		{"a bad name", "", map[string]string{"ORTSERVE_MODEL": "my model=/x"}, nil, `model name "my model": use letters, digits, '.', '_' and '-'`},
		{"a name twice", "", nil, []string{"--model", "a=/x", "--model", "a=/y"}, `--model "a=/x,a=/y" (model): the name a is given twice`},
		{"nothing to serve", "", nil, []string{"--models", ""}, `--models "" (models): name the model repository's folder, or a model folder with --model`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, dir, err := loadWith(t, tt.file, tt.env, tt.args...)
			if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), strings.ReplaceAll(tt.want, "$DIR", dir)) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got %v, want one line containing %q", err, tt.want)
			}
		})
	}
}

// The calibration cache is a folder, relative to the config file as every path there is, or
// off, which is no folder: not made relative, and spelled out as off.
func TestCalibrationCache(t *testing.T) {
	for _, tt := range []struct {
		name, file string
		env        map[string]string
		args       []string
		want       string
	}{
		{"the default", "", nil, nil, Default().CalibrationCache},
		{"the file: relative to it", "batching: {calibration_cache: cal}\n", nil, []string{"--config", "$DIR/serve.yaml"}, "$DIR/cal"},
		{"the file: off", "batching: {calibration_cache: off}\n", nil, []string{"--config", "$DIR/serve.yaml"}, Off},
		{"the environment", "", map[string]string{"ORTSERVE_CALIBRATION_CACHE": "/var/cache/cal"}, nil, "/var/cache/cal"},
		{"the flag", "", nil, []string{"--calibration-cache", "off"}, Off},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, dir, err := loadWith(t, tt.file, tt.env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.ReplaceAll(tt.want, "$DIR", dir); c.CalibrationCache != want {
				t.Errorf("calibration cache %q; want %q", c.CalibrationCache, want)
			}
			settings, err := c.Settings()
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range settings {
				if s.Key == "batching.calibration_cache" && (s.Value == "" || (c.CalibrationCache == Off) != (s.Value == Off)) {
					t.Errorf("spelled out as %q", s.Value)
				}
			}
		})
	}
	t.Setenv("ORTSERVE_CACHE", "/srv/cache")
	if got := Default().CalibrationCache; got != "/srv/cache/calibration" {
		t.Errorf("default under ORTSERVE_CACHE: %q", got)
	}
	t.Setenv("ORTSERVE_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if got := Default().CalibrationCache; got != "/xdg/ortserve/calibration" {
		t.Errorf("default under XDG_CACHE_HOME: %q", got)
	}
}
