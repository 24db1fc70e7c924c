//go:build cgo && ort

package offline_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ortserve/ortserve/bench/offline"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/engine"
	"github.com/ortserve/ortserve/runtime/ort"
)

// TestCurveMiniLM runs a few layouts of the built minilm int8 on the real ONNX Runtime, as
// `server bench --offline --curve` does: padded and packed batches run, and every point has
// a prediction and a measurement. How close they are depends on the host, so it is shown,
// not asserted.
func TestCurveMiniLM(t *testing.T) {
	lib, models := os.Getenv("ORTSERVE_ORT_LIB"), os.Getenv("ORTSERVE_MODELS")
	if lib == "" || models == "" {
		t.Fatal("ORTSERVE_ORT_LIB and ORTSERVE_MODELS are not set: run these tests with `make test`")
	}
	env, err := ort.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	e, err := engine.New(env, engine.Config{Device: "cpu", Sessions: 1, Packing: "auto", Batch: runtime.DefaultBatchConfig()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := offline.OpenCurve(t.Context(), e, filepath.Join(models, "minilm"), "int8", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.Packed || r.MaxLen != 256 {
		t.Fatalf("minilm int8 on the CPU: packed %v, max length %d; want packed batches of texts up to 256 tokens", r.Packed, r.MaxLen)
	}
	grid := []offline.Layout{{Rows: 1, Tokens: 16}, {Rows: 4, Tokens: 16}, {Rows: 1, Tokens: 64, Packed: true}, {Rows: 4, Tokens: 16, Packed: true}}
	pts, err := offline.MeasureCurve(t.Context(), r.Pool, grid, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pts {
		t.Logf("%v ran as %d×%d: predicted %.2f ms, measured %.2f ms (%+.0f%%)", p.Layout, p.BatchRows, p.BatchCols, p.PredictedMs, p.MeasuredMs, p.ErrorPct())
		if p.PredictedMs <= 0 || p.MeasuredMs <= 0 {
			t.Errorf("%v: predicted %.3f ms, measured %.3f: want both above 0", p.Layout, p.PredictedMs, p.MeasuredMs)
		}
		if p.Rows == 1 && (p.PredictedVs1 != 1 || p.MeasuredVs1 != 1) {
			t.Errorf("%v: per text vs 1 is %.3f predicted, %.3f measured; one text against itself is 1", p.Layout, p.PredictedVs1, p.MeasuredVs1)
		}
		if !p.Packed && (p.BatchRows != p.Rows || p.BatchCols != p.Tokens) {
			t.Errorf("%v ran as %d×%d: a padded layout runs as it is", p.Layout, p.BatchRows, p.BatchCols)
		}
	}
}
