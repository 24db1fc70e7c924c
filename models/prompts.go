package models

// The two embed options a model's own files settle: prompts, texts put before each input
// (sentence-transformers' "query: ", "passage: "...), and Matryoshka dimensions, a vector cut
// to its first values.

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// stPromptConfig is the sentence-transformers file that holds a model's prompts.
const stPromptConfig = "config_sentence_transformers.json"

// stPrompts is what ortserve reads of config_sentence_transformers.json.
type stPrompts struct {
	Prompts           map[string]string `json:"prompts"`
	DefaultPromptName *string           `json:"default_prompt_name"`
}

// addSTPrompts adds the prompts of dir's config_sentence_transformers.json, if it has one,
// to an embed model's config: a prompt or default model.yaml names already is model.yaml's.
// why, when not nil, records where each came from (Inference.Why).
func (c *Config) addSTPrompts(dir string, why func(key, format string, args ...any)) error {
	if c.Task != TaskEmbed {
		return nil
	}
	var st stPrompts
	if err := readJSON(filepath.Join(dir, stPromptConfig), &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	added := false
	for name, text := range st.Prompts {
		if _, ok := c.Prompts[name]; !ok {
			if c.Prompts == nil {
				c.Prompts = map[string]string{}
			}
			c.Prompts[name], added = text, true
		}
	}
	if added && why != nil {
		why("prompts", "%s: %d prompts", stPromptConfig, len(st.Prompts))
	}
	if d := st.DefaultPromptName; c.DefaultPrompt == "" && d != nil && *d != "" {
		c.DefaultPrompt = *d
		if why != nil {
			why("default_prompt", "%s: default_prompt_name", stPromptConfig)
		}
	}
	return nil
}

// OptionError says that a request's embed option does not fit the model. Field is the
// request field at fault ("prompt_name", "dimensions"); Msg says what was wrong and what to
// send instead, in one line.
type OptionError struct {
	Field string
	Msg   string
}

func (e *OptionError) Error() string { return "models: " + e.Msg }

// prompt is the text put before each input for a request that names prompt name: the
// model's prompt of that name; for "", the model's default prompt, else its prompt named
// fallback (the server's default) if it has one, else none.
func (m *Model) prompt(name, fallback string) (string, error) {
	c := m.Config
	if name == "" {
		if c.DefaultPrompt != "" {
			return c.Prompts[c.DefaultPrompt], nil // Validate has checked it is there
		}
		return c.Prompts[fallback], nil // "" when it has none of that name
	}
	if text, ok := c.Prompts[name]; ok {
		return text, nil
	}
	if len(c.Prompts) == 0 {
		return "", &OptionError{Field: "prompt_name", Msg: fmt.Sprintf("prompt_name %q: model %s has no prompts: leave prompt_name out, or put the prompt in the text", name, c.Name)}
	}
	return "", &OptionError{Field: "prompt_name", Msg: fmt.Sprintf("prompt_name %q is not one of model %s's prompts: %s", name, c.Name, strings.Join(slices.Sorted(maps.Keys(c.Prompts)), ", "))}
}

// checkDimensions refuses d (> 0) when the model's vectors, of width values (0: not known
// yet), cannot be cut to it: d over the width, or not one of model.yaml's dimensions.
func (m *Model) checkDimensions(d, width int) error {
	c := m.Config
	switch {
	case width > 0 && d > width:
		return &OptionError{Field: "dimensions", Msg: fmt.Sprintf("dimensions %d is over model %s's %d: give 1 to %d, or leave dimensions out for the whole vector", d, c.Name, width, width)}
	case len(c.Dimensions) > 0 && !slices.Contains(c.Dimensions, d):
		return &OptionError{Field: "dimensions", Msg: fmt.Sprintf("dimensions %d is not one model %s was trained for: give one of %s, or leave dimensions out", d, c.Name, joinInts(c.Dimensions))}
	}
	return nil
}

// shorten cuts each vector to its first d values and, when normalize, scales it back to
// unit length, as a Matryoshka model is read: the first values alone are an embedding. A
// normalized vector cut and normalized again is the raw one cut and normalized, so the
// vectors may come from the response cache, which keeps whole ones.
func shorten(vecs [][]float32, d int, normalize bool) {
	for i, v := range vecs {
		v = v[:d:d]
		if normalize {
			Normalize(v)
		}
		vecs[i] = v
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
