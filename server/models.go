package server

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/tokenize"
)

// Pipeline is what the server needs of one model.
type Pipeline interface {
	Embed(ctx context.Context, version string, texts []string, o models.EmbedOptions) ([][]float32, models.Stats, error)
	// Classify's Stats.Labels name the scores' columns: they come from the same model
	// generation as the scores, whatever reload happens meanwhile.
	Classify(ctx context.Context, version string, texts []string, o models.ClassifyOptions) ([][]float32, models.Stats, error)
	// ClassifyPairs is Classify for inputs of which any may be a pair of texts (/predict's
	// [["premise", "hypothesis"]]).
	ClassifyPairs(ctx context.Context, version string, inputs []models.Input, o models.ClassifyOptions) ([][]float32, models.Stats, error)
	// EmbedSparse returns each text's non-zero SPLADE weights by ascending vocabulary index;
	// a model that is not a sparse one answers a *models.WrongTaskError.
	EmbedSparse(ctx context.Context, version string, texts []string, o models.EmbedOptions) ([][]models.SparseValue, models.Stats, error)
	// Rerank scores each text against query (a cross-encoder), in texts' order.
	Rerank(ctx context.Context, version, query string, texts []string, o models.RerankOptions) ([]float32, models.Stats, error)
	// EmbedAll is Embed before pooling: per text, one vector per token (/embed_all). A model
	// whose output is already pooled fails with a *models.PooledOnlyError.
	EmbedAll(ctx context.Context, version string, texts []string, o models.EmbedOptions) ([][][]float32, models.Stats, error)
	// Decode turns lists of token ids back into texts with the model's tokenizer (/decode).
	Decode(ids [][]int64, skipSpecial bool) ([]string, error)
	// Dimension is the length of Embed's vectors (0: unknown).
	Dimension() int
	// Tokenize returns each text's tokens for display (/tokenize); the slices are the caller's.
	Tokenize(texts []string, addSpecial bool) ([][]tokenize.Token, error)
	// WithPrompt returns texts with the prompt o names (or the model's default) before each,
	// as Embed tokenizes them; a prompt the model does not have is a *models.OptionError.
	WithPrompt(texts []string, o models.EmbedOptions) ([]string, error)
}

// Repository is what the server needs of the model repository.
type Repository interface {
	// Acquire finds a model by name ("" means the first model that does task) and holds
	// the generation now serving for one request: everything the request does with p
	// goes to that generation, whatever reload happens meanwhile. model is its name. The
	// caller must call release once done with p (a reload closes the generation it
	// replaced only after that); calls after the first do nothing.
	Acquire(name string, task models.Task) (p Pipeline, model string, release func(), err error)
	// Model describes one model as it serves now, without its scheduling state; an
	// unknown name is a *models.UnknownError.
	Model(name string) (ModelInfo, error)
	// Describe describes every model as it serves now, for /info.
	Describe() []ModelInfo
}

// FromModels adapts a loaded model repository.
func FromModels(r *models.Repository) Repository { return repo{r} }

type repo struct{ r *models.Repository }

// A model generation is what a request runs on.
var _ Pipeline = (*models.Model)(nil)

func (r repo) Acquire(name string, task models.Task) (Pipeline, string, func(), error) {
	var (
		m       *models.Model
		release func()
		err     error
	)
	if name == "" {
		m, release, err = r.r.AcquireFirst(task)
	} else {
		m, release, err = r.r.Acquire(name)
	}
	if err != nil {
		return nil, "", nil, err
	}
	return m, m.Name(), release, nil
}

func (r repo) Model(name string) (ModelInfo, error) {
	st, err := r.r.StatusOf(name)
	if err != nil {
		return ModelInfo{}, err
	}
	return r.info(st), nil
}

func (r repo) Describe() []ModelInfo {
	var out []ModelInfo
	for _, st := range r.r.Status() {
		out = append(out, r.info(st))
	}
	return out
}

// info is what /info says of a model. A reload error names files by their place in the
// repository, never by absolute path: /info is for clients, who have no business knowing
// the server's filesystem.
func (r repo) info(st models.Status) ModelInfo {
	c := st.Config
	return ModelInfo{
		Name: c.Name, Task: string(c.Task), MaxLength: c.MaxLength,
		Versions: st.Versions, DefaultVersion: c.DefaultVersion, Traffic: c.Traffic,
		Pooling: string(c.Pooling), Labels: c.Labels, Dimension: st.Dimension,
		Reloads: st.Reloads, ReloadError: redactPaths(st.ReloadError, r.r.Root), Scheduling: st.Scheduling,
		VersionStates: r.states(st.VersionStates),
	}
}

// states are the versions' states, their load errors' paths redacted as a reload error's are.
func (r repo) states(in map[string]models.VersionState) map[string]models.VersionState {
	for name, st := range in {
		st.Error = redactPaths(st.Error, r.r.Root)
		in[name] = st
	}
	return in
}

// absPath is an absolute path in a message: a '/' at the start or after a space, quote,
// parenthesis, '=' or ':', up to the next such delimiter.
var absPath = regexp.MustCompile(`(^|[\s"'(=:])(/[^\s"'()]+)`)

// redactPaths rewrites the absolute paths in msg: those under root (as given, or with its
// links resolved) relative to it, any other to its last element.
func redactPaths(msg, root string) string {
	if msg == "" {
		return msg
	}
	roots := []string{filepath.Clean(root)}
	if resolved, err := filepath.EvalSymlinks(root); err == nil && resolved != roots[0] {
		roots = append(roots, resolved)
	}
	return absPath.ReplaceAllStringFunc(msg, func(m string) string {
		lead, path := "", m
		if m[0] != '/' {
			lead, path = m[:1], m[1:]
		}
		for _, r := range roots {
			if rel, err := filepath.Rel(r, path); err == nil && !strings.HasPrefix(rel, "..") {
				return lead + rel
			}
		}
		return lead + filepath.Base(path)
	})
}
