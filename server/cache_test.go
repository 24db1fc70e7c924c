package server

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ortserve/ortserve/models"
)

// cachingModel reports every text that it has seen before as a cache hit.
type cachingModel struct {
	fakeModel
	seen map[string]bool
}

func (c *cachingModel) Embed(ctx context.Context, version string, texts []string, o models.EmbedOptions) ([][]float32, models.Stats, error) {
	out, st, err := c.fakeModel.Embed(ctx, version, texts, o)
	for _, t := range texts {
		if c.seen[t] {
			st.CacheHits++
		} else {
			st.CacheMisses++
		}
		c.seen[t] = true
	}
	return out, st, err
}

type oneModel struct{ p Pipeline }

func (r oneModel) Acquire(string, models.Task) (Pipeline, string, func(), error) {
	return r.p, "emb", func() {}, nil
}
func (r oneModel) Describe() []ModelInfo                { return nil }
func (r oneModel) Model(name string) (ModelInfo, error) { return modelIn(nil, name) }

func TestCacheMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := &cachingModel{fakeModel: fakeModel{task: models.TaskEmbed}, seen: map[string]bool{}}
	s := New(DefaultConfig(), oneModel{m}, slog.New(slog.DiscardHandler), NewMetrics(reg))
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	steps := []struct {
		body, header string
	}{
		{`{"inputs":["a","b"]}`, ""},
		{`{"inputs":["b","c","a"]}`, "2"},
		{`{"input":["c"]}`, "1"}, // OpenAI's route
	}
	for _, st := range steps {
		path := "/embed"
		if strings.HasPrefix(st.body, `{"input"`) {
			path = "/v1/embeddings"
		}
		resp, body := post(t, ts.URL+path, st.body)
		if resp.StatusCode != 200 || resp.Header.Get("x-cache-hits") != st.header {
			t.Errorf("%s %s: %d, x-cache-hits %q, want %q: %s", path, st.body, resp.StatusCode, resp.Header.Get("x-cache-hits"), st.header, body)
		}
	}
	want := `
# HELP ortserve_cache_hits_total Inputs of successful requests answered from the version's response cache.
# TYPE ortserve_cache_hits_total counter
ortserve_cache_hits_total{model="emb",version="v1"} 3
# HELP ortserve_cache_misses_total Inputs of successful requests that the version's response cache did not hold, so were computed.
# TYPE ortserve_cache_misses_total counter
ortserve_cache_misses_total{model="emb",version="v1"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ortserve_cache_hits_total", "ortserve_cache_misses_total"); err != nil {
		t.Error(err)
	}
}

// TestCacheMetricsOff: a version without a cache (no hits, no misses) makes no series.
func TestCacheMetricsOff(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := New(DefaultConfig(), fakeRepo{"emb": {task: models.TaskEmbed}}, slog.New(slog.DiscardHandler), NewMetrics(reg))
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	if resp, _ := post(t, ts.URL+"/embed", `{"inputs":["a"]}`); resp.Header.Get("x-cache-hits") != "" {
		t.Errorf("x-cache-hits %q without a cache", resp.Header.Get("x-cache-hits"))
	}
	if n, err := testutil.GatherAndCount(reg, "ortserve_cache_hits_total", "ortserve_cache_misses_total"); err != nil || n != 0 {
		t.Errorf("%d cache series without a cache, %v", n, err)
	}
}
