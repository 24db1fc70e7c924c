package runtime_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// packingSession is a fakeSession whose graph reads packed batches: for a packed batch it
// answers per token, each token's output its input id and its text's number in the mask.
type packingSession struct{ fakeSession }

func (*packingSession) Packs() bool { return true }

func (p *packingSession) Run(ctx context.Context, b tokenize.Batch) (runtime.Tensor, error) {
	if _, err := p.fakeSession.Run(ctx, b); err != nil {
		return runtime.Tensor{}, err
	}
	out := runtime.Tensor{Shape: []int64{int64(b.Rows), int64(b.Cols), 2}, Data: make([]float32, 2*b.Rows*b.Cols)}
	for i, id := range b.InputIDs {
		out.Data[2*i], out.Data[2*i+1] = float32(id), float32(b.AttentionMask[i])
	}
	return out, nil
}

// packedCost is a CPU whose run costs fixed + perToken × tokens: packing amortizes the fixed
// cost whatever the lengths. A padded batch costs its padded tokens.
func packedCost(fixed, perToken time.Duration) func(rows, cols int) time.Duration {
	return func(rows, cols int) time.Duration { return fixed + perToken*time.Duration(rows*cols) }
}

// attentionCost is packedCost plus attention's cost, perToken2 × a row's length squared for
// each row: one long row costs more than several short ones holding the same tokens.
func attentionCost(fixed, perToken, perToken2 time.Duration) func(rows, cols int) time.Duration {
	return func(rows, cols int) time.Duration {
		return fixed + perToken*time.Duration(rows*cols) + perToken2*time.Duration(rows*cols*cols)
	}
}

// On a pool that packs, queued rows run end to end with no padding, as many as the learned
// curve says pay: all the limits allow where a run costs the same whatever its length (a
// GPU), one at a time where a run has no fixed cost to amortize, and on a CPU with a fixed
// cost, rows of any lengths together, never past MaxPackTokens, in one row unless attention
// makes a long row dearer than several short ones. Each request gets its own text's outputs
// back.
func TestBatcherPacks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cost    func(rows, cols int) time.Duration
		lengths []int
		want    string // rows of each batch formed from the queued rows
		order   runtime.Order
		cols    int // the padded length of every packed batch's rows; 0: each batch one row
	}{
		{"gpu: flat cost, all at once", packedCost(5*time.Millisecond, 0), repeat(16, 16), "[16]", "", 0},
		{"gpu: flat cost, up to MaxPackTokens", packedCost(5*time.Millisecond, 0), repeat(16, 48), "[10 6]", "", 0},
		{"no fixed cost: one at a time", packedCost(0, 100*time.Microsecond), repeat(4, 16), "[1 1 1 1]", "", 0},
		// 3 ms + 0.1 ms a token. Of the 16 queued rows (8, 64, 8 and 8 tokens, four times),
		// served shortest first, the 12 short ones packed give the best speed-up (96 tokens:
		// 12.6 ms against 45.6 run one by one, 3.62); the fewest rows within 5% of it are 10
		// (11 ms against 38, 3.45). Then the 2 short rows left (1.65, where adding a long row
		// gives 1.55), and the 4 long ones as 3 (1.27, within 5% of 4's 1.31) and 1.
		{"cpu with a fixed cost: shortest first, packed", packedCost(3*time.Millisecond, 100*time.Microsecond),
			[]int{8, 64, 8, 8, 8, 64, 8, 8, 8, 64, 8, 8, 8, 64, 8, 8}, "[10 2 3 1]", "", 0},
		// Served in arrival order, rows of any lengths share a run: 13 packed (272 tokens:
		// 30.2 ms, against 66.2 ms one by one) give the best speed-up, 2.19; the fewest rows
		// within 5% of it are 9 (184 tokens: 21.4 ms against 45.4, 2.12). The other 7 go
		// together.
		{"cpu with a fixed cost, arrival order: mixed lengths together", packedCost(3*time.Millisecond, 100*time.Microsecond),
			[]int{8, 64, 8, 8, 8, 64, 8, 8, 8, 64, 8, 8, 8, 64, 8, 8}, "[9 7]", runtime.OrderArrival, 0},
		// 3 ms + 0.1 ms a token + 1 µs a token² of a row. n texts of 16 tokens cost
		// 3 + 1.856n ms as n rows, the cheapest layout (one row: 3 + 1.6n + 0.256n²), against
		// 4.856n one by one: the speed-up grows to 2.38 at 16; the fewest within 5% of it
		// are 11 (2.26). In one row the best would have been 3 or 4 texts (1.44).
		{"cpu with attention: several rows", attentionCost(3*time.Millisecond, 100*time.Microsecond, time.Microsecond),
			repeat(16, 16), "[11 5]", "", 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &packingSession{fakeSession{cost: tc.cost}}
				pool := runtime.NewPool([]runtime.Session{f})
				if err := pool.Calibrate(t.Context(), runtime.CalibrationBatches(32, true), time.Hour); err != nil {
					t.Fatal(err)
				}
				obs := &countingObserver{}
				c := runtime.DefaultBatchConfig()
				c.Order = cmp.Or(tc.order, c.Order)
				b := runtime.NewBatcher(c, pool, obs)
				defer b.Close()
				if !b.State().Packed {
					t.Fatal("State says the batches are not packed")
				}
				f.mu.Lock()
				f.shapes = nil
				f.mu.Unlock()
				got := queueBehindBusy(t, b, obs, tc.lengths, func(i, n int, out []runtime.Tensor) error {
					if len(out) != 1 || out[0].Shape[0] != int64(n) || out[0].Data[0] != float32(i+1) {
						return fmt.Errorf("got %v", out)
					}
					for tok := range n { // every token of the text, and no other's
						if seg := out[0].Data[2*tok+1]; seg != out[0].Data[1] {
							return fmt.Errorf("token %d from text %v, token 0 from %v", tok, seg, out[0].Data[1])
						}
					}
					return nil
				})
				if got != tc.want {
					t.Errorf("batches %s, want %s (shapes %v)", got, tc.want, f.shapes[1:])
				}
				for i, sh := range f.shapes { // the first keeps the session busy
					if tc.cols == 0 && sh[0] != 1 || i > 0 && tc.cols > 0 && sh[1] != tc.cols || sh[0]*sh[1] > runtime.MaxPackTokens {
						t.Errorf("a packed batch of %d×%d", sh[0], sh[1])
					}
				}
			})
		})
	}
}

// Packing is the pool's to offer and the config's to refuse: with Packing off, or a session
// that does not pack, batches are padded.
func TestBatcherPacksOnlyWhereAllowed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sessions []runtime.Session
		packing  bool
		want     bool
	}{
		{"packing sessions", []runtime.Session{&packingSession{}}, true, true},
		{"packing off", []runtime.Session{&packingSession{}}, false, false},
		{"a session that does not pack", []runtime.Session{&packingSession{}, &fakeSession{}}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := runtime.DefaultBatchConfig()
			c.Packing = tc.packing
			b := runtime.NewBatcher(c, runtime.NewPool(tc.sessions), nil)
			defer b.Close()
			if got := b.State().Packed; got != tc.want {
				t.Errorf("packed %v, want %v", got, tc.want)
			}
		})
	}
}

// builtinLengths are the token counts of bench's built-in texts (bench/sentences.txt) under
// minilm's tokenizer: p50 18, mean 20.8, max 81.
var builtinLengths = []int{
	13, 19, 9, 17, 18, 18, 20, 18, 7, 12, 20, 74, 14, 8, 15, 15, 6, 19, 23, 17, 17, 8, 14, 78, 19,
	19, 14, 18, 22, 15, 18, 19, 5, 21, 16, 14, 22, 18, 19, 22, 16, 14, 20, 19, 20, 20, 5, 15, 81, 16,
	16, 19, 16, 21, 19, 14, 21, 14, 6, 21, 17, 15, 14, 12, 22, 16, 19, 23, 20, 13, 74, 8, 20, 20, 12,
	18, 18, 15, 18, 19, 18, 15, 7, 15, 18, 20, 15, 19, 21, 22, 14, 16, 80, 17, 21, 16, 15, 19, 17, 11,
	17, 18, 19, 16, 13, 19, 15, 13, 6, 16, 19, 20, 79, 16, 17, 11, 19, 13, 20, 17, 21, 18, 18, 18, 19,
	6, 18, 14, 22, 12, 18, 16, 21, 14, 80, 20, 21, 17, 13, 15, 19, 14, 17, 20, 17, 16, 19, 14, 14, 13,
	11, 24, 17, 12, 13, 17, 19, 20, 17, 19, 17, 78, 17, 15, 18, 20, 13, 14, 19, 6, 14, 18, 20, 19, 17,
	16, 20, 23, 14, 21, 80, 15, 20, 17, 12, 15, 19, 18, 33, 35, 27, 31, 29, 31, 29, 27, 60, 60, 58, 58,
	52,
}

// fittedCPU is a cost curve /info showed for minilm fp32 on one CPU core (docs/batching.md):
// a 3.49 ms fixed part, 15.8 ms per 64 tokens a row, and attention's 1.37 ms per
// (64 tokens)².
func fittedCPU(rows, cols int) time.Duration {
	c := float64(cols) / 64
	return time.Duration((3.49 + float64(rows)*(15.8*c+1.37*c*c)) * float64(time.Millisecond))
}

// On that curve, with bench's texts arriving one a request as a Poisson process at 75% and
// 90% of the batch-1 capacity, packed batches give a lower p95 than padded ones, and serving
// the shortest rows first a lower p95 than arrival order: the server alone, with no HTTP, on
// a fake clock (the figures are in docs/performance.md).
func TestSchedulingLowersTheTailUnderLoad(t *testing.T) {
	type setup struct {
		pack  bool
		order runtime.Order
	}
	padded, packed, shortest := setup{false, runtime.OrderArrival}, setup{true, runtime.OrderArrival}, setup{true, runtime.OrderShortest}
	for _, rho := range []float64{0.75, 0.9} {
		p95 := map[setup]time.Duration{}
		for _, su := range []setup{padded, packed, shortest} {
			var lat []time.Duration
			synctest.Test(t, func(t *testing.T) {
				lat = poissonLatencies(t, su.pack, su.order, rho, 10000)
			})
			p95[su] = lat[len(lat)*95/100]
			t.Logf("Poisson at %.0f%% of batch-1 capacity, packed %v, order %s: p50 %v, p95 %v, p99 %v, max %v", 100*rho, su.pack, su.order,
				lat[len(lat)/2].Round(100*time.Microsecond), p95[su].Round(100*time.Microsecond),
				lat[len(lat)*99/100].Round(100*time.Microsecond), lat[len(lat)-1].Round(100*time.Microsecond))
		}
		if p95[packed] >= p95[padded] {
			t.Errorf("at %.0f%%: packed p95 %v, not under padded %v", 100*rho, p95[packed], p95[padded])
		}
		if p95[shortest] >= p95[packed] {
			t.Errorf("at %.0f%%: shortest first p95 %v, not under arrival order %v", 100*rho, p95[shortest], p95[packed])
		}
	}
}

// poissonLatencies offers n one-text requests of bench's lengths as a Poisson process at rho
// of the batch-1 capacity of fittedCPU, to a batcher over one session with that cost, packed
// or padded, serving rows in order; it returns their latencies, sorted. Call it inside a
// synctest bubble.
func poissonLatencies(t *testing.T, pack bool, order runtime.Order, rho float64, n int) []time.Duration {
	var s runtime.Session = &fakeSession{cost: fittedCPU}
	if pack {
		s = &packingSession{fakeSession{cost: fittedCPU}}
	}
	pool := runtime.NewPool([]runtime.Session{s})
	if err := pool.Calibrate(t.Context(), runtime.CalibrationBatches(32, pack), time.Hour); err != nil {
		t.Fatal(err)
	}
	c := runtime.DefaultBatchConfig()
	c.Order = order
	b := runtime.NewBatcher(c, pool, nil)
	defer b.Close()
	var mean time.Duration
	for _, l := range builtinLengths {
		mean += fittedCPU(1, l)
	}
	mean /= time.Duration(len(builtinLengths))
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for i := range n {
		time.Sleep(time.Duration(rng.ExpFloat64() * float64(mean) / rho))
		l := builtinLengths[rng.IntN(len(builtinLengths))]
		wg.Go(func() {
			start := time.Now()
			if _, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(int64(i), l)}); err != nil {
				t.Error(err)
			}
			mu.Lock()
			lat = append(lat, time.Since(start))
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(lat)
	return lat
}
