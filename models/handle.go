package models

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/ortserve/ortserve/tokenize"
)

// Handle is a model by name: every call goes to the generation serving at that moment.
// For a model with a traffic split, a call that names no version gets one drawn by weight.
type Handle struct {
	r    *Repository
	name string
}

// Name is the model's name.
func (h Handle) Name() string { return h.name }

// pick resolves the version a call names: "" means the traffic split, or the default.
func pick(m *Model, version string) string {
	if version != "" || len(m.Config.Traffic) == 0 {
		return version
	}
	total := 0
	for _, w := range m.Config.Traffic {
		total += w
	}
	n := rand.IntN(total)
	for _, v := range slices.Sorted(maps.Keys(m.Config.Traffic)) {
		if n -= m.Config.Traffic[v]; n < 0 {
			return v
		}
	}
	return m.Config.DefaultVersion
}

// Embed is Model.Embed on the serving generation.
func (h Handle) Embed(ctx context.Context, version string, texts []string, o EmbedOptions) (vecs [][]float32, st Stats, err error) {
	err = h.r.use(h.name, func(m *Model) error {
		vecs, st, err = m.Embed(ctx, pick(m, version), texts, o)
		return err
	})
	return vecs, st, err
}

// Classify is Model.Classify on the serving generation.
func (h Handle) Classify(ctx context.Context, version string, texts []string, o ClassifyOptions) (scores [][]float32, st Stats, err error) {
	err = h.r.use(h.name, func(m *Model) error {
		scores, st, err = m.Classify(ctx, pick(m, version), texts, o)
		return err
	})
	return scores, st, err
}

// Tokenize is Model.Tokenize on the serving generation.
func (h Handle) Tokenize(texts []string, addSpecial bool) (toks [][]tokenize.Token, err error) {
	err = h.r.use(h.name, func(m *Model) error {
		toks, err = m.Tokenize(texts, addSpecial)
		return err
	})
	return toks, err
}

// Labels are the serving generation's labels.
func (h Handle) Labels() (labels []string) {
	_ = h.r.use(h.name, func(m *Model) error { labels = m.Labels(); return nil }) // removed meanwhile: none
	return labels
}

// Dimension is the serving generation's output dimension.
func (h Handle) Dimension() (dim int) {
	_ = h.r.use(h.name, func(m *Model) error { dim = m.Dimension(); return nil }) // removed meanwhile: 0
	return dim
}
