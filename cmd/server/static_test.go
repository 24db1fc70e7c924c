//go:build cgo && ort

package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/bench/offline"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/tokenize"
)

// mixedTexts are texts of very different lengths (2 to ~110 tokens), so that in one batch most
// are padded to the longest.
var mixedTexts = []string{
	"ok",
	positiveReview,
	"the plot is thin , but the performances carry it .",
	strings.Repeat("a slow , careful film that rewards patience with a quiet and moving final act . ", 6),
	negativeReview,
	"bad",
	"an uneven but often funny comedy about two brothers and a stolen car .",
}

// invariance is how far texts' answers moved between each text alone and all of them in one
// request or batch: the lowest cosine (embed) and the largest |Δp| of any class (classify).
type invariance struct {
	minCos, maxDP float64
}

func (v invariance) text(task models.Task) string {
	if task == models.TaskEmbed {
		return fmt.Sprintf("min cosine %.7f", v.minCos)
	}
	return fmt.Sprintf("max |Δp| %.2g", v.maxDP)
}

func (v *invariance) add(task models.Task, alone, batched []float32) {
	if task == models.TaskEmbed {
		v.minCos = min(v.minCos, cosine(alone, batched))
		return
	}
	for j := range alone {
		v.maxDP = max(v.maxDP, math.Abs(float64(alone[j])-float64(batched[j])))
	}
}

// The int8-static versions answer a text the same alone as in a batch of mixed-length texts:
// embeddings within cosine 0.9999, probabilities within 1e-4. Checked through the server (a
// request with several inputs against one input each) and, since the batcher decides how a
// request's rows are batched, on one padded batch run on a session directly. Dynamic int8,
// which scales its activations per batch, is the control: on that same batch it moves further.
func TestStaticInt8BatchInvariant(t *testing.T) {
	t.Parallel()
	url := sharedServer(t)
	for _, tc := range []struct {
		model string
		task  models.Task
	}{{"minilm", models.TaskEmbed}, {"sentiment", models.TaskClassify}} {
		t.Run(tc.model+"/served", func(t *testing.T) {
			batched := answersOf(t, url, tc.model, "int8-static", mixedTexts)
			got := invariance{minCos: 1}
			for i, text := range mixedTexts {
				got.add(tc.task, answersOf(t, url, tc.model, "int8-static", []string{text})[0], batched[i])
			}
			t.Logf("%s/int8-static alone vs in one request: %s", tc.model, got.text(tc.task))
			if got.minCos < 0.9999 || got.maxDP > 1e-4 {
				t.Errorf("%s/int8-static alone vs in one request: min cosine %.7f (want ≥ 0.9999), max |Δp| %.2g (want ≤ 1e-4)", tc.model, got.minCos, got.maxDP)
			}
		})
		t.Run(tc.model+"/one padded batch", func(t *testing.T) {
			static := sessionInvariance(t, tc.model, tc.task, "int8-static")
			dynamic := sessionInvariance(t, tc.model, tc.task, "int8")
			t.Logf("%s alone vs in one padded batch on one session: int8-static %s, int8 %s", tc.model, static.text(tc.task), dynamic.text(tc.task))
			if static.minCos < 0.9999 || static.maxDP > 1e-4 {
				t.Errorf("int8-static alone vs in one padded batch: min cosine %.7f (want ≥ 0.9999), max |Δp| %.2g (want ≤ 1e-4)", static.minCos, static.maxDP)
			}
			// The control: were the batch not mixing anything, dynamic int8 would not move either.
			if tc.task == models.TaskEmbed && dynamic.minCos >= static.minCos || tc.task == models.TaskClassify && dynamic.maxDP <= static.maxDP {
				t.Errorf("dynamic int8 moved no more than int8-static (%s against %s): the batch does not test batching", dynamic.text(tc.task), static.text(tc.task))
			}
		})
	}
}

// answersOf posts texts to the model's version in one request and returns its answers: pooled,
// normalized embeddings, or probabilities in label order.
func answersOf(t *testing.T, url, model, version string, texts []string) [][]float32 {
	t.Helper()
	if model == "minilm" {
		var vecs [][]float32
		if resp := postJSON(t, url+"/embed", map[string]any{"inputs": texts, "version": version}, &vecs); resp.StatusCode != 200 || len(vecs) != len(texts) {
			t.Fatalf("/embed %s: %d, %d vectors for %d texts", version, resp.StatusCode, len(vecs), len(texts))
		}
		return vecs
	}
	batch := make([][]string, len(texts)) // TEI's batch shape: [[text], [text], ...]
	for i, text := range texts {
		batch[i] = []string{text}
	}
	var preds [][]struct {
		Score float32 `json:"score"`
		Label string  `json:"label"`
	}
	if resp := postJSON(t, url+"/predict", map[string]any{"inputs": batch, "version": version}, &preds); resp.StatusCode != 200 || len(preds) != len(texts) {
		t.Fatalf("/predict %s: %d, %d answers for %d texts", version, resp.StatusCode, len(preds), len(texts))
	}
	out := make([][]float32, len(preds))
	for i, p := range preds {
		byLabel := map[string]float32{}
		for _, s := range p {
			byLabel[s.Label] = s.Score
		}
		out[i] = []float32{byLabel["negative"], byLabel["positive"]}
	}
	return out
}

// sessionInvariance runs mixedTexts through one session of model/version, each alone and all
// in one padded batch, and says how far their answers moved.
func sessionInvariance(t *testing.T, model string, task models.Task, version string) invariance {
	t.Helper()
	r, err := offline.Open(t.Context(), offlineEngine(t), filepath.Join(os.Getenv("ORTSERVE_MODELS"), model), version, mixedTexts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := r.Sessions[0]
	answers := func(encs []tokenize.Encoding) [][]float32 {
		out, err := s.Run(t.Context(), tokenize.Pad(encs))
		if err != nil {
			t.Fatal(err)
		}
		var res [][]float32
		for i, row := range out.Rows() {
			if task == models.TaskEmbed {
				v := models.Pool(models.PoolingMean, row, encs[i].Len())
				models.Normalize(v)
				res = append(res, v)
			} else {
				p := append([]float32(nil), row.Data...)
				models.Softmax(p)
				res = append(res, p)
			}
		}
		return res
	}
	batched := answers(r.Encodings)
	if cols := tokenize.Pad(r.Encodings).Cols; cols < 4*r.Encodings[0].Len() {
		t.Fatalf("the batch is %d tokens wide and its first text %d: want texts of mixed lengths", cols, r.Encodings[0].Len())
	}
	got := invariance{minCos: 1}
	for i, e := range r.Encodings {
		got.add(task, answers([]tokenize.Encoding{e})[0], batched[i])
	}
	return got
}
