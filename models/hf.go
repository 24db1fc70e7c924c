package models

// Models without model.yaml. A Hugging Face model folder — config.json and an .onnx file at
// its root or in onnx/, as optimum, sentence-transformers and the hub lay them out — is served
// with a config inferred from its own files, every decision checked against the ONNX graphs
// themselves (runtime/onnx), never trusted from a file name. What cannot be told for sure is
// refused with one line naming the model.yaml key that settles it: a wrong answer is worse
// than none. `server models init DIR` prints the inferred config (Inference.YAML) with the
// reason for each value, for a user to pin as DIR/model.yaml, which always wins.

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ortserve/ortserve/runtime/onnx"
)

// Files of a Hugging Face model folder that inference reads.
const (
	hfConfig          = "config.json"
	hfTokenizer       = "tokenizer.json"
	hfTokenizerConfig = "tokenizer_config.json"
	stModules         = "modules.json"
	stConfig          = "sentence_bert_config.json"
	onnxSubdir        = "onnx"
)

// Graph inputs the runtime feeds (runtime/ort binds them by name; token_type_ids is optional).
const (
	inputIDs      = "input_ids"
	attentionMask = "attention_mask"
	tokenTypeIDs  = "token_type_ids"
)

// LoadConfig reads dir's model.yaml or, when it has none, infers the config of the Hugging
// Face model folder dir is (InferConfig), logging the guesses and the files it skipped.
func LoadConfig(dir string, log *slog.Logger) (Config, error) {
	if _, err := os.Stat(filepath.Join(dir, ConfigFile)); !errors.Is(err, fs.ErrNotExist) {
		return ReadConfig(dir)
	}
	inf, err := InferConfig(dir, InferOptions{})
	if err != nil {
		return Config{}, err
	}
	for _, w := range inf.Warnings {
		log.Warn("model config inferred with a guess: check it, or pin it with `server models init`", "dir", dir, "note", w)
	}
	for _, s := range inf.Skipped {
		log.Warn("model file not served", "dir", dir, "why", s)
	}
	log.Info("model config inferred (no model.yaml)", "dir", dir, "model", inf.Config.Name, "task", inf.Config.Task, "output", inf.Config.Output, "pooling", inf.Config.Pooling, "max_length", inf.Config.MaxLength)
	return inf.Config, nil
}

// IsModelDir reports whether dir is a model folder: one with a model.yaml, or a Hugging Face
// model folder (IsHFDir).
func IsModelDir(dir string) bool {
	return isFile(filepath.Join(dir, ConfigFile)) || IsHFDir(dir)
}

// IsHFDir reports whether dir looks like a Hugging Face model folder: config.json and an
// .onnx file at its root or in onnx/ — itself or, for a hub cache folder
// (models--org--name), the snapshot it serves (HubSnapshot).
func IsHFDir(dir string) bool {
	base, _, err := HubSnapshot(dir)
	if err != nil || !isFile(filepath.Join(base, hfConfig)) {
		return false
	}
	files, _ := onnxFiles(base)
	return len(files) > 0
}

// InferOptions settle what inference cannot tell from a folder.
type InferOptions struct {
	// Output names the graph output to read, when several could be it.
	Output string
}

// Inference is a config inferred for a folder without model.yaml, with the reason for each
// of its values.
type Inference struct {
	Dir    string // the folder, as given
	Config Config // its paths are relative to Dir
	// Why says, per model.yaml key ("task", "max_length", "versions.int8", ...), what decided
	// its value and where that came from.
	Why map[string]string
	// Skipped are the .onnx files not served, each "file: why".
	Skipped []string
	// Warnings are the decisions to check: guesses, and files named for what they are not.
	Warnings []string
}

func (inf *Inference) because(key, format string, args ...any) {
	inf.Why[key] = fmt.Sprintf(format, args...)
}

// InferError says why a folder's config cannot be inferred for sure: what is missing or
// unclear, and the model.yaml key that settles it. It is one line.
type InferError struct {
	Dir    string
	Reason string
}

func (e *InferError) Error() string { return "models: " + e.Dir + ": " + e.Reason }

// hfModelConfig is what inference reads of config.json.
type hfModelConfig struct {
	Architectures []string          `json:"architectures"`
	ModelType     string            `json:"model_type"`
	ID2Label      map[string]string `json:"id2label"`
	NumLabels     int               `json:"num_labels"`
	HiddenSize    int               `json:"hidden_size"`
	Dim           int               `json:"dim"`     // DistilBERT's hidden size
	DModel        int               `json:"d_model"` // T5's and others'
	MaxPositions  int               `json:"max_position_embeddings"`
	VocabSize     int               `json:"vocab_size"`
	PadTokenID    *int              `json:"pad_token_id"`
}

func (c hfModelConfig) hidden() int { return cmp.Or(c.HiddenSize, c.Dim, c.DModel) }

// stModule is one entry of a sentence-transformers modules.json.
type stModule struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

// kind is the last part of a module's type: Transformer, Pooling, Normalize, Dense, ...
func (m stModule) kind() string { return m.Type[strings.LastIndex(m.Type, ".")+1:] }

// candidate is one .onnx file of the folder.
type candidate struct {
	rel     string // relative to the folder inferred from (a hub snapshot's own folder)
	info    onnx.ModelInfo
	kind    string // by the graph: fp32, fp16, int8, int4
	claim   string // by the name: fp32, fp16, int8, int4, or "" when it says none
	problem string // why it cannot be served; "" if it can
}

// InferConfig infers the config of the Hugging Face model folder dir (IsHFDir): task,
// tokenizer, max length, output, pooling, normalization, labels and versions, each checked
// against the files and graphs; docs/models.md lists the rules. It ignores any model.yaml in
// dir. A folder it cannot read for sure is refused with one line that names the model.yaml
// key that settles it.
func InferConfig(dir string, o InferOptions) (*Inference, error) {
	fail := func(format string, args ...any) error {
		return &InferError{Dir: dir, Reason: fmt.Sprintf(format, args...)}
	}
	inf := &Inference{Dir: dir, Why: map[string]string{}}
	base, hubWhy, err := HubSnapshot(dir)
	if err != nil {
		return nil, err
	}
	prefix, _ := filepath.Rel(dir, base)
	rel := func(p string) string { return filepath.ToSlash(filepath.Join(prefix, p)) }
	inSnapshot := "" // where a hub cache folder's files are, for the reasons
	if hubWhy != "" {
		inSnapshot = " in " + filepath.ToSlash(prefix) + " (" + hubWhy + ")"
	}

	var hc hfModelConfig
	if err := readJSON(filepath.Join(base, hfConfig), &hc); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fail("no %s and no config.json: write a %s (docs/models.md), or give a Hugging Face model folder", ConfigFile, ConfigFile)
		}
		return nil, fail("%v", err)
	}
	c := &inf.Config
	var nameWhy string
	c.Name, nameWhy = inferName(dir)
	inf.because("name", "%s", nameWhy)

	if !isFile(filepath.Join(base, hfTokenizer)) {
		return nil, fail("no %s: ortserve tokenizes with a fast tokenizer's tokenizer.json: save it next to config.json (AutoTokenizer.from_pretrained(...).save_pretrained(DIR))", hfTokenizer)
	}
	c.Tokenizer = rel(hfTokenizer)
	inf.because("tokenizer", "the fast tokenizer's file%s", inSnapshot)

	var modules []stModule
	st := false
	if err := readJSON(filepath.Join(base, stModules), &modules); err == nil {
		st = true
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fail("%v", err)
	}

	// The graphs: read them all, keep those whose inputs the runtime can feed.
	files, err := onnxFiles(base)
	if err != nil {
		return nil, fail("%v", err)
	}
	if len(files) == 0 {
		return nil, fail("no .onnx file at its root or in onnx/: export the model to ONNX (optimum-cli export onnx --model ... DIR) or write a %s", ConfigFile)
	}
	var cands []*candidate
	for _, f := range files {
		cd := &candidate{rel: f, claim: claimByName(f)}
		info, err := onnx.ReadModel(filepath.Join(base, f))
		if err != nil {
			cd.problem = "not an ONNX model ortserve can read"
		} else {
			cd.info, cd.kind, cd.problem = info, kindByGraph(info), inputProblem(info)
		}
		cands = append(cands, cd)
	}
	ref := preferred(cands)
	if ref == nil {
		var why []string
		for _, cd := range cands {
			why = append(why, cd.rel+": "+cd.problem)
		}
		return nil, fail("no .onnx file ortserve can serve: %s", strings.Join(why, "; "))
	}

	// The task and the output, from config.json, modules.json and the reference graph.
	outs := ref.info.Outputs
	if o.Output != "" {
		i := slices.IndexFunc(outs, func(v onnx.IOInfo) bool { return v.Name == o.Output })
		if i < 0 {
			return nil, fail("%s has no output %q (it has %s)", ref.rel, o.Output, describe(outs))
		}
		if outs[i].Type != "float32" {
			return nil, fail("%s output %q is %s: ortserve reads float32 outputs", ref.rel, o.Output, outs[i].Type)
		}
	}
	classifier := ""
	for _, a := range hc.Architectures {
		if strings.HasSuffix(a, "ForSequenceClassification") {
			classifier = a
		}
	}
	// sentence-transformers loads a classifier's encoder without its head: a folder with
	// modules.json is an embedder when its graph has token embeddings.
	tokens := slices.ContainsFunc(outs, func(v onnx.IOInfo) bool { return v.Type == "float32" && len(v.Shape) == 3 && v.Name != "logits" })
	splade := slices.ContainsFunc(modules, func(m stModule) bool { return m.kind() == "SpladePooling" })
	switch {
	case splade:
		if err := inferSparse(inf, base, hc, modules, ref, o); err != nil {
			return nil, fail("%v", err)
		}
	case classifier != "" && !(st && tokens):
		if err := inferClassify(inf, hc, classifier, ref, o); err != nil {
			return nil, fail("%v", err)
		}
	default:
		if err := inferEmbed(inf, base, hc, modules, st, ref, o); err != nil {
			return nil, fail("%v", err)
		}
		for i, d := range c.Dense {
			c.Dense[i] = rel(d)
		}
	}
	out := outs[slices.IndexFunc(outs, func(v onnx.IOInfo) bool { return v.Name == c.Output })]
	if err := c.addSTPrompts(base, inf.because); err != nil {
		return nil, fail("%v", err)
	}

	if err := inferMaxLength(inf, base, hc); err != nil {
		return nil, fail("%v", err)
	}

	// Versions: every usable file whose graph has the same output; named by what its graph
	// is, the reference first so that it gets the plain name.
	c.Versions = map[string]VersionConfig{}
	// The shortest names first: model_quantized.onnx is int8 before model_qint8_avx2.onnx.
	others := slices.DeleteFunc(slices.Clone(cands), func(cd *candidate) bool { return cd == ref })
	slices.SortStableFunc(others, func(a, b *candidate) int { return cmp.Compare(len(baseName(a.rel)), len(baseName(b.rel))) })
	order := append([]*candidate{ref}, others...)
	for _, cd := range order {
		if cd.problem == "" && cd != ref {
			cd.problem = outputProblem(cd.info, out)
		}
		if cd.problem != "" {
			inf.Skipped = append(inf.Skipped, cd.rel+": "+cd.problem)
			continue
		}
		name := versionName(cd, c.Versions)
		c.Versions[name] = VersionConfig{File: rel(cd.rel)}
		inf.because("versions."+name, "%s", cd.describe())
		if cd.claim != "" && cd.claim != cd.kind {
			inf.Warnings = append(inf.Warnings, fmt.Sprintf("%s is named as %s but its graph is %s (%s): served as version %s", cd.rel, cd.claim, cd.kind, cd.describe(), name))
		}
		if cd == ref {
			c.DefaultVersion = name
			switch {
			case baseName(cd.rel) == "model.onnx":
				inf.because("default_version", "%s, the model's plain export", cd.rel)
			default:
				inf.because("default_version", "%s: no usable model.onnx; the %s graph preferred", cd.rel, cd.kind)
			}
		}
	}
	if err := c.Validate(); err != nil {
		return nil, fail("the inferred config is not valid (%s): write a %s", strings.ReplaceAll(err.Error(), "\n", "; "), ConfigFile)
	}
	return inf, nil
}

// baseName is a file's name without its folder.
func baseName(rel string) string { return filepath.Base(rel) }

// inferClassify fills a sequence classifier's task, labels and output: classify with the
// labels of config.json's id2label, or rerank for one label (a cross-encoder's score).
func inferClassify(inf *Inference, hc hfModelConfig, arch string, ref *candidate, o InferOptions) error {
	c := &inf.Config
	labels, err := idLabels(hc.ID2Label)
	if err != nil {
		return err
	}
	n := cmp.Or(len(labels), hc.NumLabels)
	var cands []onnx.IOInfo
	for _, v := range ref.info.Outputs {
		if v.Type == "float32" && len(v.Shape) == 2 {
			cands = append(cands, v)
		}
	}
	var out onnx.IOInfo
	switch i := slices.IndexFunc(cands, func(v onnx.IOInfo) bool { return v.Name == "logits" }); {
	case o.Output != "":
		j := slices.IndexFunc(ref.info.Outputs, func(v onnx.IOInfo) bool { return v.Name == o.Output })
		out = ref.info.Outputs[j]
		if len(out.Shape) != 2 {
			return fmt.Errorf("output %q has shape %s: a classifier's logits are [batch, labels]", out.Name, onnx.ShapeString(out.Shape))
		}
		inf.because("output", "given (--output)")
	case i >= 0:
		out = cands[i]
		inf.because("output", "%s: float32 %s, by name", ref.rel, onnx.ShapeString(out.Shape))
	case len(cands) == 1:
		out = cands[0]
		inf.because("output", "%s: the only float32 [batch, n] output, %s", ref.rel, onnx.ShapeString(out.Shape))
	case len(cands) == 0:
		return fmt.Errorf("config.json says %s, but %s has no logits output [batch, labels] (it has %s): export it with its head (optimum-cli export onnx --task text-classification) or write a %s", arch, ref.rel, describe(ref.info.Outputs), ConfigFile)
	default:
		return fmt.Errorf("cannot tell which output of %s holds the logits: %s: set output: in %s to one of them (server models init --output NAME DIR writes the rest)", ref.rel, describe(cands), ConfigFile)
	}
	c.Output = out.Name
	if cols := out.Shape[1]; cols.Fixed() {
		if n == 0 {
			n = int(cols.Value)
		} else if int(cols.Value) != n {
			return fmt.Errorf("output %q has %d columns, but config.json has %d labels: set labels: and output: in %s", out.Name, cols.Value, n, ConfigFile)
		}
	}
	hasTypes := slices.ContainsFunc(ref.info.Inputs, func(v onnx.IOInfo) bool { return v.Name == tokenTypeIDs })
	switch n {
	case 0:
		return fmt.Errorf("config.json says %s but names no labels (id2label) and %q has a dynamic width: set labels: in %s", arch, out.Name, ConfigFile)
	case 1:
		c.Task = TaskRerank
		pairs := "the pair told apart by token_type_ids"
		if !hasTypes {
			pairs = "no token_type_ids input: the pair is told apart by separator tokens alone, as RoBERTa-style cross-encoders do"
		}
		inf.because("task", "config.json: %s with one label: a cross-encoder's score (%s)", arch, pairs)
	default:
		c.Task = TaskClassify
		inf.because("task", "config.json: %s", arch)
		if len(labels) == 0 {
			labels = make([]string, n)
			for i := range labels {
				labels[i] = "LABEL_" + strconv.Itoa(i)
			}
			inf.because("labels", "config.json has no id2label: %d labels named as transformers names them", n)
		} else {
			inf.because("labels", "config.json id2label, in id order")
		}
		c.Labels = labels
	}
	return nil
}

// idLabels orders id2label's names by id; the ids must be 0 to n-1.
func idLabels(id2label map[string]string) ([]string, error) {
	labels := make([]string, len(id2label))
	for k, v := range id2label {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || i >= len(labels) || labels[i] != "" || v == "" {
			return nil, fmt.Errorf("config.json id2label %v: want ids 0 to %d, each with a name: set labels: in %s", id2label, len(id2label)-1, ConfigFile)
		}
		labels[i] = v
	}
	return labels, nil
}

// positionOffset are the model types whose position ids start past the padding id, so that
// max_position_embeddings counts pad_token_id + 1 positions no text can use.
var positionOffset = map[string]bool{
	"roberta": true, "xlm-roberta": true, "xlm-roberta-xl": true, "camembert": true,
	"mpnet": true, "longformer": true, "data2vec-text": true,
}

// inferMaxLength sets max_length: sentence_bert_config.json's max_seq_length, else
// tokenizer_config.json's model_max_length (not its 1e30 "no limit"), else the positions
// config.json gives; never more than the positions.
func inferMaxLength(inf *Inference, base string, hc hfModelConfig) error {
	c := &inf.Config
	positions := hc.MaxPositions
	if pad := cmp.Or(deref(hc.PadTokenID), 1); positions > 0 && positionOffset[hc.ModelType] && pad >= 0 && pad < positions {
		positions -= pad + 1
	}
	var sc struct {
		MaxSeqLength int `json:"max_seq_length"`
	}
	var tc struct {
		ModelMaxLength json.Number `json:"model_max_length"`
	}
	switch {
	case readJSON(filepath.Join(base, stConfig), &sc) == nil && sc.MaxSeqLength > 0:
		c.MaxLength = sc.MaxSeqLength
		inf.because("max_length", "%s: max_seq_length", stConfig)
	case readJSON(filepath.Join(base, hfTokenizerConfig), &tc) == nil && validLength(tc.ModelMaxLength):
		f, _ := tc.ModelMaxLength.Float64()
		c.MaxLength = int(f)
		inf.because("max_length", "%s: model_max_length", hfTokenizerConfig)
	case positions > 0:
		c.MaxLength = positions
		inf.because("max_length", "config.json: max_position_embeddings")
		if positions != hc.MaxPositions {
			inf.because("max_length", "config.json: max_position_embeddings %d less the %d positions %s keeps for padding", hc.MaxPositions, hc.MaxPositions-positions, hc.ModelType)
		}
		return nil
	default:
		return fmt.Errorf("cannot tell the longest input: no %s max_seq_length, %s model_max_length or config.json max_position_embeddings: set max_length: in %s", stConfig, hfTokenizerConfig, ConfigFile)
	}
	if positions > 0 && c.MaxLength > positions {
		inf.because("max_length", "%s, cut to the %d positions of config.json's max_position_embeddings", inf.Why["max_length"], positions)
		c.MaxLength = positions
	}
	return nil
}

func validLength(n json.Number) bool {
	f, err := n.Float64()
	return err == nil && f >= 2 && f < 1e9 // transformers writes int(1e30) for "no limit"
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func isDir(p string) bool {
	fi, err := os.Stat(p) //nolint:gosec // G703: the operator's model folders; HubSnapshot keeps the name read from refs/main to a plain one
	return err == nil && fi.IsDir()
}
