package config

import (
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

	"github.com/ortserve/ortserve/models"
)

// Inspect is what `server inspect` takes, with the files it names found.
type Inspect struct {
	Target  string // a model's name in the repository, a model folder's path, or an ONNX file
	Version string // one version of a model; "": all
	JSON    bool
	Serve   Serve // the repository, library and device, as serve reads them
	Targets []InspectTarget
}

// InspectTarget is one file to inspect.
type InspectTarget struct {
	Model, Version string   // empty for a file named on the command line
	Devices        []string // the version's devices in model.yaml; empty: any
	Path           string
}

func inspectFlags(c *Inspect, models, device, config *string) *flag.FlagSet {
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

// ParseInspect reads inspect's flags and serve's settings, and finds the files to inspect.
// Every error is a usage error.
func ParseInspect(args []string, getenv func(string) string, stderr io.Writer) (*Inspect, error) {
	c := &Inspect{}
	var modelsDir, device, configFile string
	fs := inspectFlags(c, &modelsDir, &device, &configFile)
	fs.SetOutput(stderr)
	// The model or file may come before the flags, or after them.
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	switch len(pos) {
	case 0:
		return nil, usagef("name a model or an .onnx file: server inspect MODEL_OR_FILE (-h for the flags)")
	case 1:
		c.Target = pos[0]
	default:
		return nil, usagef("unexpected arguments %v: server inspect takes one model or file", pos[1:])
	}
	sargs := Args(configFile)
	if modelsDir != "" {
		sargs = append(sargs, "--models", modelsDir)
	}
	if device != "" {
		sargs = append(sargs, "--device", device)
	}
	var err error
	if c.Serve, err = Load(sargs, getenv, stderr); err != nil {
		return nil, err
	}
	if c.Targets, err = c.targets(); err != nil {
		return nil, err
	}
	return c, nil
}

// targets resolves the command line's model or file to the files to inspect.
func (c *Inspect) targets() ([]InspectTarget, error) {
	if fi, err := os.Stat(c.Target); err == nil && !fi.IsDir() {
		if c.Version != "" {
			return nil, usagef("--version is for a model in the repository; %s is a file", c.Target)
		}
		return []InspectTarget{{Path: c.Target}}, nil
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
		dir, cfg, err = models.Find(c.Serve.Sources(), c.Target)
		var ue *models.UnknownError
		if errors.As(err, &ue) {
			return nil, usagef("unknown model %q in %s: have %s, or name an .onnx file", c.Target, c.Serve.Models, strings.Join(ue.Known, ", "))
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
	var out []InspectTarget
	for _, v := range versions {
		vc := cfg.Versions[v]
		out = append(out, InspectTarget{Model: cfg.Name, Version: v, Devices: vc.Devices, Path: filepath.Join(dir, vc.File)})
	}
	return out, nil
}
