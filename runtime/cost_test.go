package runtime_test

import (
	"math"
	"testing"
	"time"

	"github.com/ortserve/ortserve/runtime"
)

// Device-like costs the batcher tests run on: what one run of rows × cols takes.
var (
	// cpuCost: a CPU where batching does not pay. Dense layers cost per padded token, and
	// a batch costs more per row than the rows alone (cache pressure, as ORT on one core
	// measured on mixed text): per-text cost grows with the batch.
	cpuCost = func(rows, cols int) time.Duration {
		return 200*time.Microsecond + time.Duration(float64(rows*cols)*100*float64(time.Microsecond)*(1+0.15*float64(rows-1)))
	}
	// linearCost: a CPU where rows of one length amortize a run's fixed cost.
	linearCost = func(rows, cols int) time.Duration {
		return 2*time.Millisecond + time.Duration(rows*cols)*50*time.Microsecond
	}
	// gpuCost: a GPU, where a run's cost barely grows with the batch.
	gpuCost = func(rows, cols int) time.Duration {
		return 4*time.Millisecond + time.Duration(rows*cols)*2*time.Microsecond
	}
)

// The model recovers a device's cost from calibration-like observations: within 5% at the
// shapes it saw and near them, and it says whether batching pays.
func TestCostModelLearnsTheCurve(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cost  func(rows, cols int) time.Duration
		pays  bool    // does a batch of 16 cost less per text than 16 batches of one?
		ratio float64 // per-text cost of 16 rows against 1, at 16 tokens, roughly
	}{
		{"linear", linearCost, true, 0.33},
		{"gpu", gpuCost, true, 0.07},
		{"cpu, batching does not pay", cpuCost, false, 0}, // not linear in the terms: no ratio check
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := runtime.NewCostModel()
			for _, cols := range []int{16, 48} {
				for rows := 1; rows <= 16; rows *= 2 {
					m.Observe(rows, cols, tc.cost(rows, cols), true)
				}
			}
			one, sixteen := m.Predict(1, 16), m.Predict(16, 16)
			if got := sixteen < 16*one; got != tc.pays {
				t.Errorf("16 rows: %v, 16 × 1 row: %v; batching pays = %v, want %v", sixteen, 16*one, got, tc.pays)
			}
			if tc.ratio > 0 {
				for _, sh := range [][2]int{{1, 16}, {4, 16}, {16, 48}, {3, 32}} {
					want, got := tc.cost(sh[0], sh[1]), m.Predict(sh[0], sh[1])
					if math.Abs(float64(got-want)) > 0.05*float64(want) {
						t.Errorf("%d×%d: predicted %v, costs %v", sh[0], sh[1], got, want)
					}
				}
				if r := float64(sixteen) / 16 / float64(one); math.Abs(r-tc.ratio) > 0.03 {
					t.Errorf("per-text cost of 16 rows is %.3f × one row's, want ≈ %.2f", r, tc.ratio)
				}
			}
			for _, k := range m.Coefficients() {
				if k < 0 {
					t.Errorf("negative coefficient in %v", m.Coefficients())
				}
			}
		})
	}
}

// Served batches teach the model, and they outweigh calibration once the device changes (a
// neighbour loads the CPU): after a few half-lives the prediction follows the new cost.
func TestCostModelFollowsServedBatches(t *testing.T) {
	m := runtime.NewCostModel()
	for _, cols := range []int{16, 48} {
		for rows := 1; rows <= 8; rows *= 2 {
			m.Observe(rows, cols, linearCost(rows, cols), true)
		}
	}
	slow := func(rows, cols int) time.Duration { return 2 * linearCost(rows, cols) }
	for i := range 5 * runtime.HalfLife {
		rows := 1 + i%4
		m.Observe(rows, 16, slow(rows, 16), false)
	}
	for rows := 1; rows <= 4; rows++ {
		want, got := slow(rows, 16), m.Predict(rows, 16)
		if math.Abs(float64(got-want)) > 0.1*float64(want) {
			t.Errorf("%d rows: predicted %v after the slowdown, costs %v", rows, got, want)
		}
	}
}

// With too little data to tell, the model stays flat: one shape seen, and every shape is
// predicted to cost the same (so batches are formed large until rows are shown to cost).
func TestCostModelThinData(t *testing.T) {
	m := runtime.NewCostModel()
	if d := m.Predict(1, 16); d != 0 || m.Observations() != 0 {
		t.Errorf("empty model predicts %v", d)
	}
	m.Observe(4, 4, 10*time.Millisecond, false)
	for _, sh := range [][2]int{{1, 4}, {4, 4}, {2, 20}} {
		if d := m.Predict(sh[0], sh[1]); math.Abs(float64(d-10*time.Millisecond)) > float64(50*time.Microsecond) {
			t.Errorf("%v: predicted %v from one 10ms observation, want ≈ 10ms", sh, d)
		}
	}
	m.Observe(0, 4, time.Second, false) // ignored: no rows
	m.Observe(1, 4, -time.Second, false)
	if m.Observations() != 1 {
		t.Errorf("bad observations counted: %d", m.Observations())
	}
}

func TestCostCurve(t *testing.T) {
	m := runtime.NewCostModel()
	if m.Curve([]int{1}, []int{16}, false) != nil {
		t.Error("an empty model has a curve")
	}
	for rows := 1; rows <= 8; rows *= 2 {
		m.Observe(rows, 16, gpuCost(rows, 16), true)
		m.Observe(rows, 64, gpuCost(rows, 64), true)
	}
	c := m.Curve([]int{1, 8}, []int{16}, false)
	if len(c) != 2 || c[0].PerTextVs1 != 1 || c[1].PerTextVs1 > 0.2 || c[1].TextsPerS < 7*c[0].TextsPerS {
		t.Errorf("curve %+v: want batch 8 far cheaper per text on a GPU-like cost", c)
	}
}
