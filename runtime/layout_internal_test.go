package runtime

import (
	"fmt"
	"testing"
	"time"
)

// shapeCost is a run's cost in ms: fixed, per row, per token and per token² of a row (a row's
// attention), for a batch of rows × cols.
func shapeCost(fixed, perRow, perToken, perToken2 float64) func(rows, cols int) time.Duration {
	return func(rows, cols int) time.Duration {
		r, c := float64(rows), float64(cols)
		return time.Duration((fixed + perRow*r + perToken*r*c + perToken2*r*c*c) * float64(time.Millisecond))
	}
}

// packRows takes several rows only where the curve's attention term makes one row dearer than
// several shorter ones with their padding, and then the cheapest layout it tries.
func TestPackRows(t *testing.T) {
	for _, tc := range []struct {
		name string
		lens []int
		cost func(rows, cols int) time.Duration
		want string // rows of indices into lens, and the padded length
	}{
		{"no cost known: one row", []int{18, 18, 18}, func(int, int) time.Duration { return 0 }, "[[0 1 2]] 54"},
		{"one text", []int{60}, shapeCost(0.3, 0.1, 0.07, 0.0004), "[[0]] 60"},
		{"no attention term: one row is never dearer", []int{60, 24, 20, 18}, shapeCost(3, 1, 0.1, 0), "[[0 1 2 3]] 122"},
		// 1 row of 144: 3 + 1 + 14.4 + 20.7 = 39.1 ms; 8 of 18: 3 + 8 + 14.4 + 2.6 = 28.0;
		// 4 of 36: 3 + 4 + 14.4 + 5.2 = 26.6, the cheapest; 3 of 54 (54, 54, 36): 31.0.
		{"equal lengths, two to a row", []int{18, 18, 18, 18, 18, 18, 18, 18}, shapeCost(3, 1, 0.1, 0.001), "[[0 1] [2 3] [4 5] [6 7]] 36"},
		// 1 row of 177: 25.3 ms; rows as wide as the longest text, 60, filled longest first
		// (60 | 24 20 16 | 18 18 12 9): 17.5; 90 wide (3 rows of 84): 26.7; 135 (2 of 122): 29.5.
		{"mixed lengths: rows as wide as the longest", []int{60, 24, 20, 18, 18, 16, 12, 9}, shapeCost(0.3, 0.1, 0.07, 0.0004),
			"[[0] [1 2 5] [3 4 6 7]] 60"},
		// Only 1% cheaper than one row (a fit's noise): one row.
		{"within rowsMargin: one row", []int{10, 10}, func(rows, cols int) time.Duration {
			if rows == 1 {
				return 100 * time.Millisecond
			}
			return 99 * time.Millisecond
		}, "[[0 1]] 20"},
		// 8 rows of 18 are the cheapest, but 4 rows of 36 are within 2% of them: the fewer rows.
		{"within rowsMargin of the cheapest: the fewest rows", []int{18, 18, 18, 18, 18, 18, 18, 18}, func(rows, cols int) time.Duration {
			return map[int]time.Duration{1: 100, 2: 95, 3: 90, 4: 80, 8: 79}[rows] * time.Millisecond
		}, "[[0 1] [2 3] [4 5] [6 7]] 36"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, cols, d := packRows(tc.lens, tc.cost)
			if got := fmt.Sprint(rows, " ", cols); got != tc.want {
				t.Errorf("packRows(%v) = %s, want %s", tc.lens, got, tc.want)
			}
			if want := tc.cost(len(rows), cols); d != want {
				t.Errorf("predicted %v, want the layout's cost %v", d, want)
			}
		})
	}
}

// BenchmarkPackWidth is what laying out packed batches costs the planner at its largest: one
// packWidth for each candidate of a batch grown to 32 texts of bench's lengths, on a cost model
// fitted to a CPU-like curve (int8's on one core, as /info showed it).
func BenchmarkPackWidth(b *testing.B) {
	m := NewCostModel()
	curve := shapeCost(0.375, 0.835, 1.73/64, 2.82/64/64)
	for _, rows := range []int{1, 2, 4, 8} {
		for _, cols := range []int{16, 32, 64, 128} {
			m.Observe(rows, cols, curve(rows, cols), true)
		}
	}
	lens := []int{13, 19, 9, 17, 18, 18, 20, 18, 7, 12, 20, 74, 14, 8, 15, 15, 6, 19, 23, 17, 17, 8, 14, 78, 19,
		19, 14, 18, 22, 15, 18, 19}
	b.ReportAllocs()
	for b.Loop() {
		for k := 2; k <= len(lens); k++ {
			packWidth(lens[:k], m.Predict)
		}
	}
}
