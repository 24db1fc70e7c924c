// Package models is the model repository on disk (one folder per model, a model.yaml, one
// ONNX file per version) and the pipelines that turn texts into answers: embed (pooling,
// L2 normalization), classify (softmax, labels; single texts or pairs) and rerank (a
// cross-encoder's logit per query and passage pair, sigmoid). It knows nothing of HTTP or of ONNX
// Runtime: sessions come from a Backend, token ids from a tokenize.Tokenizer.
package models

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ortserve/ortserve/runtime"
)

// ConfigFile is the name of a model's config inside its folder.
const ConfigFile = "model.yaml"

// Task is what a model does.
type Task string

// Tasks.
const (
	TaskEmbed    Task = "embed"
	TaskClassify Task = "classify"
	// TaskRerank scores (query, passage) pairs with a cross-encoder: one logit per pair.
	TaskRerank Task = "rerank"
	// TaskSparse embeds texts as sparse vectors over the vocabulary (SPLADE): a masked
	// language model's per-token logits, pooled with PoolingSplade, non-zero entries only.
	TaskSparse Task = "sparse"
)

// Pooling turns per-token vectors into one vector per text.
type Pooling string

// Poolings.
const (
	PoolingMean      Pooling = "mean"      // mean over real tokens (attention mask), as sentence-transformers
	PoolingCLS       Pooling = "cls"       // the first token's vector
	PoolingMax       Pooling = "max"       // the largest value of each dimension over real tokens
	PoolingLastToken Pooling = "lasttoken" // the last real token's vector (decoder embedders)
	// PoolingNone is for an output that is already one vector per text, [batch, hidden]
	// (a graph exported with its own pooling, such as a sentence_embedding output).
	PoolingNone Pooling = "none"
	// PoolingSplade is sentence-transformers' SpladePooling(max, relu) of a masked language
	// model's logits: per vocabulary entry, the largest log(1 + relu(x)) over real tokens.
	PoolingSplade Pooling = "splade"
)

// Poolings are the poolings the embed pipeline implements (Pool). An embed model pooled
// with splade answers /embed with the whole vocabulary-sized vector, as TEI does.
var Poolings = []Pooling{PoolingMean, PoolingCLS, PoolingMax, PoolingLastToken, PoolingNone, PoolingSplade}

// Config is a model's model.yaml.
type Config struct {
	Name      string `yaml:"name"`
	Task      Task   `yaml:"task"`
	Tokenizer string `yaml:"tokenizer"`  // tokenizer.json, relative to the model folder
	MaxLength int    `yaml:"max_length"` // tokens, special tokens included
	// Output is the graph output the pipeline reads: [batch, seq, hidden] hidden states for
	// embed, [batch, classes] logits for classify, [batch, 1] logits for rerank.
	Output    string  `yaml:"output"`
	Pooling   Pooling `yaml:"pooling,omitempty"`   // embed only; sparse: splade
	Normalize bool    `yaml:"normalize,omitempty"` // embed only: L2-normalize by default
	// Dense are sentence-transformers Dense modules (folders with config.json and
	// model.safetensors, relative to the model folder) applied in order after pooling and
	// before normalization; embed only.
	Dense  []string `yaml:"dense,omitempty"`
	Labels []string `yaml:"labels,omitempty"` // classify only, in logit order
	// Prompts, embed only, are texts a request may ask to put before each input by name
	// (prompt_name), as sentence-transformers' prompts: {query: "query: "}. The model
	// folder's config_sentence_transformers.json adds its own; model.yaml's win.
	Prompts map[string]string `yaml:"prompts,omitempty"`
	// DefaultPrompt names the prompt of a request that names none; "": the
	// config_sentence_transformers.json's default_prompt_name, else the server's
	// --default-prompt-name when the model has that prompt, else none.
	DefaultPrompt string `yaml:"default_prompt,omitempty"`
	// Dimensions, embed only, are the lengths a request may cut the vectors to (Matryoshka
	// "dimensions"); empty: any from 1 to the model's width.
	Dimensions []int `yaml:"dimensions,omitempty"`

	DefaultVersion string                   `yaml:"default_version"`
	Versions       map[string]VersionConfig `yaml:"versions"`
	// Traffic splits requests that name no version between versions by weight (a canary,
	// e.g. {fp32: 90, int8: 10}); empty sends them all to DefaultVersion.
	Traffic map[string]int `yaml:"traffic,omitempty"`
	// Instances is the sessions per version (CUDA streams); 0: the server's default.
	Instances int `yaml:"instances,omitempty"`
	// Load is when the model's versions are loaded: eager ("" too), at start-up and on a
	// reload, or lazy, on a version's first request. A version may say otherwise for itself.
	Load LoadMode `yaml:"load,omitempty"`
	// Batching overrides the server's batching defaults for this model's versions.
	Batching Batching `yaml:"batching,omitempty"`
	// SLO is the p95 latency each of the model's versions is held to, as "p95=50ms"
	// (runtime.ParseSLO); "": the server's --slo.
	SLO string `yaml:"slo,omitempty"`
	// Cache is a response cache per version; off unless MaxBytes > 0.
	Cache CacheConfig `yaml:"cache,omitempty"`
	// Gate is what `server gate` checks the model's versions against; nil: no defaults,
	// everything from the command line.
	Gate *GateConfig `yaml:"gate,omitempty"`
}

// GateConfig is a model's accuracy gate: the versions compared, the labeled data they are
// compared on, and the budget a candidate must stay within. `server gate` flags override
// each field. Budgets that are 0 are not checked.
type GateConfig struct {
	Baseline string `yaml:"baseline,omitempty"` // the reference version; "": default_version
	// Data is a labeled CSV/TSV/JSONL file, relative to the model folder unless absolute.
	Data        string `yaml:"data,omitempty"`
	TextColumn  string `yaml:"text_column,omitempty"`  // "": text
	LabelColumn string `yaml:"label_column,omitempty"` // "": label
	// LabelMap renames the data's labels to the model's, e.g. {"0": negative, "1": positive}.
	LabelMap map[string]string `yaml:"label_map,omitempty"`
	// MaxDrop is the most accuracy, in percentage points, a candidate may lose against the
	// baseline, held against the drop's confidence interval (classify: accuracy, required;
	// embed: leave-one-out nearest-centroid accuracy): see bench/gate.Budget.
	MaxDrop float64 `yaml:"max_drop,omitempty"`
	// Strict fails a drop the data cannot show to be within MaxDrop (an interval reaching
	// past it around a point estimate within it); by default that passes with a note.
	Strict bool `yaml:"strict,omitempty"`
	// MinAgreement is the least fraction of texts on which a candidate must predict the
	// baseline's label (classify only).
	MinAgreement float64 `yaml:"min_agreement,omitempty"`
	// MinCosineMean and MinCosineP1 bound the mean and the 1st percentile of the cosine
	// between a candidate's embedding and the baseline's (embed only).
	MinCosineMean float64 `yaml:"min_cosine_mean,omitempty"`
	MinCosineP1   float64 `yaml:"min_cosine_p1,omitempty"`
	// Candidates are the versions gated; empty: every version but the baseline that runs on
	// the device.
	Candidates []string `yaml:"candidates,omitempty"`
}

// Batching overrides the server's dynamic batching defaults; zero fields keep them.
type Batching struct {
	MaxBatchSize     int           `yaml:"max_batch_size,omitempty"`
	MaxBatchTokens   int           `yaml:"max_batch_tokens,omitempty"`
	Order            runtime.Order `yaml:"order,omitempty"` // shortest or arrival
	MaxQueueDelay    time.Duration `yaml:"max_queue_delay,omitempty"`
	MaxQueueRequests int           `yaml:"max_queue_requests,omitempty"`
	MaxQueueTokens   int           `yaml:"max_queue_tokens,omitempty"`
}

// SLOTarget is the model's SLO as a duration; 0: none of its own.
func (c Config) SLOTarget() time.Duration {
	d, _ := runtime.ParseSLO(c.SLO) // Validate has checked it
	return d
}

// Apply returns base with b's non-zero fields in place of its own.
func (b Batching) Apply(base runtime.BatchConfig) runtime.BatchConfig {
	base.MaxBatchSize = cmp.Or(b.MaxBatchSize, base.MaxBatchSize)
	base.MaxBatchTokens = cmp.Or(b.MaxBatchTokens, base.MaxBatchTokens)
	base.Order = cmp.Or(b.Order, base.Order)
	base.MaxQueueDelay = cmp.Or(b.MaxQueueDelay, base.MaxQueueDelay)
	base.MaxQueueRequests = cmp.Or(b.MaxQueueRequests, base.MaxQueueRequests)
	base.MaxQueueTokens = cmp.Or(b.MaxQueueTokens, base.MaxQueueTokens)
	return base
}

// CacheConfig bounds a version's response cache.
type CacheConfig struct {
	MaxBytes int64 `yaml:"max_bytes,omitempty"` // 0: no cache
}

// LoadMode is when a version is loaded.
type LoadMode string

// Load modes.
const (
	// LoadEager loads a version with its model, at start-up and on a reload: its first
	// request finds it warm, and a version that cannot load stops the model from loading.
	LoadEager LoadMode = "eager"
	// LoadLazy loads a version on its first request, which waits for it (and any requests
	// beside it wait for the same load): a repository of many versions, of which few are
	// asked for, starts at once and holds only those in memory. A load that fails fails the
	// requests that waited for it, and the next request tries again.
	LoadLazy LoadMode = "lazy"
)

// VersionConfig is one variant of a model, e.g. fp32, int8, fp16.
type VersionConfig struct {
	File string `yaml:"file"` // relative to the model folder
	// Devices the version may run on ("cpu", "cuda"); empty means any.
	Devices []string `yaml:"devices,omitempty"`
	// Load is when the version is loaded; "": as its model's Load says.
	Load LoadMode `yaml:"load,omitempty"`
}

// LoadsLazily says whether version name loads on its first request: its own load mode, or
// else the model's.
func (c Config) LoadsLazily(name string) bool {
	return cmp.Or(c.Versions[name].Load, c.Load) == LoadLazy
}

// RunsOn says whether the version may run on device.
func (v VersionConfig) RunsOn(device string) bool {
	return len(v.Devices) == 0 || slices.Contains(v.Devices, device)
}

// ReadConfig reads and validates dir/model.yaml, with the prompts of dir's
// config_sentence_transformers.json that it does not name itself. Unknown keys are errors,
// so that a typo does not silently fall back to a default.
func ReadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, ConfigFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("models: %w", err)
	}
	c, err := decodeConfig(data)
	if err == nil {
		err = c.addSTPrompts(dir, nil)
	}
	if err == nil {
		err = c.Validate()
	}
	if err != nil {
		return Config{}, fmt.Errorf("models: %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses and validates a model.yaml document.
func ParseConfig(data []byte) (Config, error) {
	c, err := decodeConfig(data)
	if err != nil {
		return Config{}, err
	}
	return c, c.Validate()
}

func decodeConfig(data []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(&c)
	return c, err
}

// Validate checks a config for mistakes a user can fix; the error says which and how.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Name == "" {
		bad("name is empty")
	}
	if c.Tokenizer == "" {
		bad("tokenizer is empty: name the tokenizer.json")
	}
	if c.MaxLength < 2 {
		bad("max_length %d is too small", c.MaxLength)
	}
	if c.Output == "" {
		bad("output is empty: name the graph output to read")
	}
	switch c.Task {
	case TaskEmbed:
		if !slices.Contains(Poolings, c.Pooling) {
			bad("pooling %q: use mean, cls, max, lasttoken, splade or none (an output already pooled)", c.Pooling)
		}
		if len(c.Labels) > 0 {
			bad("labels are for classify models")
		}
		if _, ok := c.Prompts[c.DefaultPrompt]; c.DefaultPrompt != "" && !ok {
			bad("default_prompt %q is not one of the prompts (%s)", c.DefaultPrompt, strings.Join(slices.Sorted(maps.Keys(c.Prompts)), ", "))
		}
		for _, d := range c.Dimensions {
			if d < 1 {
				bad("dimensions %v: each must be at least 1", c.Dimensions)
				break
			}
		}
		if len(c.Dense) > 0 && c.Pooling == PoolingSplade {
			bad("dense modules are not run after splade pooling")
		}
	case TaskSparse:
		if c.Pooling != PoolingSplade {
			bad("pooling %q: a sparse model pools with splade", c.Pooling)
		}
		if c.Normalize || len(c.Labels) > 0 || len(c.Dense) > 0 {
			bad("normalize, labels and dense are not for sparse models")
		}
		if c.Gate != nil {
			bad("gate: sparse models have no accuracy gate yet: remove the gate section")
		}
	case TaskClassify:
		if len(c.Labels) < 2 {
			bad("a classify model needs at least two labels")
		}
		if c.Pooling != "" || c.Normalize || len(c.Dense) > 0 {
			bad("pooling and normalize are for embed models (and dense)")
		}
	case TaskRerank:
		// A cross-encoder: one logit per (query, passage) pair, no labels.
		if len(c.Labels) > 0 {
			bad("labels are for classify models: a rerank model has one score, its logit")
		}
		if c.Pooling != "" || c.Normalize || len(c.Dense) > 0 {
			bad("pooling and normalize are for embed models (and dense)")
		}
		if c.Gate != nil {
			bad("gate: rerank models have no accuracy gate yet: remove the gate section")
		}
	default:
		bad("task %q: use embed, sparse, classify or rerank", c.Task)
	}
	if c.Task != TaskEmbed && (len(c.Prompts) > 0 || c.DefaultPrompt != "" || len(c.Dimensions) > 0) {
		bad("prompts, default_prompt and dimensions are for embed models")
	}
	if len(c.Versions) == 0 {
		bad("no versions")
	}
	for name, v := range c.Versions {
		if v.File == "" {
			bad("version %s has no file", name)
		}
		for _, d := range v.Devices {
			if d != "cpu" && d != "cuda" {
				bad("version %s: device %q: use cpu or cuda", name, d)
			}
		}
		if !validLoad(v.Load) {
			bad("version %s: load %q: use eager or lazy", name, v.Load)
		}
	}
	if !validLoad(c.Load) {
		bad("load %q: use eager or lazy", c.Load)
	}
	if _, ok := c.Versions[c.DefaultVersion]; !ok {
		bad("default_version %q is not one of the versions", c.DefaultVersion)
	}
	total := 0
	for name, w := range c.Traffic {
		if _, ok := c.Versions[name]; !ok {
			bad("traffic names version %q, which is not one of the versions", name)
		}
		if w < 0 {
			bad("traffic weight of %s is negative", name)
		}
		total += w
	}
	if len(c.Traffic) > 0 && total == 0 {
		bad("traffic weights add up to 0")
	}
	if c.Instances < 0 || c.Cache.MaxBytes < 0 {
		bad("instances and cache.max_bytes must be ≥ 0")
	}
	b := c.Batching
	if b.MaxBatchSize < 0 || b.MaxBatchTokens < 0 || b.MaxQueueDelay < 0 || b.MaxQueueRequests < 0 || b.MaxQueueTokens < 0 {
		bad("batching values must be ≥ 0 (0 keeps the server's default)")
	}
	if _, err := runtime.ParseSLO(c.SLO); err != nil {
		bad("%v", err)
	}
	if c.Gate != nil {
		errs = append(errs, c.Gate.validate(c)...)
	}
	return errors.Join(errs...)
}

func validLoad(m LoadMode) bool { return m == "" || m == LoadEager || m == LoadLazy }

// validate checks a gate section against the model it belongs to.
func (g *GateConfig) validate(c Config) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("gate: "+format, args...)) }
	if _, ok := c.Versions[g.Baseline]; g.Baseline != "" && !ok {
		bad("baseline %q is not one of the versions", g.Baseline)
	}
	baseline := cmp.Or(g.Baseline, c.DefaultVersion)
	for _, v := range g.Candidates {
		if _, ok := c.Versions[v]; !ok {
			bad("candidate %q is not one of the versions", v)
		} else if v == baseline {
			bad("candidate %q is the baseline", v)
		}
	}
	for from, to := range g.LabelMap {
		if from == "" || to == "" {
			bad("label_map maps %q to %q: both must be non-empty", from, to)
		} else if c.Task == TaskClassify && !slices.Contains(c.Labels, to) {
			bad("label_map maps %q to %q, which is not one of the labels %v", from, to, c.Labels)
		}
	}
	// NaN fails every comparison, so the checks are written to catch it too.
	for _, b := range []struct {
		key string
		v   float64
		max float64
	}{
		{"max_drop", g.MaxDrop, 100},
		{"min_agreement", g.MinAgreement, 1},
		{"min_cosine_mean", g.MinCosineMean, 1},
		{"min_cosine_p1", g.MinCosineP1, 1},
	} {
		if !(b.v >= 0 && b.v <= b.max) {
			bad("%s %v: want 0 to %v", b.key, b.v, b.max)
		}
	}
	switch c.Task {
	case TaskClassify:
		if !(g.MaxDrop > 0) {
			bad("a classify model's gate needs max_drop > 0 (accuracy points a candidate may lose)")
		}
		if g.MinCosineMean != 0 || g.MinCosineP1 != 0 {
			bad("min_cosine_mean and min_cosine_p1 are for embed models")
		}
	case TaskEmbed:
		if !(g.MaxDrop > 0 || g.MinAgreement > 0 || g.MinCosineMean > 0 || g.MinCosineP1 > 0) {
			bad("an embed model's gate needs a budget: min_cosine_mean, min_cosine_p1 or max_drop (nearest-centroid accuracy points)")
		}
		if g.MinAgreement != 0 {
			bad("min_agreement is for classify models")
		}
	}
	return errs
}
