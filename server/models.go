package server

import (
	"context"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/tokenize"
)

// Pipeline is what the server needs of one model.
type Pipeline interface {
	Embed(ctx context.Context, version string, texts []string, o models.EmbedOptions) ([][]float32, models.Stats, error)
	Classify(ctx context.Context, version string, texts []string, o models.ClassifyOptions) ([][]float32, models.Stats, error)
	Labels() []string
	// Tokenize returns each text's tokens for display (/tokenize); the slices are the caller's.
	Tokenize(texts []string, addSpecial bool) ([][]tokenize.Token, error)
}

// Repository is what the server needs of the model repository.
type Repository interface {
	// Lookup finds a model by name; "" means the first model that does task.
	Lookup(name string, task models.Task) (Pipeline, string, error)
	Describe() []ModelInfo
}

// FromModels adapts a loaded model repository.
func FromModels(r *models.Repository) Repository { return repo{r} }

type repo struct{ r *models.Repository }

func (r repo) Lookup(name string, task models.Task) (Pipeline, string, error) {
	if name == "" {
		h, ok := r.r.First(task)
		if !ok {
			return nil, "", &models.UnknownError{Kind: models.ErrUnknownModel, Name: "(any " + string(task) + " model)", Known: r.r.Names()}
		}
		return h, h.Name(), nil
	}
	h, err := r.r.Handle(name)
	if err != nil {
		return nil, "", err
	}
	return h, h.Name(), nil
}

func (r repo) Describe() []ModelInfo {
	var out []ModelInfo
	for _, st := range r.r.Status() {
		c := st.Config
		out = append(out, ModelInfo{
			Name: c.Name, Task: string(c.Task), MaxLength: c.MaxLength,
			Versions: st.Versions, DefaultVersion: c.DefaultVersion, Traffic: c.Traffic,
			Pooling: string(c.Pooling), Labels: c.Labels, Dimension: st.Dimension,
			Reloads: st.Reloads, ReloadError: st.ReloadError, Scheduling: st.Scheduling,
		})
	}
	return out
}
