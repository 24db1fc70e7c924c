//go:build cgo && ort

package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime/ort"
)

// offlineBackend is the backend serve builds on CPU with its default settings.
func offlineBackend(t *testing.T) *backend {
	t.Helper()
	c, err := config.Parse(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return newBackend(testEnv, c, ort.ProviderCPU, nil)
}

func TestOfflineLimit(t *testing.T) {
	t.Parallel()
	be := offlineBackend(t)
	for _, tt := range []struct{ model, version string }{
		{"minilm", "fp32"},
		{"sentiment", "int8"},
	} {
		t.Run(tt.model+"/"+tt.version, func(t *testing.T) {
			dir := filepath.Join(os.Getenv("ORTSERVE_MODELS"), tt.model)
			points, err := offlineLimit(t.Context(), be, dir, tt.version, benchSentences, []int{1, 4}, 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if len(points) != 2 || points[0].Batch != 1 || points[1].Batch != 4 {
				t.Fatalf("points %+v; want batches 1 and 4", points)
			}
			for _, p := range points {
				if p.ItemsPerS <= 0 || p.P50 <= 0 {
					t.Errorf("point %+v; want items/s and p50 > 0", p)
				}
			}
			t.Logf("%+v", points)
		})
	}
}

func TestOfflineLimitErrors(t *testing.T) {
	be := offlineBackend(t)
	minilm := filepath.Join(os.Getenv("ORTSERVE_MODELS"), "minilm")
	tests := []struct {
		name    string
		dir     string
		version string
		texts   []string
		batches []int
		is      error
		want    []string
	}{
		{"unknown version", minilm, "fp64", benchSentences, []int{1}, models.ErrUnknownVersion, []string{`"minilm/fp64"`, "fp16", "fp32", "int8"}},
		{"no model folder", t.TempDir(), "fp32", benchSentences, []int{1}, nil, []string{"no model.yaml and no config.json"}},
		{"no texts", minilm, "fp32", nil, []int{1}, nil, []string{"no texts"}},
		{"batch 0", minilm, "int8", benchSentences, []int{0}, nil, []string{"batch size 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := offlineLimit(t.Context(), be, tt.dir, tt.version, tt.texts, tt.batches, time.Millisecond)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v; want one that is %v", err, tt.is)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q; want it to name %s", err, w)
				}
			}
		})
	}
}

func TestOfflineLimitCancel(t *testing.T) {
	be := offlineBackend(t)
	dir := filepath.Join(os.Getenv("ORTSERVE_MODELS"), "minilm")

	t.Run("before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := offlineLimit(ctx, be, dir, "int8", benchSentences, []int{1}, time.Hour); !errors.Is(err, context.Canceled) {
			t.Errorf("error %v; want context.Canceled", err)
		}
	})

	t.Run("while measuring", func(t *testing.T) {
		r, err := openOffline(t.Context(), be, dir, "int8", benchSentences)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		ctx, cancel := context.WithCancel(t.Context())
		// A timer, not a sleep: measure runs for an hour unless the cancel stops it.
		stop := time.AfterFunc(100*time.Millisecond, cancel)
		defer stop.Stop()
		start := time.Now()
		_, err = r.Measure(ctx, 4, time.Hour)
		if err != context.Canceled { //nolint:errorlint // the error itself, not one wrapping it
			t.Errorf("error %v; want context.Canceled itself", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("returned %v after the cancel; want promptly", d)
		}
	})
}
