package main

// `server inspect MODEL_OR_FILE` reports what an ONNX file holds (size, format, signature,
// operators, quantized and fp16 content) and where ONNX Runtime places its nodes, from ONNX
// Runtime's own profile of one run on dummy inputs. serve logs the same one-line summary per
// version at load (backend.logPlacement). Here the files are found, read and placed; package
// cmd/server/internal/inspect lays out the report and the log lines.

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/cmd/server/internal/inspect"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime/onnx"
	"github.com/ortserve/ortserve/runtime/ort"
)

// inspectConfig is what `server inspect` takes.
type inspectConfig struct {
	Target  string // a model's name in the repository, a model folder's path, or an ONNX file
	Version string // one version of a model; "": all
	JSON    bool
	serve   config.Serve // the repository, library and device, as serve reads them
}

// inspectTarget is one file to inspect.
type inspectTarget struct {
	Model, Version string   // empty for a file named on the command line
	Devices        []string // the version's devices in model.yaml; empty: any
	Path           string
}

func inspectFlags(c *inspectConfig, models, device, config *string) *flag.FlagSet {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.StringVar(&c.Version, "version", "", "inspect only this version of the model")
	fs.BoolVar(&c.JSON, "json", false, "write the report as JSON")
	fs.StringVar(models, "models", "", "model repository; default: serve's (--config, ORTSERVE_MODELS, the cache)")
	fs.StringVar(device, "device", "", "where to place the nodes: auto, cuda or cpu; default: serve's. Without a GPU, cuda falls back to CPU and says so")
	fs.StringVar(config, "config", "", "serve's config file (docs/config.md) for the model repository, library and device")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: server inspect MODEL_OR_FILE [--version V] [--device cpu|cuda] [--json]

Reports an ONNX file's size, format, inputs and outputs, operators (quantized ones marked)
and fp16 content, and where ONNX Runtime places each node: it runs the file once on dummy
inputs with ONNX Runtime's profiler on. MODEL_OR_FILE is a model in the repository (every
version, or --version V), a model folder's path (a Hugging Face folder too, as serve --model
reads it), or a path to an .onnx file.

`)
		fs.PrintDefaults()
	}
	return fs
}

// parseInspect reads inspect's flags and serve's settings, and finds the files to inspect.
// Every error is a usage error.
func parseInspect(args []string, getenv func(string) string, stderr io.Writer) (inspectConfig, []inspectTarget, error) {
	var c inspectConfig
	var modelsDir, device, configFile string
	fs := inspectFlags(&c, &modelsDir, &device, &configFile)
	fs.SetOutput(stderr)
	// The model or file may come before the flags, or after them.
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return c, nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	switch len(pos) {
	case 0:
		return c, nil, usagef("name a model or an .onnx file: server inspect MODEL_OR_FILE (-h for the flags)")
	case 1:
		c.Target = pos[0]
	default:
		return c, nil, usagef("unexpected arguments %v: server inspect takes one model or file", pos[1:])
	}
	sargs := configArgs(configFile)
	if modelsDir != "" {
		sargs = append(sargs, "--models", modelsDir)
	}
	if device != "" {
		sargs = append(sargs, "--device", device)
	}
	var err error
	if c.serve, err = config.Load(sargs, getenv, stderr); err != nil {
		return c, nil, err
	}
	targets, err := inspectTargets(c)
	return c, targets, err
}

// inspectTargets resolves the command line's model or file to the files to inspect.
func inspectTargets(c inspectConfig) ([]inspectTarget, error) {
	if fi, err := os.Stat(c.Target); err == nil && !fi.IsDir() {
		if c.Version != "" {
			return nil, usagef("--version is for a model in the repository; %s is a file", c.Target)
		}
		return []inspectTarget{{Path: c.Target}}, nil
	}
	dir := c.Target // a model folder by its path, as serve --model names one
	var cfg models.Config
	var err error
	if strings.ContainsRune(dir, filepath.Separator) && models.IsModelDir(dir) {
		cfg, err = models.LoadConfig(dir, slog.New(slog.DiscardHandler))
	} else {
		if strings.HasSuffix(c.Target, ".onnx") || strings.ContainsRune(c.Target, filepath.Separator) {
			return nil, usagef("no file %s: name an .onnx file, a model folder, or a model in the repository", c.Target)
		}
		dir, cfg, err = models.Find(c.serve.Sources(), c.Target)
		var ue *models.UnknownError
		if errors.As(err, &ue) {
			return nil, usagef("unknown model %q in %s: have %s, or name an .onnx file", c.Target, c.serve.Models, strings.Join(ue.Known, ", "))
		} else if err != nil && dir == "" { // the folders could not be listed; else, the model's config is broken
			return nil, usagef("unknown model %q: %w, or name an .onnx file", c.Target, err)
		}
	}
	if err != nil {
		return nil, usagef("%w: fix the model's %s", err, models.ConfigFile)
	}
	versions := slices.Sorted(maps.Keys(cfg.Versions))
	if c.Version != "" {
		if _, ok := cfg.Versions[c.Version]; !ok {
			return nil, usagef("model %s has no version %q: have %s", c.Target, c.Version, strings.Join(versions, ", "))
		}
		versions = []string{c.Version}
	}
	var out []inspectTarget
	for _, v := range versions {
		vc := cfg.Versions[v]
		out = append(out, inspectTarget{Model: cfg.Name, Version: v, Devices: vc.Devices, Path: filepath.Join(dir, vc.File)})
	}
	return out, nil
}

func runInspect(ctx context.Context, args []string, stdout io.Writer) error {
	c, targets, err := parseInspect(args, os.Getenv, os.Stderr)
	if err != nil {
		return err
	}
	env, err := ort.Open(c.serve.ORTLib)
	if err != nil {
		return err
	}
	defer env.Close()
	return inspectFiles(ctx, c, targets, env, stdout)
}

// inspectFiles reports on every target, on an ONNX Runtime environment the caller owns. A file
// that cannot be read or placed is reported as far as it goes, and the command fails at the
// end.
func inspectFiles(ctx context.Context, c inspectConfig, targets []inspectTarget, env *ort.Env, stdout io.Writer) error {
	r := inspect.Report{ORTVersion: env.Version(), Device: c.serve.Device}
	sc := c.serve
	if sc.Device == string(ort.DeviceCUDA) {
		sc.Device = string(ort.DeviceAuto) // inspect says where nodes would go; without CUDA, that is CPU
	}
	provider, why, err := resolveDevice(env, sc, nil, "")
	if err != nil {
		return err
	}
	r.Provider, r.FallbackReason = string(provider), why
	opts := ort.Options{Provider: provider, DeviceID: c.serve.DeviceID, IntraOpThreads: 1, InterOpThreads: 1}
	if !c.JSON {
		if err := inspect.WriteHeader(stdout, r); err != nil {
			return err
		}
	}
	var failed []string
	for _, t := range targets {
		if err := ctx.Err(); err != nil {
			return err
		}
		f := inspect.File{Model: t.Model, Version: t.Version, Devices: t.Devices}
		start := time.Now()
		m, err := onnx.ReadModel(t.Path)
		if err != nil {
			return err
		}
		f.File = m
		if p, err := env.Place(m, opts); err != nil {
			f.PlaceError = err.Error()
			failed = append(failed, cmp.Or(t.Version, t.Path))
		} else {
			f.Place = placementView(p)
		}
		f.Took = time.Since(start).Round(time.Millisecond).String()
		f.Summary = inspect.KVLine(inspect.Summary(m, f.Place, string(provider)))
		r.Files = append(r.Files, f)
		if !c.JSON {
			if err := inspect.WriteFile(stdout, f); err != nil {
				return err
			}
		}
	}
	if c.JSON {
		if err := inspect.WriteJSON(stdout, r); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("could not see the placement of %s: the report says why", strings.Join(failed, ", "))
	}
	return nil
}

// logPlacement logs where a version's nodes run, once, when the version is loaded: the
// file's operators always (reading the file's headers: milliseconds); on CUDA also ONNX
// Runtime's placement, from the profile of one run of a throw-away session (a session's
// creation and a run), with a warning when nodes fall back to CPU. On CPU there is nothing
// to profile: CPU is the only provider.
func (b *backend) logPlacement(spec models.ExecSpec) {
	start := time.Now()
	m, err := onnx.ReadModel(spec.Path)
	if err != nil {
		b.log.Warn("placement not checked", "model", spec.Model, "version", spec.Version, "err", err)
		return
	}
	var p *inspect.Placement
	if b.opts.Provider != ort.ProviderCPU {
		placed, err := b.env.Place(m, b.opts)
		if err != nil {
			b.log.Warn("placement not checked", "model", spec.Model, "version", spec.Version, "err", err)
		} else {
			p = placementView(placed)
		}
	}
	inspect.LogPlacement(b.log, spec.Model, spec.Version, m, p, string(b.opts.Provider), time.Since(start))
}

// placementView is p as package inspect lays it out: the same fields, and nil where p has nil.
func placementView(p ort.Placement) *inspect.Placement {
	return &inspect.Placement{
		Provider:       string(p.Provider),
		Nodes:          p.Nodes,
		Providers:      convertAll(p.Providers, func(c ort.ProviderCount) inspect.ProviderCount { return inspect.ProviderCount(c) }),
		Ops:            convertAll(p.Ops, func(o ort.OpPlacement) inspect.OpPlacement { return inspect.OpPlacement(o) }),
		QuantizedNodes: p.QuantizedNodes,
		Fallback:       convertAll(p.Fallback, func(n ort.PlacedNode) inspect.PlacedNode { return inspect.PlacedNode(n) }),
	}
}

// convertAll converts each element of in; nil stays nil.
func convertAll[T, U any](in []T, f func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}
