// Package config is the settings of `server serve`, and how they are read. They come in
// layers, each overriding the ones before it: defaults (Default), a YAML file (--config or
// ORTSERVE_CONFIG), ORTSERVE_* environment variables, and flags given on the command line.
// Every layer sets values through the same flag.Value, so a setting parses the same wherever
// it comes from. The merged result is validated once; every problem found is reported on its
// own line, naming where the value came from (file and line, variable or flag), and is a
// usage error (ErrUsage): exit code 2.
//
// It needs neither ONNX Runtime nor the tokenizer library: it builds and tests without cgo.
package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/server"
	"github.com/ortserve/ortserve/tracing"
)

// Serve is everything `server serve` takes: defaults, then a --config file, then ORTSERVE_*
// environment variables, then flags.
type Serve struct {
	Config string // the YAML file read, if any
	Addr   string
	// GRPCAddr, when set, is where the gRPC server (KServe v2's inference service and
	// grpc.health.v1) listens; "": no gRPC.
	GRPCAddr string
	Models   string
	// Model are model folders served on their own, each DIR or NAME=DIR (parseModelDir);
	// given alone, without Models from any layer, they are all that is served.
	Model    []string
	ORTLib   string
	Device   string
	DeviceID int
	Sessions int // per model version; 0: one per CPU the process may use (GOMAXPROCS) on CPU, 1 on CUDA
	Threads  int // intra-op threads per session; 0: 1 on CPU, ORT's default on CUDA
	Batch    runtime.BatchConfig
	// Calibration is how long each version measures its cost curve before it serves
	// (runtime.CalibrationBatches): at least its smallest batch, then larger ones until
	// this has passed.
	Calibration time.Duration
	// CalibrationCache is the folder where versions' calibrations are kept, so that a
	// restart seeds each version's cost model from there instead of measuring it again
	// (engine.Config.CalibrationCache); Off: none.
	CalibrationCache string
	// Packing is auto, on or off: whether Batch.Packing is set, auto on the CPU only
	// (engine.PackingOn).
	Packing string
	// Grace bounds everything after SIGTERM, DrainDelay included (server.Front.Shutdown,
	// which serves on for at least server.MinDrain whatever DrainDelay says).
	Grace      time.Duration
	DrainDelay time.Duration
	Reload     time.Duration // how often the model repository is checked for changes; 0: never
	Strict     bool
	HTTP       server.Config
	Conn       Conn
	// APIKeyFile holds API keys, one a line, added to HTTP.APIKeys at validation.
	APIKeyFile string
	// Tracing is where OpenTelemetry traces go; its zero value (and no OTEL_EXPORTER_OTLP_*
	// endpoint) is off.
	Tracing tracing.Config
}

// Conn is how serve's HTTP server treats connections (server.Conn).
type Conn = server.Conn

// cacheDir is where `make` puts native libraries and models.
func cacheDir() string {
	if d := os.Getenv("ORTSERVE_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".cache/ortserve"
	}
	return filepath.Join(home, ".cache", "ortserve")
}

// Off turns off what a setting names by a path (--calibration-cache).
const Off = "off"

// calibrationCacheDir is where serve keeps calibrations unless told otherwise: in
// ORTSERVE_CACHE if set, else in the user's cache folder ($XDG_CACHE_HOME, or ~/.cache), under
// ortserve/calibration; Off where there is neither.
func calibrationCacheDir() string {
	if d := os.Getenv("ORTSERVE_CACHE"); d != "" {
		return filepath.Join(d, "calibration")
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "ortserve", "calibration")
	}
	return Off
}

// Default is what `server serve` runs with when nothing is configured: the cache `make`
// fills, on 127.0.0.1:8080.
func Default() Serve {
	cache := cacheDir()
	return Serve{
		Addr:   "127.0.0.1:8080",
		Models: filepath.Join(cache, "models", "current"),
		ORTLib: filepath.Join(cache, "ort", "1.29.0", "libonnxruntime.so.1"),
		Device: "auto",
		Batch:  runtime.DefaultBatchConfig(),
		// About 0.3 s a version at start-up: the default repository's 8 versions came up in
		// 9.1 s against 6.5–6.9 s without it (docs/batching.md).
		Calibration:      300 * time.Millisecond,
		CalibrationCache: calibrationCacheDir(),
		Packing:          "auto",
		Grace:            30 * time.Second,
		Reload:           5 * time.Second,
		HTTP:             server.DefaultConfig(),
		Conn:             server.DefaultConn(),
	}
}

// flags defines serve's flags on c's fields, with c's values as their defaults. Every flag
// --x-y is also the variable ORTSERVE_X_Y and, but for --config, a key of the config file: a
// new flag needs a row in FileKeys and a line in docs/config.md.
func flags(c *Serve) *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&c.Config, "config", c.Config, "YAML file of settings (docs/config.md); the environment and flags override it")
	fs.StringVar(&c.Addr, "addr", c.Addr, "listen address")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC listen address (KServe v2's inference service, grpc.health.v1); empty: no gRPC")
	fs.StringVar(&c.Models, "models", c.Models, "model repository: a folder of model folders (each with a model.yaml, or a Hugging Face model folder)")
	fs.Var(modelFlag{&c.Model}, "model", "a model folder to serve, DIR or NAME=DIR: a Hugging Face folder (config.json, tokenizer.json, .onnx files; a hub cache models--org--name too) or one with a model.yaml; repeat it or separate with commas. Alone, the default --models is not served")
	fs.StringVar(&c.ORTLib, "ort-lib", c.ORTLib, "ONNX Runtime shared library")
	fs.StringVar(&c.Device, "device", c.Device, "auto, cuda or cpu")
	fs.IntVar(&c.DeviceID, "device-id", c.DeviceID, "CUDA device")
	fs.IntVar(&c.Sessions, "sessions", c.Sessions, "sessions per model version; 0: one per CPU the process may use (GOMAXPROCS) on CPU, 1 on CUDA")
	fs.IntVar(&c.Threads, "threads", c.Threads, "intra-op threads per session; 0: 1 on CPU, ORT's default on CUDA")
	fs.IntVar(&c.Batch.MaxBatchSize, "max-batch", c.Batch.MaxBatchSize, "most texts one inference batch takes")
	fs.IntVar(&c.Batch.MaxBatchTokens, "max-batch-tokens", c.Batch.MaxBatchTokens, "most padded tokens (texts × longest) in one batch; 0: no budget")
	fs.StringVar(&c.Packing, "packing", c.Packing, "auto, on or off: run batched texts end to end in one row, with no padding, on models whose graph declares it (ortserve.packing metadata); auto: on the CPU only")
	fs.Var(orderFlag{&c.Batch.Order}, "batch-order", "shortest or arrival: the order queued texts are served in; shortest: shortest first, until a text has waited 8× its own run (docs/batching.md)")
	fs.DurationVar(&c.Batch.MaxQueueDelay, "max-queue-delay", c.Batch.MaxQueueDelay, "opt-in batching window: longest a text waits for others while a session is free; 0: dispatch at once (continuous batching)")
	fs.Var(sloFlag{&c.Batch.SLO}, "slo", "latency objective, as p95=50ms: hold each version's p95 to it by refusing (429) requests predicted to miss it and capping batch run time; empty: none")
	fs.IntVar(&c.Batch.MaxQueueRequests, "max-queue-requests", c.Batch.MaxQueueRequests, "requests that may wait per model version; past it, 429")
	fs.IntVar(&c.Batch.MaxQueueTokens, "max-queue-tokens", c.Batch.MaxQueueTokens, "tokens that may wait per model version; past it, 429")
	fs.DurationVar(&c.Calibration, "calibration-budget", c.Calibration, "how long each model version measures its batch cost curve at start-up, from its smallest batch up; then it learns from the batches it serves. Longer: a better first guess, a slower start")
	fs.StringVar(&c.CalibrationCache, "calibration-cache", c.CalibrationCache, "folder where each model version's calibration is kept, keyed by the model file's content, the device, sessions and ONNX Runtime version: a restart reads it instead of measuring again; off: always measure")
	fs.DurationVar(&c.Grace, "grace", c.Grace, "bounds the whole shutdown, from SIGTERM to exit, drain delay included: requests still queued at its end are answered 503 (set it to Kubernetes' terminationGracePeriodSeconds, or a little under)")
	fs.DurationVar(&c.DrainDelay, "drain-delay", c.DrainDelay, "after SIGTERM, how long readiness says 503 while requests are still served, for load balancers to stop sending (part of --grace); serve reads on for at least 500ms whatever it says")
	fs.DurationVar(&c.Reload, "reload-interval", c.Reload, "how often to check the model repository and hot-reload changed models; 0: never")
	fs.BoolVar(&c.Strict, "strict-placement", c.Strict, "fail to load a CUDA version if any node would fall back to CPU")
	fs.IntVar(&c.HTTP.MaxInputs, "max-inputs", c.HTTP.MaxInputs, "most texts in one request")
	fs.Int64Var(&c.HTTP.MaxBodyBytes, "max-body-bytes", c.HTTP.MaxBodyBytes, "largest request body")
	fs.IntVar(&c.HTTP.MaxInputChars, "max-input-chars", c.HTTP.MaxInputChars, "most characters in one text: cut when the request truncates, else 413; 0: no limit")
	fs.BoolVar(&c.HTTP.AutoTruncate, "auto-truncate", c.HTTP.AutoTruncate, "cut inputs over a model's max length (and max-input-chars) unless a request says \"truncate\": false")
	fs.StringVar(&c.HTTP.DefaultPromptName, "default-prompt-name", c.HTTP.DefaultPromptName, "the prompt put before an embed request's texts when it names none (prompt_name), for models that have a prompt of that name and no default_prompt of their own; empty: none")
	fs.IntVar(&c.HTTP.MaxInFlight, "max-in-flight", c.HTTP.MaxInFlight, "inference requests served at once; past it, 429")
	fs.DurationVar(&c.HTTP.RequestTimeout, "request-timeout", c.HTTP.RequestTimeout, "a request's deadline unless it sends X-Request-Timeout; 0: none")
	fs.DurationVar(&c.Conn.ReadTimeout, "read-timeout", c.Conn.ReadTimeout, "longest a client may take to send a request, head and body; 0: none")
	fs.DurationVar(&c.Conn.WriteTimeout, "write-timeout", c.Conn.WriteTimeout, "longest a response may take to be written, from its first byte (inference time does not count); 0: none")
	fs.DurationVar(&c.Conn.IdleTimeout, "idle-timeout", c.Conn.IdleTimeout, "how long a keep-alive connection may wait for its next request; 0: forever")
	fs.Var(listFlag{&c.HTTP.APIKeys}, "api-key", "API keys, comma-separated: every route then wants Authorization: Bearer KEY (401 without); empty: no auth (docs/security.md)")
	fs.StringVar(&c.APIKeyFile, "api-key-file", c.APIKeyFile, "file of API keys, one a line (# comments), as --api-key")
	fs.Var(listFlag{&c.HTTP.AuthExempt}, "auth-exempt", "routes open without a key, comma-separated: health (/health, /v2/health/*), metrics (/metrics)")
	fs.Var(listFlag{&c.HTTP.AllowedHosts}, "allowed-hosts", "the Host names answered, comma-separated (others: 403), against DNS rebinding; empty: any")
	fs.StringVar(&c.Tracing.Endpoint, "otlp-endpoint", c.Tracing.Endpoint, "send OpenTelemetry traces to this OTLP collector: grpc://host:4317, or http(s)://host:port with --otlp-protocol; empty: OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing (docs/metrics.md#tracing)")
	fs.StringVar(&c.Tracing.Protocol, "otlp-protocol", c.Tracing.Protocol, "grpc or http/protobuf; empty: grpc for grpc://, else OTEL_EXPORTER_OTLP_PROTOCOL, else grpc")
	fs.IntVar(&c.Conn.MaxConnsPerClient, "max-conns-per-client", c.Conn.MaxConnsPerClient, "most connections one IP address may hold open; past it, 429 at connect; 0: no cap (leave it off behind a proxy)")
	return fs
}

// FileKey is a config file key and the flag it sets. "section.key" is key inside the
// mapping section.
type FileKey struct{ Key, Flag string }

// FileKeys are the config file's keys, in docs/config.md's order, and the flag each sets.
var FileKeys = []FileKey{
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
	{"batching.order", "batch-order"},
	{"batching.max_queue_delay", "max-queue-delay"},
	{"batching.max_queue_requests", "max-queue-requests"},
	{"batching.max_queue_tokens", "max-queue-tokens"},
	{"batching.calibration_budget", "calibration-budget"},
	{"batching.calibration_cache", "calibration-cache"},
	{"slo", "slo"},
	{"default_prompt_name", "default-prompt-name"},
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
	{"grpc_listen", "grpc-addr"},
	{"auth.api_keys", "api-key"},
	{"auth.api_key_file", "api-key-file"},
	{"auth.exempt", "auth-exempt"},
	{"reload_interval", "reload-interval"},
	{"shutdown_grace", "grace"},
	{"shutdown_drain_delay", "drain-delay"},
	{"tracing.otlp_endpoint", "otlp-endpoint"},
	{"tracing.otlp_protocol", "otlp-protocol"},
}

// pathFlags take paths; in the config file a relative one is from the file's folder. The
// folders of --model are too, each of its list (relModelDirs).
var pathFlags = map[string]bool{"models": true, "ort-lib": true, "api-key-file": true, "calibration-cache": true}

// EnvName is the environment variable of a flag: --max-batch is ORTSERVE_MAX_BATCH.
func EnvName(flagName string) string {
	return "ORTSERVE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// fileKey is the config file key that a flag sets, or "".
func fileKey(flagName string) string {
	for _, k := range FileKeys {
		if k.Flag == flagName {
			return k.Key
		}
	}
	return ""
}

// Sources are where serve finds its models: the repository and the --model folders. The
// commands that find a model by name (gate, inspect, tune, bench) look there too
// (models.Find), so that each knows the models serve serves.
func (c Serve) Sources() models.Sources {
	src := models.Sources{Root: c.Models}
	for _, s := range c.Model {
		md, _ := parseModelDir(s) // validated
		src.Models = append(src.Models, md)
	}
	return src
}

// Setting is one config file key and its value, as the file spells it.
type Setting struct{ Key, Value string }

// Settings spells out every setting of c as a config file key and value, in FileKeys'
// order, paths made absolute so that the file can live anywhere.
func (c Serve) Settings() ([]Setting, error) {
	fs := flags(&c)
	var out []Setting
	for _, k := range FileKeys {
		v := fs.Lookup(k.Flag).Value.String()
		if pathFlags[k.Flag] && v != "" && v != Off {
			abs, err := filepath.Abs(v)
			if err != nil {
				return nil, err
			}
			v = abs
		}
		out = append(out, Setting{Key: k.Key, Value: v})
	}
	return out, nil
}
