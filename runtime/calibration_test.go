package runtime_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// A version's cost model is seeded with the shapes its batches will have: padded rows × tokens
// up to the max batch, or, packed, one row of up to runtime.MaxPackTokens tokens and a few rows
// of two widths; cheapest first, since calibration stops at its budget.
func TestCalibrationBatches(t *testing.T) {
	shapes := func(bs []tokenize.Batch) string {
		var s []string
		for _, b := range bs {
			s = append(s, fmt.Sprintf("%dx%d", b.Rows, b.Cols))
		}
		return strings.Join(s, " ")
	}
	for _, tc := range []struct {
		name     string
		maxBatch int
		packed   bool
		want     string
	}{
		{"padded", 4, false, "1x16 2x16 1x48 4x16 2x48 4x48"},
		{"padded, a max batch not a power of two", 6, false, "1x16 2x16 1x48 4x16 6x16 2x48 4x48 6x48"},
		{"padded, one row", 1, false, "1x16 1x48"},
		{"packed", 32, true, "1x16 1x32 1x64 2x32 1x128 4x32 2x64 1x256 8x32 4x64 1x512 8x64"},
		{"packed, at most 4 rows", 4, true, "1x16 1x32 1x64 2x32 1x128 4x32 2x64 1x256 4x64 1x512"},
	} {
		if got := shapes(runtime.CalibrationBatches(tc.maxBatch, tc.packed)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// A synthetic batch is a padded batch of [CLS] … [SEP] texts that fill it: every token real.
func TestSyntheticBatch(t *testing.T) {
	b := runtime.SyntheticBatch(2, 4)
	if b.Rows != 2 || b.Cols != 4 || b.Packed || !slices.Equal(b.InputIDs[:4], []int64{101, 1001, 1002, 102}) ||
		slices.Contains(b.AttentionMask, 0) {
		t.Errorf("%+v", b)
	}
}

// What a pool's calibration measured seeds another pool of the same graph as if it had
// measured it itself: the same cost model, without a run; runs that cannot have happened are
// left out.
func TestSeedFromCalibration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cost := func(rows, cols int) time.Duration {
			return time.Millisecond + time.Duration(rows*cols)*10*time.Microsecond
		}
		measured := runtime.NewPool([]runtime.Session{&fakeSession{cost: cost}})
		if err := measured.Calibrate(t.Context(), runtime.CalibrationBatches(4, false), time.Hour); err != nil {
			t.Fatal(err)
		}
		obs := measured.Calibration()
		want := []runtime.Observation{{Rows: 1, Cols: 16, Duration: cost(1, 16)}, {Rows: 2, Cols: 16, Duration: cost(2, 16)}}
		if len(obs) != 6 || !slices.Equal(obs[:2], want) {
			t.Fatalf("calibration %v; want 6 runs starting %v", obs, want)
		}

		fresh := &fakeSession{cost: cost}
		seeded := runtime.NewPool([]runtime.Session{fresh})
		seeded.Seed(append(obs, runtime.Observation{Rows: 0, Cols: 16, Duration: time.Second}, runtime.Observation{Rows: 1, Cols: 16}))
		if fresh.runs != 0 {
			t.Errorf("seeding ran %d batches", fresh.runs)
		}
		if got := seeded.Calibration(); !slices.Equal(got, obs) {
			t.Errorf("seeded calibration %v; want %v", got, obs)
		}
		for _, sh := range [][2]int{{1, 16}, {3, 40}, {4, 128}} {
			a, b := measured.Cost().Predict(sh[0], sh[1]), seeded.Cost().Predict(sh[0], sh[1])
			if a != b || a == 0 {
				t.Errorf("%dx%d: measured pool predicts %v, seeded %v", sh[0], sh[1], a, b)
			}
		}
	})
}
