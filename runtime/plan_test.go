package runtime

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// The planner, as a function: which rows of a queue go in the next batch, and how they are
// laid out, for the limits, free sessions and cost curves a batcher meets.
func TestPlanBatch(t *testing.T) {
	var (
		unknown = func(int, int) time.Duration { return 0 }
		linear  = shapeCost(2, 0, 0.05, 0) // a run's fixed cost amortizes over rows
		// A CPU where rows cost more together (cache pressure): per-text cost grows with the batch.
		cpu = func(rows, cols int) time.Duration {
			return shapeCost(0.2, 0, 0.1*(1+0.15*float64(rows-1)), 0)(rows, cols)
		}
		flat      = shapeCost(5, 0, 0, 0)       // a GPU: a run costs the same whatever its shape
		attention = shapeCost(3, 0, 0.1, 0.001) // a long row costs more than several short ones
		packed    = shapeCost(3, 0, 0.1, 0)     // packing amortizes the fixed cost at any length
		budget    = func(d time.Duration) limits { return limits{rows: 32, packTokens: MaxPackTokens, runBudget: d} }
		maxRows   = func(n int) limits { return limits{rows: n, packTokens: MaxPackTokens} }
		// stopping is a limit of 32 rows with the classes of row bands from r up stopped in
		// the length bands given (the check against batch 1).
		stopping = func(r int, bands ...int) limits {
			l := maxRows(32)
			for _, b := range bands {
				l.stopped[b] = ^uint8(0) << r
			}
			return l
		}
	)
	for _, tc := range []struct {
		name  string
		order Order
		lens  []int
		due   []int // rows that have waited long enough to be due (each row is priced 1 ms)
		free  int
		lim   limits
		pack  bool
		cost  func(rows, cols int) time.Duration
		want  string // the rows taken (their places in lens), and the packed layout
	}{
		{"empty queue", OrderShortest, nil, nil, 1, maxRows(32), false, linear, "[] []"},
		{"unknown cost, padded: the largest batch allowed", OrderShortest, repeat(6, 16), nil, 1, maxRows(4), false, unknown, "[0 1 2 3] []"},
		// The gains are the rows, 1 to 32: 31 is the smallest within speedupSlack of 32.
		{"unknown cost, padded: within speedupSlack of the largest", OrderShortest, repeat(40, 16), nil, 1, maxRows(32), false, unknown,
			fmt.Sprint(seq(31), " []")},
		{"unknown cost, packed: the largest batch allowed, in one row", OrderShortest, repeat(5, 16), nil, 1, maxRows(32), true, unknown,
			"[0 1 2 3 4] [[0 1 2 3 4]]"},
		{"token budget: rows × the longest", OrderShortest, repeat(4, 20), nil, 1, limits{rows: 8, tokens: 40, packTokens: 40}, false, linear, "[0 1] []"},
		{"pack limit: tokens", OrderShortest, repeat(16, 48), nil, 1, maxRows(32), true, flat, fmt.Sprint(seq(10), " [", seq(10), "]")},
		// 2 + 0.8 ms a row of 16: 5 rows take 6 ms, 6 rows 6.8 ms.
		{"batch budget, padded", OrderShortest, repeat(8, 16), nil, 1, budget(6500 * time.Microsecond), false, linear, "[0 1 2 3 4] []"},
		// 3 + 1.6 ms a row of 16 packed in one: 3 rows take 7.8 ms, 4 rows 9.4 ms.
		{"batch budget, packed", OrderShortest, repeat(8, 16), nil, 1, budget(9 * time.Millisecond), true, packed, "[0 1 2] [[0 1 2]]"},
		{"no budget: the best speed-up", OrderShortest, repeat(8, 16), nil, 1, maxRows(32), false, linear, "[0 1 2 3 4 5 6] []"},
		{"fair share: four free sessions share eight rows", OrderShortest, repeat(8, 16), nil, 4, maxRows(32), false, flat, "[0 1] []"},
		{"fair share: rounded up", OrderShortest, repeat(9, 16), nil, 4, maxRows(32), false, flat, "[0 1 2] []"},
		{"cpu: batching does not pay", OrderShortest, repeat(4, 16), nil, 1, maxRows(32), false, cpu, "[0] []"},
		// The short rows go together: padded to 64 tokens, they would cost more than alone.
		{"padded: rows of like length", OrderShortest, []int{64, 8, 64, 9, 8, 64}, nil, 1, maxRows(32), false, linear, "[1 3 4] []"},
		{"padded, arrival order: the oldest row's neighbours in length", OrderArrival, []int{64, 8, 64, 9, 8, 60}, nil, 1, maxRows(32), false, linear,
			"[0 2 5] []"},
		{"a due row goes first", OrderShortest, []int{8, 64, 8}, []int{1}, 1, maxRows(32), false, cpu, "[1] []"},
		{"due rows oldest first", OrderShortest, []int{8, 64, 32}, []int{1, 2}, 1, maxRows(32), false, cpu, "[1] []"},
		// Packed, rows go in the order they are served: the due one, then the shortest; in a
		// row, the longest first.
		{"packed: served order", OrderShortest, []int{30, 8, 60, 9}, []int{2}, 1, maxRows(3), true, packed, "[1 2 3] [[1 2 0]]"},
		// 16 texts of 16 tokens: as 16 rows of one text 3 + 1.856 ms each, against 4.856 ms
		// one by one; the fewest within speedupSlack of the best speed-up are 11.
		// Batches of 3 rows and more of up to 32 tokens are stopped: of 1 and 2 rows, 2
		// (1.56: 5.6 ms one by one against 3.6).
		{"stopped: the best speed-up of the classes allowed", OrderShortest, repeat(8, 16), nil, 1, stopping(2, 0), false, linear, "[0 1] []"},
		{"stopped: every batch of several rows, the row served first alone", OrderShortest, repeat(8, 16), nil, 1, stopping(1, 0, 1, 2, 3, 4), false, linear, "[0] []"},
		{"stopped in another length band: no change", OrderShortest, repeat(8, 16), nil, 1, stopping(1, 1), false, linear, "[0 1 2 3 4 5 6] []"},
		// Packed, a batch's length is its mean text: 8 tokens alone, or 8 and 8, are in
		// 1–32, stopped; 8, 8 and 120 are a mean of 46, in 33–64, allowed.
		{"packed, stopped by the mean's band", OrderShortest, []int{8, 8, 120}, nil, 1, stopping(1, 0), true, packed, "[0 1 2] [[2 0 1]]"},
		{"packed: attention makes several rows cheaper", OrderShortest, repeat(16, 16), nil, 1, maxRows(32), true, attention,
			fmt.Sprint(seq(11), " ", eachRow(11))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(tc.order)
			now := time.Unix(1000, 0)
			for i, n := range tc.lens {
				at := now
				if slices.Contains(tc.due, i) {
					at = now.Add(-time.Second) // over agingFactor × 1 ms ago
				}
				q.push(testRequest(at, time.Millisecond, n))
			}
			p := planBatch(q.view(now), tc.free, tc.lim, tc.pack, tc.cost, tc.cost(1, 1) > 0)
			var got []uint64
			for _, w := range p.rows {
				got = append(got, w.seq)
			}
			if s := fmt.Sprint(got, " ", p.layout); s != tc.want {
				t.Errorf("planned %s, want %s", s, tc.want)
			}
		})
	}
}

func repeat(n, v int) []int { return slices.Repeat([]int{v}, n) }

// seq is 0, 1, …, n-1.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// eachRow is a packed layout of n texts, each in a row of its own.
func eachRow(n int) [][]int {
	rows := make([][]int, n)
	for i := range rows {
		rows[i] = []int{i}
	}
	return rows
}
