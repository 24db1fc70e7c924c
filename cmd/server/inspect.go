package main

// `server inspect MODEL_OR_FILE` reports what an ONNX file holds (size, format, signature,
// operators, quantized and fp16 content) and where ONNX Runtime places its nodes, from ONNX
// Runtime's own profile of one run on dummy inputs. serve logs the same one-line summary per
// version at load (backend.logPlacement).

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ortserve/ortserve/cmd/server/internal/config"
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
	return inspect(ctx, c, targets, env, stdout)
}

// inspectReport is the whole report: what --json writes.
type inspectReport struct {
	ORTVersion string `json:"ort_version"`
	Device     string `json:"device"`   // asked for
	Provider   string `json:"provider"` // given to the sessions
	// FallbackReason says why CUDA was asked for and CPU is used.
	FallbackReason string       `json:"fallback_reason,omitempty"`
	Files          []fileReport `json:"files"`
}

// fileReport is one file's part of the report.
type fileReport struct {
	Model   string         `json:"model,omitempty"`
	Version string         `json:"version,omitempty"`
	Devices []string       `json:"devices,omitempty"`
	File    onnx.ModelInfo `json:"file"`
	Place   *ort.Placement `json:"placement,omitempty"`
	// PlaceError says why the placement could not be seen.
	PlaceError string `json:"placement_error,omitempty"`
	Summary    string `json:"summary"`
	Took       string `json:"took"` // reading the file and placing it
}

// inspect reports on every target, on an ONNX Runtime environment the caller owns. A file
// that cannot be read or placed is reported as far as it goes, and the command fails at the
// end.
func inspect(ctx context.Context, c inspectConfig, targets []inspectTarget, env *ort.Env, stdout io.Writer) error {
	r := inspectReport{ORTVersion: env.Version(), Device: c.serve.Device}
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
		fmt.Fprintf(stdout, "ONNX Runtime %s; device %s: %s", r.ORTVersion, r.Device, r.Provider)
		if why != "" {
			fmt.Fprintf(stdout, " (CUDA unavailable, placing on CPU: %s)", why)
		}
		fmt.Fprint(stdout, "\n\n")
	}
	var failed []string
	for _, t := range targets {
		if err := ctx.Err(); err != nil {
			return err
		}
		f := fileReport{Model: t.Model, Version: t.Version, Devices: t.Devices}
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
			f.Place = &p
		}
		f.Took = time.Since(start).Round(time.Millisecond).String()
		f.Summary = kvLine(placementSummary(m, f.Place, provider))
		r.Files = append(r.Files, f)
		if !c.JSON {
			if err := writeFileReport(stdout, f); err != nil {
				return err
			}
		}
	}
	if c.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("could not see the placement of %s: the report says why", strings.Join(failed, ", "))
	}
	return nil
}

// placementSummary is the one-line summary of a file's placement that inspect prints and
// serve logs at load, as key-value pairs: the provider the sessions get, the file's nodes and
// quantized nodes, and the nodes per provider after ONNX Runtime's optimizations. Without a
// placement, placed is all:CPUExecutionProvider on CPU (the only provider there: serve does
// not profile it) and unknown on another provider.
func placementSummary(m onnx.ModelInfo, p *ort.Placement, provider ort.Provider) []any {
	kv := []any{"provider", string(provider), "nodes", m.Nodes, "quantized", m.QuantizedNodes}
	if m.FP16Initializers > 0 || m.FP16Casts > 0 {
		kv = append(kv, "fp16_initializers", m.FP16Initializers)
	}
	if p == nil {
		if provider != ort.ProviderCPU {
			return append(kv, "placed", ort.ProviderUnknown)
		}
		return append(kv, "placed", "all:"+string(ort.ProviderCPU))
	}
	placed := make([]string, len(p.Providers))
	for i, c := range p.Providers {
		placed[i] = fmt.Sprintf("%s:%d", c.Provider, c.Nodes)
	}
	return append(kv, "placed", strings.Join(placed, ","), "placed_nodes", p.Nodes, "placed_quantized", p.QuantizedNodes)
}

// fallbackOps counts the nodes ONNX Runtime put on CPU per operator: "MatMulInteger:18,...".
func fallbackOps(p ort.Placement) string {
	var out []string
	for _, o := range p.Ops {
		if o.Provider == string(ort.ProviderCPU) {
			out = append(out, fmt.Sprintf("%s:%d", o.Op, o.Nodes))
		}
	}
	return strings.Join(out, ",")
}

// kvLine writes key-value pairs as slog's text handler does: k=v separated by spaces.
func kvLine(kv []any) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%v=%v", kv[i], kv[i+1])
	}
	return b.String()
}

// mib formats a size in bytes.
func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// writeFileReport writes one file's part of the text report.
func writeFileReport(w io.Writer, f fileReport) error {
	m := f.File
	title := m.Path
	if f.Model != "" {
		title = fmt.Sprintf("%s/%s  %s", f.Model, f.Version, m.Path)
		if len(f.Devices) > 0 {
			title += fmt.Sprintf("  (devices: %s)", strings.Join(f.Devices, ", "))
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\n", title)
	opsets := make([]string, len(m.Opsets))
	for i, o := range m.Opsets {
		opsets[i] = fmt.Sprintf("%s %d", o.Domain, o.Version)
	}
	fmt.Fprintf(tw, "  file\t%s, IR version %d, produced by %s, opsets %s\n", mib(m.Size), m.IRVersion,
		cmp.Or(strings.TrimSpace(m.Producer+" "+m.ProducerVersion), "(unknown)"), cmp.Or(strings.Join(opsets, ", "), "(none)"))
	for i, vs := range [][]onnx.IOInfo{m.Inputs, m.Outputs} {
		label := [2]string{"inputs", "outputs"}[i]
		for j, v := range vs {
			if j > 0 {
				label = ""
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", label, v.Name, v.Type, onnx.ShapeString(v.Shape))
		}
	}
	fp16 := "no"
	if m.FP16Initializers > 0 || m.FP16Casts > 0 {
		fp16 = fmt.Sprintf("%d of %d initializers, %d Cast nodes to float16", m.FP16Initializers, m.Initializers, m.FP16Casts)
	}
	fmt.Fprintf(tw, "  graph\t%d nodes, %d quantized; fp16: %s\n", m.Nodes, m.QuantizedNodes, fp16)
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(w, "  operators in the file (* quantized):\n")
	rows := make([][]string, len(m.Ops))
	for i, o := range m.Ops {
		op := o.Op
		if o.Domain != "ai.onnx" {
			op = o.Domain + "." + op
		}
		if o.Quantized {
			op += "*"
		}
		rows[i] = []string{op, strconv.Itoa(o.Nodes)}
	}
	writeTable(w, "    ", rows)

	switch p := f.Place; p {
	case nil:
		fmt.Fprintf(w, "  placement: not seen: %s\n", f.PlaceError)
	default:
		fmt.Fprintf(w, "  placement on %s, from ONNX Runtime's profile of one run:\n", p.Provider)
		fmt.Fprintf(w, "    %d nodes after ONNX Runtime's graph optimizations (the file has %d); %d quantized\n", p.Nodes, m.Nodes, p.QuantizedNodes)
		writePlacementTable(w, *p)
		switch {
		case p.Provider == ort.ProviderCPU:
		case len(p.Fallback) == 0:
			fmt.Fprintf(w, "    no node fell back to CPU\n")
		default:
			fmt.Fprintf(w, "    %d nodes fell back to CPU:\n", len(p.Fallback))
			for _, n := range p.Fallback {
				fmt.Fprintf(w, "      %s (%s)\n", cmp.Or(n.Name, "(unnamed)"), n.Op)
			}
		}
	}
	_, err := fmt.Fprintf(w, "  summary: %s (took %s)\n\n", f.Summary, f.Took)
	return err
}

// writePlacementTable writes the nodes per operator, a column per provider, most nodes first.
func writePlacementTable(w io.Writer, p ort.Placement) {
	col := map[string]int{}
	head := []string{"operator (* quantized)"}
	all := []string{"all"}
	for i, c := range p.Providers {
		col[c.Provider] = i
		head = append(head, c.Provider)
		all = append(all, strconv.Itoa(c.Nodes))
	}
	counts := map[string][]int{}
	totals := map[string]int{}
	var ops []string
	for _, o := range p.Ops {
		if counts[o.Op] == nil {
			counts[o.Op] = make([]int, len(p.Providers))
			ops = append(ops, o.Op)
		}
		counts[o.Op][col[o.Provider]] += o.Nodes
		totals[o.Op] += o.Nodes
	}
	slices.SortStableFunc(ops, func(a, b string) int { return totals[b] - totals[a] })
	rows := [][]string{head, all}
	for _, op := range ops {
		row := []string{op}
		if onnx.IsQuantizedOp(op) {
			row[0] += "*"
		}
		for _, n := range counts[op] {
			row = append(row, strconv.Itoa(n))
		}
		rows = append(rows, row)
	}
	writeTable(w, "    ", rows)
}

// writeTable writes rows as columns: the first left-aligned, the others right-aligned.
func writeTable(w io.Writer, indent string, rows [][]string) {
	var width []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len(cell))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		b.WriteString(indent)
		for i, cell := range row {
			if i == 0 {
				fmt.Fprintf(&b, "%-*s", width[0], cell)
			} else {
				fmt.Fprintf(&b, "  %*s", width[i], cell)
			}
		}
		fmt.Fprintln(w, b.String())
	}
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
	var p *ort.Placement
	if b.opts.Provider != ort.ProviderCPU {
		placed, err := b.env.Place(m, b.opts)
		if err != nil {
			b.log.Warn("placement not checked", "model", spec.Model, "version", spec.Version, "err", err)
		} else {
			p = &placed
		}
	}
	writePlacementLog(b.log, spec, m, p, b.opts.Provider, time.Since(start))
}

// writePlacementLog logs a version's placement summary, and a warning if it has nodes on CPU
// although its sessions run on another provider.
func writePlacementLog(log *slog.Logger, spec models.ExecSpec, m onnx.ModelInfo, p *ort.Placement, provider ort.Provider, took time.Duration) {
	attrs := append([]any{"model", spec.Model, "version", spec.Version}, placementSummary(m, p, provider)...)
	log.Info("placement", append(attrs, "took", took.Round(time.Millisecond))...)
	if p != nil && len(p.Fallback) > 0 {
		log.Warn("nodes of a "+string(provider)+" version run on CPU: expect copies between host and device; `server inspect` lists them",
			"model", spec.Model, "version", spec.Version, "cpu_nodes", len(p.Fallback), "ops", fallbackOps(*p))
	}
}
