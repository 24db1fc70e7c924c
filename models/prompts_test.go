package models_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/models"
)

// promptedYAML is embedYAML with prompts of its own; the folder's
// config_sentence_transformers.json (stPromptsJSON) adds more and names the default.
const promptedYAML = embedYAML + `prompts: {q: "q:", e: ""}
`

const stPromptsJSON = `{"prompts": {"q": "from st", "d": "d:"}, "default_prompt_name": "d", "similarity_fn_name": "cosine"}`

// openEmbed opens an embed model of hidden size 4 from yaml, with the folder's other files.
func openEmbed(t *testing.T, yaml string, files map[string]string) *models.Model {
	t.Helper()
	dir := writeModel(t, t.TempDir(), "emb", yaml)
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := models.Open(dir, &fakeBackend{device: "cpu", hidden: 4}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// A prompt is its text put before each input: the vector is that of the joined text on a
// model without prompts. model.yaml's prompts win over config_sentence_transformers.json's,
// whose default_prompt_name is the default; the server's fallback counts only on a model
// with no default and a prompt of that name.
func TestPrompts(t *testing.T) {
	plain := openEmbed(t, embedYAML, nil)
	st := map[string]string{"config_sentence_transformers.json": stPromptsJSON}
	prompted := openEmbed(t, promptedYAML, st)
	noDefault := openEmbed(t, promptedYAML, nil)
	tests := []struct {
		name             string
		m                *models.Model
		prompt, fallback string
		want             string // the prompt text expected before the input
		err              string
	}{
		{"model.yaml's prompt wins", prompted, "q", "", "q:", ""},
		{"config_sentence_transformers.json's own", prompted, "d", "", "d:", ""},
		{"an empty prompt", prompted, "e", "", "", ""},
		{"config_sentence_transformers.json's default", prompted, "", "q", "d:", ""},
		{"the server's fallback", noDefault, "", "q", "q:", ""},
		{"a fallback the model lacks", noDefault, "", "nosuch", "", ""},
		{"no prompt", noDefault, "", "", "", ""},
		{"unknown", prompted, "z", "", "", `prompt_name "z" is not one of model emb's prompts: d, e, q`},
		{"a model without prompts", plain, "q", "", "", `prompt_name "q": model emb has no prompts`},
	}
	texts := []string{"ab", ""}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := tt.m.Embed(t.Context(), "", texts, models.EmbedOptions{Truncate: true, Prompt: tt.prompt, FallbackPrompt: tt.fallback})
			var oe *models.OptionError
			if tt.err != "" {
				if !errors.As(err, &oe) || oe.Field != "prompt_name" || !strings.Contains(oe.Msg, tt.err) {
					t.Fatalf("error %v, want prompt_name: %s", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want, _, _ := plain.Embed(t.Context(), "", []string{tt.want + texts[0], tt.want + texts[1]}, models.EmbedOptions{Truncate: true})
			for i := range texts {
				if !slices.Equal(got[i], want[i]) {
					t.Errorf("text %q: %v, want %v (%q before it)", texts[i], got[i], want[i], tt.want)
				}
			}
		})
	}
}

// The response cache keys on the text tokenized, prompt included: a prompted and an
// unprompted request for one text never share an entry. Truncation cuts the joined text.
func TestPromptCacheAndTruncation(t *testing.T) {
	m := openEmbed(t, withCache(promptedYAML, 1<<20), nil)
	embed := func(prompt string) ([]float32, models.Stats) {
		t.Helper()
		v, st, err := m.Embed(t.Context(), "", []string{"ab"}, models.EmbedOptions{Truncate: true, Prompt: prompt})
		if err != nil {
			t.Fatal(err)
		}
		return v[0], st
	}
	bare, st1 := embed("")
	withQ, st2 := embed("q")
	_, st3 := embed("q")
	if st1.CacheMisses != 1 || st2.CacheMisses != 1 || st3.CacheHits != 1 || slices.Equal(bare, withQ) {
		t.Errorf("misses %d, %d then hits %d; vectors %v and %v", st1.CacheMisses, st2.CacheMisses, st3.CacheHits, bare, withQ)
	}
	// max_length 8: the prompt "q:" and a long text are cut together, at the text's end.
	_, st, err := m.Embed(t.Context(), "", []string{"far too long text"}, models.EmbedOptions{Truncate: true, Prompt: "q"})
	if err != nil || st.Truncated != 1 || st.Tokens != 8 {
		t.Errorf("truncate: %v %+v", err, st)
	}
	if _, _, err := m.Embed(t.Context(), "", []string{"abcdef"}, models.EmbedOptions{Prompt: "q"}); err == nil {
		t.Errorf("without truncate, a text that fits alone but not with its prompt was served")
	}
}

// dimensions cuts each vector to its first values and normalizes them again (when
// normalize): the same as cutting the raw vector, from the cache or not. Out of range, or
// not one of model.yaml's dimensions, it is refused.
func TestDimensions(t *testing.T) {
	m := openEmbed(t, withCache(embedYAML, 1<<20), nil)
	listed := openEmbed(t, embedYAML+"dimensions: [2, 4]\n", nil)
	raw, _, err := m.Embed(t.Context(), "", []string{"ab"}, models.EmbedOptions{Truncate: true})
	if err != nil || len(raw[0]) != 4 {
		t.Fatalf("%v %v", raw, err)
	}
	cut := slices.Clone(raw[0][:2])
	models.Normalize(cut)
	tests := []struct {
		name      string
		m         *models.Model
		d         int
		normalize bool
		want      []float32
		err       string
	}{
		{"cut and normalized", m, 2, true, cut, ""},
		{"again, from the cache", m, 2, true, cut, ""},
		{"cut, not normalized", m, 2, false, raw[0][:2], ""},
		{"the whole width", m, 4, false, raw[0], ""},
		{"over the width", m, 5, true, nil, "dimensions 5 is over model emb's 4: give 1 to 4"},
		{"listed", listed, 2, true, cut, ""},
		{"not listed", listed, 3, true, nil, "dimensions 3 is not one model emb was trained for: give one of 2, 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := tt.m.Embed(t.Context(), "", []string{"ab"}, models.EmbedOptions{Truncate: true, Normalize: tt.normalize, Dimensions: tt.d})
			var oe *models.OptionError
			switch {
			case tt.err != "":
				if !errors.As(err, &oe) || oe.Field != "dimensions" || !strings.Contains(oe.Msg, tt.err) {
					t.Errorf("error %v, want dimensions: %s", err, tt.err)
				}
			case err != nil:
				t.Fatal(err)
			case !slices.Equal(got[0], tt.want):
				t.Errorf("%v, want %v", got[0], tt.want)
			}
		})
	}
}

// Prompts, a default and dimensions are checked with the rest of a config.
func TestPromptConfig(t *testing.T) {
	tests := []struct {
		name, yaml string
		st         string // config_sentence_transformers.json; "": none
		err        string // "": loads
	}{
		{"default from model.yaml", promptedYAML + "default_prompt: q\n", "", ""},
		{"default naming the other file's prompt", promptedYAML + "default_prompt: d\n", stPromptsJSON, ""},
		{"default unknown", promptedYAML + "default_prompt: z\n", "", `default_prompt "z" is not one of the prompts (e, q)`},
		{"prompts on a classifier", classifyYAML + "prompts: {q: x}\n", "", "prompts, default_prompt and dimensions are for embed models"},
		{"dimensions 0", embedYAML + "dimensions: [0, 2]\n", "", "dimensions [0 2]: each must be at least 1"},
		{"dimensions over the width", embedYAML + "dimensions: [2, 8]\n", "", "dimensions [2 8]: the vectors have 4 values"},
		{"a bad sentence-transformers file", embedYAML, `{"prompts": 1}`, "config_sentence_transformers.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeModel(t, t.TempDir(), "m", tt.yaml)
			if tt.st != "" {
				if err := os.WriteFile(filepath.Join(dir, "config_sentence_transformers.json"), []byte(tt.st), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			m, err := models.Open(dir, &fakeBackend{device: "cpu", hidden: 4, classify: strings.Contains(tt.yaml, "classify")}, slog.New(slog.DiscardHandler))
			if err == nil {
				m.Close()
			}
			if (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("error %v, want %q", err, tt.err)
			}
		})
	}
}

// `server models init` shows the prompts of a Hugging Face folder's
// config_sentence_transformers.json, and its default, where they came from beside them.
func TestInferPrompts(t *testing.T) {
	dir := writeFolder(t, filepath.Join(t.TempDir(), "e5"), stFolder.with(folder{"config_sentence_transformers.json": []byte(stPromptsJSON)}))
	inf, err := models.InferConfig(dir, models.InferOptions{})
	if err != nil {
		t.Fatal(err)
	}
	yaml := string(inf.YAML())
	for _, want := range []string{
		"prompts: {d: 'd:', q: from st}             # config_sentence_transformers.json: 2 prompts\n",
		"default_prompt: d                          # config_sentence_transformers.json: default_prompt_name\n",
	} {
		if !strings.Contains(yaml, want) {
			t.Errorf("no %q in\n%s", want, yaml)
		}
	}
	c, err := models.ParseConfig(inf.YAML())
	if err != nil || c.Prompts["d"] != "d:" || c.DefaultPrompt != "d" {
		t.Errorf("the printed model.yaml reads back as %v, %q: %v", c.Prompts, c.DefaultPrompt, err)
	}
}
