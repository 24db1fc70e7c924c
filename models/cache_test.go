package models_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/tokenize"
)

// entryBytes is what the cache counts for a one-byte text with a 2-float answer: the
// key (an options byte and the text), the vector and the overhead.
const entryBytes = 2 + 4*2 + models.EntryOverhead

func openModel(t testing.TB, yaml, device string, classify bool) *models.Model {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, models.ConfigFile), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := models.Open(dir, &fakeBackend{device: device, classify: classify}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func withCache(yaml string, maxBytes int) string {
	return yaml + fmt.Sprintf("cache: {max_bytes: %d}\n", maxBytes)
}

// TestCache runs steps in order on a cached model and checks each answer against an
// uncached one, so a hit must give exactly what a miss computes, in the request's order.
func TestCache(t *testing.T) {
	type step struct {
		name         string
		classify     bool
		version      string
		texts        []string
		truncate     bool
		left         bool // cut on the left
		variant      bool // normalize for embed, raw for classify
		hits, misses int
		truncated    int
		tooLong      int // index of the too-long input; -1: no error
	}
	steps := []step{
		{name: "first sight misses", texts: []string{"a", "b"}, truncate: true, misses: 2, tooLong: -1},
		{name: "repeat hits", texts: []string{"a", "b"}, truncate: true, hits: 2, tooLong: -1},
		{name: "mixed keeps order", texts: []string{"c", "a", "d", "b"}, truncate: true, hits: 2, misses: 2, tooLong: -1},
		{name: "normalize is in the key", texts: []string{"a"}, truncate: true, variant: true, misses: 1, tooLong: -1},
		{name: "truncate is in the key", texts: []string{"a"}, misses: 1, tooLong: -1},
		{name: "too long without truncate names its index", texts: []string{"a", "b", "far too long"}, hits: 1, misses: 2, tooLong: 2},
		{name: "an error is not cached", texts: []string{"far too long"}, misses: 1, tooLong: 0},
		{name: "truncated input misses", texts: []string{"far too long"}, truncate: true, misses: 1, truncated: 1, tooLong: -1},
		{name: "truncated input hits and still says so", texts: []string{"far too long", "a"}, truncate: true, hits: 2, truncated: 1, tooLong: -1},
		{name: "the side cut from is in the key", texts: []string{"far too long"}, truncate: true, left: true, misses: 1, truncated: 1, tooLong: -1},
		{name: "left hits its own", texts: []string{"far too long"}, truncate: true, left: true, hits: 1, truncated: 1, tooLong: -1},
		{name: "duplicates in one request both compute", texts: []string{"e", "e"}, truncate: true, misses: 2, tooLong: -1},
		{name: "then hit", texts: []string{"e"}, truncate: true, hits: 1, tooLong: -1},
		{name: "versions do not share", version: "fp16", texts: []string{"a", "b"}, truncate: true, misses: 2, tooLong: -1},
		{name: "fp16 hits its own", version: "fp16", texts: []string{"b"}, truncate: true, hits: 1, tooLong: -1},
		{name: "classify misses", classify: true, texts: []string{"a", "b"}, misses: 2, tooLong: -1},
		{name: "raw is in the key", classify: true, texts: []string{"b", "a"}, variant: true, misses: 2, tooLong: -1},
		{name: "classify hits", classify: true, texts: []string{"b", "x", "a"}, hits: 2, misses: 1, tooLong: -1},
	}
	emb := openModel(t, withCache(embedYAML, 1<<20), "cuda", false)
	embRef := openModel(t, embedYAML, "cuda", false)
	cls := openModel(t, withCache(classifyYAML, 1<<20), "cpu", true)
	clsRef := openModel(t, classifyYAML, "cpu", true)
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			call := func(m *models.Model) ([][]float32, models.Stats, error) {
				if s.classify {
					return m.Classify(t.Context(), s.version, s.texts, models.ClassifyOptions{Truncate: s.truncate, Left: s.left, Raw: s.variant})
				}
				return m.Embed(t.Context(), s.version, s.texts, models.EmbedOptions{Truncate: s.truncate, Left: s.left, Normalize: s.variant})
			}
			m, ref := emb, embRef
			if s.classify {
				m, ref = cls, clsRef
			}
			got, st, err := call(m)
			if st.CacheHits != s.hits || st.CacheMisses != s.misses {
				t.Errorf("hits %d misses %d, want %d %d", st.CacheHits, st.CacheMisses, s.hits, s.misses)
			}
			if s.tooLong >= 0 {
				var tl *tokenize.TooLongError
				if !errors.As(err, &tl) || tl.Index != s.tooLong {
					t.Fatalf("got %v, want input %d too long", err, s.tooLong)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want, wst, err := call(ref)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("got %v, want %v as computed", got, want)
			}
			if st.Truncated != s.truncated || wst.CacheHits+wst.CacheMisses != 0 {
				t.Errorf("truncated %d, want %d; uncached model counted %d hits %d misses", st.Truncated, s.truncated, wst.CacheHits, wst.CacheMisses)
			}
			if s.misses == 0 && st.Tokens != 0 {
				t.Errorf("an all-hit request computed %d tokens, want 0", st.Tokens)
			}
		})
	}
}

// TestCacheBound checks the byte bound: least recently used entries go first, and an
// answer larger than the whole cache is not kept.
func TestCacheBound(t *testing.T) {
	tests := []struct {
		name     string
		maxBytes int
		texts    []string // one request each, in order
		hits     []string // then each of these hits
		misses   []string // and each of these misses
		entries  int
	}{
		{"fits three", 3 * entryBytes, []string{"a", "b", "c"}, []string{"a", "b", "c"}, nil, 3},
		{"oldest goes", 3 * entryBytes, []string{"a", "b", "c", "d"}, []string{"b", "c", "d"}, []string{"a"}, 3},
		{"a hit refreshes", 3 * entryBytes, []string{"a", "b", "c", "a", "d"}, []string{"a", "c", "d"}, []string{"b"}, 3},
		{"one byte short keeps two", 3*entryBytes - 1, []string{"a", "b", "c"}, []string{"b", "c"}, []string{"a"}, 2},
		{"longer keys count more", 3 * entryBytes, []string{"a", "b", "cc"}, []string{"b", "cc"}, []string{"a"}, 2},
		{"larger than the cache", entryBytes - 1, []string{"a"}, nil, []string{"a"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := openModel(t, withCache(embedYAML, tt.maxBytes), "cpu", false)
			v, err := m.Version("")
			if err != nil {
				t.Fatal(err)
			}
			embed := func(text string) models.Stats {
				t.Helper()
				_, st, err := m.Embed(t.Context(), "", []string{text}, models.EmbedOptions{Truncate: true})
				if err != nil {
					t.Fatal(err)
				}
				if _, bytes := models.CacheUsage(v); bytes > int64(tt.maxBytes) {
					t.Fatalf("cache holds %d bytes, over its bound of %d", bytes, tt.maxBytes)
				}
				return st
			}
			for _, text := range tt.texts {
				embed(text)
			}
			// Hits first: a miss adds its text and evicts another.
			for _, text := range tt.hits {
				if st := embed(text); st.CacheHits != 1 {
					t.Errorf("%q: %+v, want a hit", text, st)
				}
			}
			for _, text := range tt.misses {
				if st := embed(text); st.CacheMisses != 1 {
					t.Errorf("%q: %+v, want a miss", text, st)
				}
			}
			if n, _ := models.CacheUsage(v); n != tt.entries {
				t.Errorf("%d entries, want %d", n, tt.entries)
			}
		})
	}
}

// TestCacheOffAndFresh: no cache config means no cache, and a version loaded again (as hot
// reload does) starts with an empty cache.
func TestCacheOffAndFresh(t *testing.T) {
	off := openModel(t, embedYAML, "cpu", false)
	for range 2 {
		_, st, err := off.Embed(t.Context(), "", []string{"a"}, models.EmbedOptions{})
		if err != nil || st.CacheHits != 0 || st.CacheMisses != 0 || st.Tokens != 3 {
			t.Fatalf("uncached: %v %+v", err, st)
		}
	}
	yaml := withCache(embedYAML, 1<<20)
	m := openModel(t, yaml, "cpu", false)
	m.Embed(t.Context(), "", []string{"a"}, models.EmbedOptions{})
	if _, st, _ := m.Embed(t.Context(), "", []string{"a"}, models.EmbedOptions{}); st.CacheHits != 1 {
		t.Fatalf("%+v, want a hit", st)
	}
	again := openModel(t, yaml, "cpu", false)
	if _, st, _ := again.Embed(t.Context(), "", []string{"a"}, models.EmbedOptions{}); st.CacheMisses != 1 {
		t.Errorf("reloaded version: %+v, want a miss", st)
	}
}

// TestCacheOwnership: answers are the caller's; changing one changes no later answer.
func TestCacheOwnership(t *testing.T) {
	m := openModel(t, withCache(embedYAML, 1<<20), "cpu", false)
	embed := func() []float32 {
		vecs, _, err := m.Embed(t.Context(), "", []string{"ab"}, models.EmbedOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return vecs[0]
	}
	miss := embed()
	want := slices.Clone(miss)
	miss[0] = -1
	hit := embed()
	if !slices.Equal(hit, want) {
		t.Fatalf("after changing the miss's answer: %v, want %v", hit, want)
	}
	hit[1] = -1
	if got := embed(); !slices.Equal(got, want) {
		t.Errorf("after changing a hit's answer: %v, want %v", got, want)
	}
}

// TestCacheConcurrent hammers a small cache (so that it evicts all the time) from many
// goroutines that also write to their answers; -race checks the rest.
func TestCacheConcurrent(t *testing.T) {
	m := openModel(t, withCache(embedYAML, 5*entryBytes), "cpu", false)
	ref := openModel(t, embedYAML, "cpu", false)
	texts := strings.Split("abcdefghij", "")
	want, _, err := ref.Embed(t.Context(), "", texts, models.EmbedOptions{Normalize: true})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var hits, misses sync.Map
	for g := range 8 {
		wg.Go(func() {
			h, n := 0, 0
			for i := range 200 {
				a, b := (g+i)%len(texts), (g*7+i*3)%len(texts)
				vecs, st, err := m.Embed(t.Context(), "", []string{texts[a], texts[b]}, models.EmbedOptions{Normalize: true})
				if err != nil {
					t.Error(err)
					return
				}
				if !slices.Equal(vecs[0], want[a]) || !slices.Equal(vecs[1], want[b]) {
					t.Errorf("%q %q: got %v, want %v %v", texts[a], texts[b], vecs, want[a], want[b])
					return
				}
				vecs[0][0], vecs[1][1] = -1, -1
				h, n = h+st.CacheHits, n+st.CacheMisses
			}
			hits.Store(g, h)
			misses.Store(g, n)
		})
	}
	wg.Wait()
	total := 0
	hits.Range(func(_, v any) bool { total += v.(int); return true })
	misses.Range(func(_, v any) bool { total += v.(int); return true })
	if total != 8*200*2 {
		t.Errorf("hits and misses add up to %d, want %d", total, 8*200*2)
	}
}

// BenchmarkEmbedCache compares a request served from the cache with one that misses (and
// so looks up, computes, inserts and evicts) and with no cache at all, on the fake backend:
// what it measures is the cache's own cost, not inference.
func BenchmarkEmbedCache(b *testing.B) {
	for _, n := range []int{1, 32} {
		texts := make([]string, n)
		for i := range texts {
			texts[i] = fmt.Sprintf("t%05d", i) // as long as the miss texts
		}
		opts := models.EmbedOptions{Truncate: true, Normalize: true}
		b.Run(fmt.Sprintf("hit/inputs=%d", n), func(b *testing.B) {
			m := openModel(b, withCache(embedYAML, 1<<20), "cpu", false)
			m.Embed(b.Context(), "", texts, opts)
			b.ReportAllocs()
			for b.Loop() {
				if _, st, _ := m.Embed(b.Context(), "", texts, opts); st.CacheHits != n {
					b.Fatalf("%+v", st)
				}
			}
		})
		b.Run(fmt.Sprintf("miss/inputs=%d", n), func(b *testing.B) {
			// The cache holds 64 texts and the requests cycle through far more, so every
			// text misses and evicts.
			m := openModel(b, withCache(embedYAML, 64*entryBytes), "cpu", false)
			pool := make([]string, 1<<14)
			for i := range pool {
				pool[i] = fmt.Sprintf("%06x", i) // 6 bytes: fits max_length 8
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				fresh := pool[i : i+n]
				i = (i + n) % (len(pool) - n)
				if _, st, _ := m.Embed(b.Context(), "", fresh, opts); st.CacheMisses != n {
					b.Fatalf("%+v", st)
				}
			}
		})
		b.Run(fmt.Sprintf("off/inputs=%d", n), func(b *testing.B) {
			m := openModel(b, embedYAML, "cpu", false)
			b.ReportAllocs()
			for b.Loop() {
				m.Embed(b.Context(), "", texts, opts)
			}
		})
	}
}
