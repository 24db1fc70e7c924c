package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// fakeModel answers like a model: embeddings are [len(text), 1, 0] (see Embed for prompts
// and dimensions); classification gives logits [0, len(text)]; reranking, see Rerank. err,
// when set, is returned instead.
type fakeModel struct {
	task       models.Task
	err        error
	seen       []string
	seenOpts   models.EmbedOptions // Embed's
	seenInputs []models.Input      // ClassifyPairs'
	query      string              // Rerank's
	seenLeft   bool                // the last call's truncation side
}

// Embed has one prompt, "query", which adds nothing to the text; any other is refused, as
// are dimensions over 3. Dimensions cut the vector before it is normalized.
func (f *fakeModel) Embed(_ context.Context, version string, texts []string, o models.EmbedOptions) ([][]float32, models.Stats, error) {
	if err := f.embedCall(texts, o, models.TaskEmbed); err != nil {
		return nil, models.Stats{}, err
	}
	if o.Dimensions > 3 {
		return nil, models.Stats{}, &models.OptionError{Field: "dimensions", Msg: "dimensions is over the fake's 3"}
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = []float32{float32(len(t)), 1, 0}
		if o.Dimensions > 0 {
			out[i] = out[i][:o.Dimensions]
		}
		if o.Normalize {
			models.Normalize(out[i])
		}
	}
	return out, models.Stats{Version: "v1", Tokens: len(texts)}, nil
}

// EmbedSparse's entries for a text are {len(text): 1.5} and, for a text longer than two
// bytes, {2: 0.25}, by index; an empty text has none.
func (f *fakeModel) EmbedSparse(_ context.Context, version string, texts []string, o models.EmbedOptions) ([][]models.SparseValue, models.Stats, error) {
	if err := f.embedCall(texts, o, models.TaskSparse); err != nil {
		return nil, models.Stats{}, err
	}
	out := make([][]models.SparseValue, len(texts))
	for i, t := range texts {
		v := make([]float32, len(t)+1)
		if len(t) > 0 {
			v[len(t)] = 1.5
		}
		if len(t) > 2 {
			v[2] = 0.25
		}
		out[i] = models.Sparse(v)
	}
	return out, models.Stats{Version: "v1", Tokens: len(texts)}, nil
}

func (f *fakeModel) Classify(_ context.Context, version string, texts []string, o models.ClassifyOptions) ([][]float32, models.Stats, error) {
	f.seen = texts
	if f.err != nil {
		return nil, models.Stats{}, f.err
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = []float32{0, float32(len(t))}
		if !o.Raw {
			models.Softmax(out[i])
		}
	}
	return out, models.Stats{Version: "v1", Labels: f.Labels()}, nil
}

// ClassifyPairs classifies as Classify, a pair's length being both texts'. It records the
// inputs in seenInputs.
func (f *fakeModel) ClassifyPairs(_ context.Context, version string, inputs []models.Input, o models.ClassifyOptions) ([][]float32, models.Stats, error) {
	f.seenInputs, f.seenLeft = inputs, o.Left
	if f.err != nil {
		return nil, models.Stats{}, f.err
	}
	if f.task != models.TaskClassify {
		return nil, models.Stats{}, &models.WrongTaskError{Model: "fake", Task: f.task}
	}
	out := make([][]float32, len(inputs))
	for i, in := range inputs {
		out[i] = []float32{0, float32(len(in.Text) + len(in.Second))}
		if !o.Raw {
			models.Softmax(out[i])
		}
	}
	return out, models.Stats{Version: "v1", Labels: f.Labels()}, nil
}

// Rerank's logit for a text is its length, positive when it contains the query, else
// negative; the score its sigmoid unless raw. Tokens are the texts' bytes.
func (f *fakeModel) Rerank(_ context.Context, version, query string, texts []string, o models.RerankOptions) ([]float32, models.Stats, error) {
	f.seen, f.query, f.seenLeft = texts, query, o.Left
	if f.err != nil {
		return nil, models.Stats{}, f.err
	}
	if f.task != models.TaskRerank {
		return nil, models.Stats{}, &models.WrongTaskError{Model: "fake", Task: f.task}
	}
	out := make([]float32, len(texts))
	st := models.Stats{Version: "v1"}
	for i, t := range texts {
		out[i] = -float32(len(t))
		if strings.Contains(t, query) {
			out[i] = float32(len(t))
		}
		if !o.Raw {
			out[i] = models.Sigmoid(out[i])
		}
		st.Tokens += len(query) + len(t)
	}
	return out, st, nil
}

// EmbedAll gives each text a token per byte, token j of byte c being [c, j].
func (f *fakeModel) EmbedAll(_ context.Context, version string, texts []string, o models.EmbedOptions) ([][][]float32, models.Stats, error) {
	if err := f.embedCall(texts, o, models.TaskEmbed); err != nil {
		return nil, models.Stats{}, err
	}
	out := make([][][]float32, len(texts))
	for i, t := range texts {
		out[i] = [][]float32{}
		for j := range len(t) {
			out[i] = append(out[i], []float32{float32(t[j]), float32(j)})
		}
	}
	return out, models.Stats{Version: "v1", Tokens: len(texts)}, nil
}

// Decode gives each id as the byte it is; ids past 255 are unknown.
func (f *fakeModel) Decode(ids [][]int64, skipSpecial bool) ([]string, error) {
	if f.err != nil {
		return nil, f.err
	}
	out := make([]string, len(ids))
	for i, seq := range ids {
		var b strings.Builder
		for _, id := range seq {
			if id > 255 {
				return nil, &tokenize.UnknownIDError{ID: id, Vocab: 256}
			}
			b.WriteByte(byte(id))
		}
		out[i] = b.String()
	}
	return out, nil
}

func (f *fakeModel) Labels() []string { return []string{"negative", "positive"} }

func (f *fakeModel) Dimension() int { return 3 }

// WithPrompt puts "query: " before each text for the fake's one prompt, "query".
func (f *fakeModel) WithPrompt(texts []string, o models.EmbedOptions) ([]string, error) {
	if err := fakePrompt(o); err != nil {
		return nil, err
	}
	if o.Prompt == "" {
		return texts, nil
	}
	out := make([]string, len(texts))
	for i, t := range texts {
		out[i] = o.Prompt + ": " + t
	}
	return out, nil
}

// Tokenize gives a token per space-separated word, with id the word's length, between
// [CLS]=101 and [SEP]=102.
func (f *fakeModel) Tokenize(texts []string, addSpecial bool) ([][]tokenize.Token, error) {
	if f.err != nil {
		return nil, f.err
	}
	out := make([][]tokenize.Token, len(texts))
	for i, text := range texts {
		toks := []tokenize.Token{}
		if addSpecial {
			toks = append(toks, tokenize.Token{ID: 101, Text: "[CLS]", Special: true})
		}
		start := 0
		for _, w := range strings.SplitAfter(text, " ") {
			word := strings.TrimSuffix(w, " ")
			if word != "" {
				toks = append(toks, tokenize.Token{ID: int64(len(word)), Text: strings.ToLower(word), Start: start, Stop: start + len(word)})
			}
			start += len(w)
		}
		if addSpecial {
			toks = append(toks, tokenize.Token{ID: 102, Text: "[SEP]", Special: true})
		}
		out[i] = toks
	}
	return out, nil
}

type fakeRepo map[string]*fakeModel

func (r fakeRepo) Acquire(name string, task models.Task) (Pipeline, string, func(), error) {
	if name == "" { // the first by name that does task, as the real repository
		for _, n := range slices.Sorted(maps.Keys(r)) {
			if r[n].task == task {
				return r[n], n, func() {}, nil
			}
		}
	}
	m, ok := r[name]
	if !ok {
		return nil, "", nil, &models.UnknownError{Kind: models.ErrUnknownModel, Name: name}
	}
	return m, name, func() {}, nil
}

func (r fakeRepo) Describe() []ModelInfo {
	return []ModelInfo{{Name: "emb", Task: "embed", Versions: []string{"v1"}}}
}

func (r fakeRepo) Model(name string) (ModelInfo, error) { return modelIn(r.Describe(), name) }

// modelIn is Repository.Model for a fake whose Describe lists every model.
func modelIn(all []ModelInfo, name string) (ModelInfo, error) {
	var known []string
	for _, mi := range all {
		if mi.Name == name {
			return mi, nil
		}
		known = append(known, mi.Name)
	}
	return ModelInfo{}, &models.UnknownError{Kind: models.ErrUnknownModel, Name: name, Known: known}
}

func newTestServer(t *testing.T, repo fakeRepo) *httptest.Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MaxInputs = 4
	cfg.MaxBodyBytes = 1 << 10
	s := New(cfg, repo, slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

func TestEmbed(t *testing.T) {
	repo := fakeRepo{"emb": {task: models.TaskEmbed}, "cls": {task: models.TaskClassify}}
	ts := newTestServer(t, repo)
	tests := []struct {
		name, body string
		code       int
		want       string // substring of the body
	}{
		{"single string", `{"inputs":"abc"}`, 200, ``},
		{"list", `{"inputs":["a","bb"],"normalize":false}`, 200, `[[1,1,0],[2,1,0]]`},
		{"named model", `{"inputs":"a","model":"emb","normalize":false}`, 200, `[[1,1,0]]`},
		{"empty list", `{"inputs":[]}`, 422, `"error_type":"Empty"`},
		{"too many", `{"inputs":["a","b","c","d","e"]}`, 413, `over the limit of 4`},
		{"bad json", `{"inputs":`, 422, `bad JSON body`},
		{"wrong type", `{"inputs":3}`, 422, `inputs is a number: send a string or a list of strings`},
		{"trailing data", `{"inputs":"a"} {}`, 422, `unexpected data`},
		{"trailing brace", `{"inputs":"a"}}`, 422, `unexpected data`},
		{"trailing bracket", `{"inputs":"a"} ]`, 422, `unexpected data`},
		{"unknown model", `{"inputs":"a","model":"nope"}`, 404, `unknown model`},
		{"wrong task", `{"inputs":"a","model":"cls"}`, 400, `use /predict`},
		{"body too big", `{"inputs":"` + strings.Repeat("x", 2000) + `"}`, 413, `request body is over the limit`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, ts.URL+"/embed", tt.body)
			if resp.StatusCode != tt.code || !strings.Contains(body, tt.want) {
				t.Fatalf("got %d %s, want %d containing %q", resp.StatusCode, body, tt.code, tt.want)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if tt.code == 200 && resp.Header.Get("x-model-version") != "emb/v1" {
				t.Errorf("x-model-version %q", resp.Header.Get("x-model-version"))
			}
			if tt.code != 200 {
				var e ErrorResponse
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" || strings.Contains(e.Error, "\n") {
					t.Errorf("error body %q is not one JSON line with an error", body)
				}
			}
		})
	}
	resp, body := post(t, ts.URL+"/embed", `{"inputs":"abc"}`)
	var vecs [][]float32
	if err := json.Unmarshal([]byte(body), &vecs); err != nil || resp.StatusCode != 200 {
		t.Fatal(body, err)
	}
	if n := math.Hypot(float64(vecs[0][0]), float64(vecs[0][1])); math.Abs(n-1) > 1e-6 {
		t.Errorf("normalize defaults to true, got norm %v", n)
	}
}

func TestPredict(t *testing.T) {
	repo := fakeRepo{"cls": {task: models.TaskClassify}}
	ts := newTestServer(t, repo)
	resp, body := post(t, ts.URL+"/predict", `{"inputs":"abc"}`)
	var single []Prediction
	if err := json.Unmarshal([]byte(body), &single); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s %v", resp.StatusCode, body, err)
	}
	if single[0].Label != "positive" || single[0].Score <= single[1].Score || math.Abs(float64(single[0].Score+single[1].Score)-1) > 1e-6 {
		t.Errorf("want sorted probabilities summing to 1, got %+v", single)
	}
	resp, body = post(t, ts.URL+"/predict", `{"inputs":[["a"],["bb"]],"raw_scores":true}`)
	var batch [][]Prediction
	if err := json.Unmarshal([]byte(body), &batch); err != nil || resp.StatusCode != 200 || len(batch) != 2 {
		t.Fatalf("%d %s %v", resp.StatusCode, body, err)
	}
	if batch[1][0].Score != 2 || batch[1][0].Label != "positive" {
		t.Errorf("raw scores: got %+v", batch[1])
	}
	if got := repo["cls"].seenInputs; len(got) != 2 || got[1] != (models.Input{Text: "bb"}) {
		t.Errorf("model saw %+v", got)
	}
	// Pairs (TEI's NLI inputs), alone or mixed with single texts.
	resp, body = post(t, ts.URL+"/predict", `{"inputs":["a","bb"],"raw_scores":true}`)
	if err := json.Unmarshal([]byte(body), &single); err != nil || resp.StatusCode != 200 || single[0].Score != 3 {
		t.Errorf("one pair: %d %s %v", resp.StatusCode, body, err)
	}
	if got := repo["cls"].seenInputs; len(got) != 1 || got[0] != (models.Input{Text: "a", Second: "bb", Pair: true}) {
		t.Errorf("model saw %+v", got)
	}
	resp, body = post(t, ts.URL+"/predict", `{"inputs":[["a"],["premise","hypothesis"],["c"]]}`)
	if err := json.Unmarshal([]byte(body), &batch); err != nil || resp.StatusCode != 200 || len(batch) != 3 {
		t.Errorf("mixed batch: %d %s %v", resp.StatusCode, body, err)
	}
	want := []models.Input{{Text: "a"}, {Text: "premise", Second: "hypothesis", Pair: true}, {Text: "c"}}
	if got := repo["cls"].seenInputs; !slices.Equal(got, want) {
		t.Errorf("model saw %+v, want %+v", got, want)
	}
	for _, tt := range []struct{ body, want string }{
		{`{"inputs":[["a","b","c"]]}`, "inputs must be"},
		{`{"inputs":[]}`, "inputs must be"},
		{`{"inputs":[["a",null]]}`, "inputs[0][1] is null, not a string"},
		{`{"inputs":["a","b","c"]}`, "inputs must be"},
	} {
		resp, body := post(t, ts.URL+"/predict", tt.body)
		if resp.StatusCode != 422 || !strings.Contains(body, tt.want) {
			t.Errorf("%s: got %d %s", tt.body, resp.StatusCode, body)
		}
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		err  error
		code int
		want string
	}{
		{&tokenize.TooLongError{Index: 1, Tokens: 300, Max: 256}, 413, `"truncate\": true`},
		{&models.UnknownError{Kind: models.ErrUnknownVersion, Name: "emb/int4"}, 404, "unknown version"},
		{context.DeadlineExceeded, 504, "deadline"},
		{runtime.ErrClosed, 503, "shutting down"},
		{&models.LoadError{Model: "emb", Version: "fp32", Err: errors.New("ort: loading /srv/models/emb/fp32.onnx: out of memory\nand more")}, 503, "model emb version fp32 failed to load: ort: loading fp32.onnx: out of memory; and more; the next request tries again"},
		{errors.New("boom"), 500, "inference failed: boom"},
	}
	for _, tt := range tests {
		ts := newTestServer(t, fakeRepo{"emb": {task: models.TaskEmbed, err: tt.err}})
		resp, body := post(t, ts.URL+"/embed", `{"inputs":"a"}`)
		if resp.StatusCode != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("%v: got %d %s, want %d containing %q", tt.err, resp.StatusCode, body, tt.code, tt.want)
		}
	}
}

func TestHealthInfoMetrics(t *testing.T) {
	cfg := DefaultConfig()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	cfg.Info = Info{Version: "test", Provider: "CPUExecutionProvider"}
	s := New(cfg, fakeRepo{}, slog.New(slog.DiscardHandler), m)
	m.SetProviders("CPUExecutionProvider", s.repo.Describe())
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/health"); code != 503 {
		t.Errorf("health before ready: %d", code)
	}
	s.SetReady(true)
	if code, _ := get("/health"); code != 200 {
		t.Errorf("health when ready: %d", code)
	}
	code, body := get("/info")
	var info Info
	if err := json.Unmarshal([]byte(body), &info); err != nil || code != 200 || info.Provider != "CPUExecutionProvider" || len(info.Models) != 1 || info.MaxInputs != cfg.MaxInputs {
		t.Errorf("info: %d %s", code, body)
	}
	if code, _ := get("/nope"); code != 404 {
		t.Errorf("unknown route: %d", code)
	}
	want := `
# HELP ortserve_execution_provider_info Execution provider each model version runs on (value is always 1).
# TYPE ortserve_execution_provider_info gauge
ortserve_execution_provider_info{model="emb",provider="CPUExecutionProvider",version="v1"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ortserve_execution_provider_info"); err != nil {
		t.Error(err)
	}
}

func FuzzPredictInputs(f *testing.F) {
	for _, s := range []string{`"a"`, `["a","b"]`, `[["a"],["b","c"]]`, `[]`, `[[]]`, `3`, `[["a","b","c"]]`, `null`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		var in PredictInputs
		if err := json.Unmarshal([]byte(data), &in); err != nil {
			return
		}
		for _, s := range in.Seqs {
			if len(s) != 1 && len(s) != 2 {
				t.Fatalf("%q: accepted a sequence of %d texts", data, len(s))
			}
		}
		if in.Single && len(in.Seqs) != 1 {
			t.Fatalf("%q: single with %d sequences", data, len(in.Seqs))
		}
	})
}

func FuzzEmbedRequest(f *testing.F) {
	for _, s := range []string{`{"inputs":"a"}`, `{"inputs":["a","b"],"truncate":true}`, `{"inputs":null}`, `{}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		var req EmbedRequest
		_ = decodeJSON([]byte(data), &req) // must not panic
	})
}

// blockingModel holds every request until release is closed.
type blockingModel struct {
	fakeModel
	started chan struct{}
	release chan struct{}
}

func (b *blockingModel) Embed(ctx context.Context, version string, texts []string, o models.EmbedOptions) ([][]float32, models.Stats, error) {
	b.started <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, models.Stats{}, ctx.Err()
	}
	return [][]float32{{1}}, models.Stats{Version: "v1"}, nil
}

type oneRepo struct{ p Pipeline }

func (r oneRepo) Acquire(string, models.Task) (Pipeline, string, func(), error) {
	return r.p, "emb", func() {}, nil
}
func (r oneRepo) Describe() []ModelInfo                { return nil }
func (r oneRepo) Model(name string) (ModelInfo, error) { return modelIn(nil, name) }

func TestInFlightCapAndDeadline(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxInFlight = 2
	reg := prometheus.NewRegistry()
	m := &blockingModel{fakeModel: fakeModel{task: models.TaskEmbed}, started: make(chan struct{}, 4), release: make(chan struct{})}
	s := New(cfg, oneRepo{m}, slog.New(slog.DiscardHandler), NewMetrics(reg))
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()

	done := make(chan int, 2)
	for range 2 {
		go func() {
			resp, _ := post(t, ts.URL+"/embed", `{"inputs":"a"}`)
			done <- resp.StatusCode
		}()
		<-m.started
	}
	// Two in flight: the third is refused at once with 429 and Retry-After.
	resp, body := post(t, ts.URL+"/embed", `{"inputs":"a"}`)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "Overloaded") {
		t.Errorf("over the cap: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if v := testutil.ToFloat64(s.metrics.inFlight); v != 2 {
		t.Errorf("in flight gauge %v, want 2", v)
	}
	close(m.release)
	for range 2 {
		if c := <-done; c != 200 {
			t.Errorf("admitted request got %d", c)
		}
	}
	// A request deadline from the header: the blocked model sees its context end.
	m.release = make(chan struct{})
	req, _ := http.NewRequest("POST", ts.URL+"/embed", strings.NewReader(`{"inputs":"a"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Timeout", "20ms")
	go func() { <-m.started }()
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != 504 {
		t.Errorf("deadline: %d, want 504", r2.StatusCode)
	}
	req.Header.Set("X-Request-Timeout", "soon")
	req.Body = io.NopCloser(strings.NewReader(`{"inputs":"a"}`))
	if r3, _ := http.DefaultClient.Do(req); r3 == nil || r3.StatusCode != 400 {
		t.Errorf("bad timeout header accepted")
	}
	if got := testutil.ToFloat64(s.metrics.requests.WithLabelValues("", "", "/embed", "429")); got != 1 {
		t.Errorf("requests_total{code=429} = %v", got)
	}
}

// Refusals by the batcher are 429 with a Retry-After (whole seconds, at least 1) and a
// Retry-After-Ms computed from its prediction, and a message that says why.
func TestOverloadIs429(t *testing.T) {
	for _, tc := range []struct {
		name           string
		err            error
		after, afterMs string
		says           string
	}{
		{"bare queue full", fmt.Errorf("batcher: %w", runtime.ErrQueueFull), "1", "1000", "queue is full"},
		{"queue full with a prediction", &runtime.OverloadError{Err: runtime.ErrQueueFull, Reason: "queue_full", RetryAfter: 40 * time.Millisecond}, "1", "40", "queue is full: retry in 40ms"},
		{"slo", &runtime.OverloadError{Err: runtime.ErrOverloaded, Reason: "slo", Predicted: 180 * time.Millisecond, Budget: 80 * time.Millisecond, RetryAfter: 2500 * time.Millisecond}, "3", "2500", "predicted to take 180ms against a budget of 80ms"},
		{"deadline", &runtime.OverloadError{Err: runtime.ErrOverloaded, Reason: "deadline", Predicted: 300 * time.Millisecond, Budget: 100 * time.Millisecond, RetryAfter: 200 * time.Millisecond}, "1", "200", "deadline (100ms) would pass"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, fakeRepo{"emb": {task: models.TaskEmbed, err: tc.err}})
			resp, body := post(t, ts.URL+"/embed", `{"inputs":"a"}`)
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != tc.after || resp.Header.Get("Retry-After-Ms") != tc.afterMs || !strings.Contains(body, tc.says) {
				t.Errorf("got %d Retry-After %q Retry-After-Ms %q %s; want 429 %q %q %q", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Retry-After-Ms"), body, tc.after, tc.afterMs, tc.says)
			}
		})
	}
}

func TestPhaseMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := New(DefaultConfig(), fakeRepo{"emb": {task: models.TaskEmbed}}, slog.New(slog.DiscardHandler), NewMetrics(reg))
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	post(t, ts.URL+"/embed", `{"inputs":["a","b"]}`)
	for _, name := range []string{"ortserve_tokenize_duration_seconds", "ortserve_queue_duration_seconds", "ortserve_inference_duration_seconds", "ortserve_postprocess_duration_seconds", "ortserve_request_duration_seconds"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 1 {
			t.Errorf("%s: %d series, %v", name, n, err)
		}
	}
}

// TestContentLength: whole bodies are sent with their length, the large ones too (past
// net/http's 2 KiB buffer they would otherwise go chunked).
func TestContentLength(t *testing.T) {
	ts := newTestServer(t, fakeRepo{"emb": {task: models.TaskEmbed}})
	tests := []struct {
		name, method, path, body string
		code                     int
	}{
		{"openapi.json", "GET", "/openapi.json", "", 200},
		{"openapi.json where TEI serves it", "GET", "/api-doc/openapi.json", "", 200},
		{"embed", "POST", "/embed", `{"inputs":["a","bb"]}`, 200},
		{"error", "POST", "/embed", `{"inputs":3}`, 422},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.code || resp.ContentLength != int64(len(data)) || len(resp.TransferEncoding) > 0 {
				t.Errorf("%d, %d bytes with Content-Length %d, Transfer-Encoding %q", resp.StatusCode, len(data), resp.ContentLength, resp.TransferEncoding)
			}
		})
	}
}

// fakePrompt is the fake's one prompt, "query", which adds nothing to a text: any other is
// refused as a model refuses it.
func fakePrompt(o models.EmbedOptions) error {
	if o.Prompt != "" && o.Prompt != "query" {
		return &models.OptionError{Field: "prompt_name", Msg: "prompt_name " + o.Prompt + " is not one of the fake's prompts: query"}
	}
	return nil
}

// embedCall records an embedding call of texts with o, as Embed, EmbedAll and EmbedSparse
// take one, and refuses it as a model of f.task refuses a call for task: f.err, the wrong
// task, a prompt other than the fake's.
func (f *fakeModel) embedCall(texts []string, o models.EmbedOptions, task models.Task) error {
	f.seen, f.seenOpts, f.seenLeft = texts, o, o.Left
	if f.err != nil {
		return f.err
	}
	if f.task != task {
		return &models.WrongTaskError{Model: "fake", Task: f.task, Asked: task}
	}
	return fakePrompt(o)
}
