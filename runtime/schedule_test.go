package runtime_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// calibrated is a batcher over one fake session with the given cost, its cost model seeded
// as serve seeds it: batches of 1…16 rows at 16 and 48 tokens.
func calibrated(t *testing.T, c runtime.BatchConfig, cost func(rows, cols int) time.Duration) (*runtime.Batcher, *fakeSession, *countingObserver) {
	t.Helper()
	f := &fakeSession{cost: cost}
	pool := runtime.NewPool([]runtime.Session{f})
	var grid []tokenize.Batch
	for _, cols := range []int{16, 48} {
		for rows := 1; rows <= 16; rows *= 2 {
			encs := make([]tokenize.Encoding, rows)
			for i := range encs {
				encs[i] = enc(0, cols)
			}
			grid = append(grid, tokenize.Pad(encs))
		}
	}
	if err := pool.Calibrate(t.Context(), grid, time.Hour); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.runs, f.shapes = 0, nil
	f.mu.Unlock()
	obs := &countingObserver{}
	return runtime.NewBatcher(c, pool, obs), f, obs
}

// A lone request is dispatched at once: no window by default, so its latency is its run.
func TestBatcherIsWorkConserving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, _ := calibrated(t, runtime.DefaultBatchConfig(), linearCost)
		defer b.Close()
		start := time.Now()
		_, st, err := b.Execute(t.Context(), []tokenize.Encoding{enc(1, 16)})
		if err != nil {
			t.Fatal(err)
		}
		if d, run := time.Since(start), linearCost(1, 16); d != run || st.Queue != 0 {
			t.Errorf("took %v (queue %v), want the run alone: %v", d, st.Queue, run)
		}
	})
}

// What queues while the session is busy is batched as the device's cost curve says: on a
// CPU where batching costs more per text, one row at a time; where a run's fixed cost
// amortizes over rows of one length, a few rows; on a GPU, everything at once. Mixed lengths
// on a linear CPU are grouped by length, never padded short to long.
func TestBatcherFollowsTheCostCurve(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cost    func(rows, cols int) time.Duration
		lengths []int
		want    string // batches formed from the 16 queued rows, in rows
	}{
		{"cpu: batching does not pay", cpuCost, repeat(16, 16), "[1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1]"},
		{"gpu: batching pays", gpuCost, repeat(16, 16), "[16]"},
		// 2 ms fixed + 0.8 ms a row of 16: 12 rows (1.03 texts/ms) are the fewest within 5%
		// of 16 rows' 1.08 texts/ms.
		{"linear cpu, one length", linearCost, repeat(16, 16), "[12 4]"},
		// The 8 short rows go together (padding them to 64 would cost 5× more); of the long
		// ones, 5 rows are within 5% of 8 rows' texts/ms.
		{"linear cpu, two lengths", linearCost, append(repeat(8, 8), repeat(8, 64)...), "[8 5 3]"},
		// A long row first: the 7 short rows, served first, go together (4.8 ms) and the long
		// one alone after them (5.2 ms). Padding them to it (27.6 ms) would give more texts
		// per ms but cost more than the two runs.
		{"linear cpu, a long row first", linearCost, append([]int{64}, repeat(7, 8)...), "[7 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, f, obs := calibrated(t, runtime.DefaultBatchConfig(), tc.cost)
				defer b.Close()
				got := queueBehindBusy(t, b, obs, tc.lengths, func(i, _ int, out []runtime.Tensor) error {
					if out[0].Data[0] != float32(i+1) {
						return fmt.Errorf("got %v", out)
					}
					return nil
				})
				if got != tc.want {
					t.Errorf("batches %s, want %s (shapes %v)", got, tc.want, f.shapes[1:])
				}
				for _, sh := range f.shapes[1:] {
					if len(tc.lengths) > 0 && sh[1] != 8 && sh[1] != 16 && sh[1] != 64 {
						t.Errorf("a batch padded to %d tokens", sh[1])
					}
				}
			})
		})
	}
}

// queueBehindBusy keeps b's one session busy with a long row, then queues one request a
// length, each one row whose first id is its number (1, 2, …), and checks each answer with
// check. It returns the batches formed after the busy one, in rows.
func queueBehindBusy(t *testing.T, b *runtime.Batcher, obs *countingObserver, lengths []int, check func(i, n int, out []runtime.Tensor) error) string {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() { b.Execute(t.Context(), []tokenize.Encoding{enc(0, 128)}) }) // busy
	synctest.Wait()
	for i, n := range lengths {
		wg.Go(func() {
			out, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(int64(i+1), n)})
			if err == nil {
				err = check(i, n, out)
			}
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		})
		synctest.Wait()
	}
	wg.Wait()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	return fmt.Sprint(obs.batches[1:])
}

// eachRow is a packed layout of n texts, each in a row of its own.
func eachRow(n int) [][]int {
	rows := make([][]int, n)
	for i := range rows {
		rows[i] = []int{i}
	}
	return rows
}

func repeat(n, v int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// Queued rows are served shortest first, unless a row has waited 8 times its own run: then
// it goes first. With OrderArrival, first come, first served. On cpuCost batching does not
// pay, so each row runs alone and the order of the runs is the order of service.
func TestBatcherServesShortestFirst(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order runtime.Order
		// busy is how long the one session is kept busy (in tokens of one row) before the
		// queue is served; late are rows queued 100 ms after the first ones.
		busy        int
		early, late []int
		want        string // the tokens of each run after the busy one
	}{
		{"shortest first", runtime.OrderShortest, 128, []int{64, 8, 32, 16}, nil, "[8 16 32 64]"},
		{"arrival order", runtime.OrderArrival, 128, []int{64, 8, 32, 16}, nil, "[64 8 32 16]"},
		// The 64-token row (6.6 ms alone) has waited over 8 × that when the session frees,
		// at 103 ms: it is due, and goes before the shorter rows queued at 100 ms.
		{"a row due goes first", runtime.OrderShortest, 1024, []int{64}, []int{16, 8}, "[64 8 16]"},
		// Due rows go oldest first (the 32-token row is due after 27 ms), then the others
		// shortest first.
		{"due rows oldest first", runtime.OrderShortest, 1024, []int{64, 32}, []int{16, 8}, "[64 32 8 16]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := runtime.DefaultBatchConfig()
				c.Order = tc.order
				b, f, _ := calibrated(t, c, cpuCost)
				defer b.Close()
				var wg sync.WaitGroup
				wg.Go(func() { b.Execute(t.Context(), []tokenize.Encoding{enc(0, tc.busy)}) })
				synctest.Wait()
				queue := func(lengths []int) {
					for _, n := range lengths {
						wg.Go(func() {
							if _, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(1, n)}); err != nil {
								t.Error(err)
							}
						})
						synctest.Wait()
					}
				}
				queue(tc.early)
				if tc.late != nil {
					time.Sleep(100 * time.Millisecond)
					queue(tc.late)
				}
				wg.Wait()
				f.mu.Lock()
				defer f.mu.Unlock()
				var got []int
				for _, sh := range f.shapes[1:] {
					if sh[0] != 1 {
						t.Errorf("a batch of %d rows, want one at a time", sh[0])
					}
					got = append(got, sh[1])
				}
				if fmt.Sprint(got) != tc.want {
					t.Errorf("runs of %v tokens, want %s", got, tc.want)
				}
			})
		})
	}
}

// Several free sessions share the queue instead of one taking it all.
func TestBatcherSpreadsOverFreeSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ss []runtime.Session
		var fs []*fakeSession
		for range 4 {
			f := &fakeSession{cost: gpuCost}
			fs = append(fs, f)
			ss = append(ss, f)
		}
		c := runtime.DefaultBatchConfig()
		c.MaxQueueDelay = time.Millisecond // let 16 rows gather while all four sessions are free
		b := runtime.NewBatcher(c, runtime.NewPool(ss), nil)
		defer b.Close()
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() { b.Execute(t.Context(), []tokenize.Encoding{enc(int64(i), 16)}) })
		}
		wg.Wait()
		for i, f := range fs {
			if f.runs != 1 || f.shapes[0][0] != 4 {
				t.Errorf("session %d ran %v, want one batch of 4", i, f.shapes)
			}
		}
	})
}

// Under an SLO, a request is admitted only when the latency predicted for it fits the
// controller's budget (0.8 × the SLO to start): the rest are refused at once, with a
// Retry-After from the prediction, and every admitted request meets the SLO.
func TestBatcherAdmitsWithinTheSLO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := runtime.DefaultBatchConfig()
		c.SLO = 100 * time.Millisecond
		perRow := func(rows, _ int) time.Duration { return time.Duration(rows) * 10 * time.Millisecond }
		b, _, obs := calibrated(t, c, perRow)
		defer b.Close()
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			admitted []time.Duration
			refused  []*runtime.OverloadError
		)
		start := time.Now()
		for range 30 {
			wg.Go(func() {
				_, st, err := b.Execute(t.Context(), []tokenize.Encoding{enc(1, 16)})
				mu.Lock()
				defer mu.Unlock()
				var oe *runtime.OverloadError
				switch {
				case err == nil:
					admitted = append(admitted, time.Since(start))
					if st.Predicted > 80*time.Millisecond {
						t.Errorf("admitted with a prediction of %v, over the 80ms budget", st.Predicted)
					}
				case errors.As(err, &oe):
					if time.Since(start) != 0 || oe.Reason != "slo" || !errors.Is(err, runtime.ErrOverloaded) || oe.RetryAfter <= 0 {
						t.Errorf("refusal after %v: %+v", time.Since(start), oe)
					}
					refused = append(refused, oe)
				default:
					t.Errorf("unexpected %v", err)
				}
			})
			synctest.Wait()
		}
		wg.Wait()
		// 10 ms a row on one session: the 8 first fit in 80 ms.
		if len(admitted) != 8 || len(refused) != 22 || slices.Max(admitted) > 80*time.Millisecond {
			t.Errorf("admitted %d (latest %v), refused %d; want 8 within 80ms and 22 refused", len(admitted), slices.Max(admitted), len(refused))
		}
		if got := obs.refused["slo"]; got != 22 {
			t.Errorf("observer saw %d slo refusals", got)
		}
		if st := b.State(); st.SLO == nil || st.SLO.Refused != 22 || st.SLO.Admitted != 8 {
			t.Errorf("state %+v", st.SLO)
		}
	})
}

// Without an SLO, a request whose own deadline would pass in the queue is refused at once,
// not after waiting for it to pass.
func TestBatcherRefusesWhatItsDeadlineCannotWaitFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, obs := calibrated(t, runtime.DefaultBatchConfig(), linearCost)
		defer b.Close()
		go b.Execute(t.Context(), []tokenize.Encoding{enc(1, 512)}) // 2 + 25.6 ms
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, _, err := b.Execute(ctx, []tokenize.Encoding{enc(2, 16)})
		var oe *runtime.OverloadError
		if !errors.As(err, &oe) || oe.Reason != "deadline" || time.Since(start) != 0 || oe.RetryAfter <= 0 {
			t.Errorf("got %v after %v, want a deadline refusal at once", err, time.Since(start))
		}
		// A deadline it can meet is admitted.
		ctx2, cancel2 := context.WithTimeout(t.Context(), time.Second)
		defer cancel2()
		if _, _, err := b.Execute(ctx2, []tokenize.Encoding{enc(3, 16)}); err != nil {
			t.Errorf("a feasible deadline: %v", err)
		}
		if obs.refused["deadline"] != 1 {
			t.Errorf("refusals %v", obs.refused)
		}
	})
}

// Admission predicts the wait of the rows served before a request's own: shortest first,
// those no longer than its longest row; in arrival order, the whole queue. On linearCost,
// behind a busy session (8.4 ms left) and four queued 64-token rows (5.2 ms each alone), an
// 8-token text (2.4 ms) with a 20 ms deadline fits when it is served first (10.8 ms), not in
// arrival order (31.6 ms); a 64-token text with that deadline fits in neither.
func TestBatcherPredictsTheWaitInServiceOrder(t *testing.T) {
	for _, tc := range []struct {
		order   runtime.Order
		tokens  int
		refused bool
	}{
		{runtime.OrderShortest, 8, false},
		{runtime.OrderArrival, 8, true},
		{runtime.OrderShortest, 64, true},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.order, tc.tokens), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := runtime.DefaultBatchConfig()
				c.Order = tc.order
				b, _, _ := calibrated(t, c, linearCost)
				defer b.Close()
				go b.Execute(t.Context(), []tokenize.Encoding{enc(0, 128)})
				synctest.Wait()
				for i := range 4 {
					go b.Execute(t.Context(), []tokenize.Encoding{enc(int64(i+1), 64)})
					synctest.Wait()
				}
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
				defer cancel()
				_, st, err := b.Execute(ctx, []tokenize.Encoding{enc(9, tc.tokens)})
				var oe *runtime.OverloadError
				if got := errors.As(err, &oe) && oe.Reason == "deadline"; got != tc.refused {
					t.Errorf("predicted %v: %v; want refused %v", st.Predicted, err, tc.refused)
				}
			})
		})
	}
}

// Open-loop load on a fake clock: Poisson arrivals at the given multiple of capacity, one
// row each, on a session whose run time varies (2 or 18 ms a row, 10 on average: the mean
// that predictions see hides a heavy tail). With an SLO the controller must keep admitted
// p99 within twice the SLO even at 3× capacity, and refuse the rest with a Retry-After.
func TestBatcherHoldsTheSLOUnderOverload(t *testing.T) {
	for _, load := range []float64{0.7, 3} {
		t.Run(fmt.Sprintf("load %.1f", load), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const slo = 100 * time.Millisecond
				c := runtime.DefaultBatchConfig()
				c.SLO = slo
				c.MaxBatchSize = 1 // the tail comes from the service times, not from batching
				var mu sync.Mutex
				rng := rand.New(rand.NewPCG(1, 2))
				varying := func(rows, _ int) time.Duration {
					mu.Lock()
					defer mu.Unlock()
					if rng.IntN(2) == 0 {
						return time.Duration(rows) * 2 * time.Millisecond
					}
					return time.Duration(rows) * 18 * time.Millisecond
				}
				b, _, _ := calibrated(t, c, varying)
				defer b.Close()
				arrivals := rand.New(rand.NewPCG(3, 4))
				rate := load * 100 // capacity: 100 rows/s
				var (
					wg             sync.WaitGroup
					lat            []time.Duration
					refused, other int
				)
				end := time.Now().Add(20 * time.Second)
				for time.Now().Before(end) {
					time.Sleep(time.Duration(arrivals.ExpFloat64() / rate * float64(time.Second)))
					wg.Go(func() {
						start := time.Now()
						_, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(1, 16)})
						mu.Lock()
						defer mu.Unlock()
						var oe *runtime.OverloadError
						switch {
						case err == nil:
							lat = append(lat, time.Since(start))
						case errors.As(err, &oe) && oe.RetryAfter > 0:
							refused++
						default:
							other++
						}
					})
				}
				wg.Wait()
				slices.Sort(lat)
				p99 := lat[len(lat)*99/100]
				st := b.State().SLO
				t.Logf("load %.1f: admitted %d, refused %d, p99 %v; controller %+v", load, len(lat), refused, p99, *st)
				if other > 0 || p99 > 2*slo {
					t.Errorf("admitted p99 %v (want ≤ %v), %d errors other than a 429", p99, 2*slo, other)
				}
				if load > 1 && (refused == 0 || float64(len(lat)) < 0.8*20*100) {
					t.Errorf("at %.0f× capacity: %d admitted in 20 s (capacity 2000), %d refused", load, len(lat), refused)
				}
				if load < 1 && refused > len(lat)/50 {
					t.Errorf("under capacity, %d of %d refused", refused, len(lat)+refused)
				}
			})
		})
	}
}

// A request marked WithWholeBatch is one batch of its own, split only by the bounds, even
// where the cost model would split it.
func TestBatcherWholeBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := runtime.DefaultBatchConfig()
		c.MaxBatchSize = 8
		b, _, obs := calibrated(t, c, cpuCost)
		defer b.Close()
		encs := make([]tokenize.Encoding, 12)
		for i := range encs {
			encs[i] = enc(int64(i), 4+i)
		}
		out, _, err := b.Execute(runtime.WithWholeBatch(t.Context()), encs)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Data[0] != float32(i) {
				t.Errorf("row %d has %v", i, o.Data)
			}
		}
		if got := fmt.Sprint(obs.batches); got != "[8 4]" {
			t.Errorf("batches %s, want [8 4]; without WithWholeBatch cpuCost splits them", got)
		}
		obs.batches = nil
		b.Execute(t.Context(), encs)
		if got := fmt.Sprint(obs.batches); got == "[8 4]" {
			t.Errorf("batches %s without WithWholeBatch", got)
		}
	})
}

// decisions records the SLO controller's decisions.
type decisions struct {
	runtime.NopObserver
	mu  sync.Mutex
	log []string // decision@budget
}

func (d *decisions) Control(s runtime.SchedulerState, _ bool) {
	d.mu.Lock()
	d.log = append(d.log, fmt.Sprintf("%s@%.0f", s.SLO.Decision, s.SLO.BudgetMs))
	d.mu.Unlock()
}

// The controller tightens when the p95 passes the target and loosens when it is well under
// while requests are refused, and so holds the p95 of what it admits under the target. The
// device slows fourfold after calibration (a neighbour takes the CPU): the predictions are
// too optimistic until the measured discount catches up, the p95 passes the SLO, and the
// budget must shrink; once the predictions are right again and the p95 is well under, the
// refusals that go on must make it grow back. Later, on a fast device again, the p95 of the
// admitted requests must stay under the SLO.
func TestSLOControllerTightensAndLoosens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var slow atomic.Bool
		cost := func(rows, _ int) time.Duration {
			d := time.Duration(rows) * 5 * time.Millisecond
			if slow.Load() {
				d *= 4
			}
			return d
		}
		f := &fakeSession{cost: cost}
		pool := runtime.NewPool([]runtime.Session{f})
		var grid []tokenize.Batch
		for rows := 1; rows <= 8; rows *= 2 {
			grid = append(grid, tokenize.Pad(slices.Repeat([]tokenize.Encoding{enc(0, 16)}, rows)))
		}
		if err := pool.Calibrate(t.Context(), grid, time.Hour); err != nil {
			t.Fatal(err)
		}
		const slo = 100 * time.Millisecond
		c := runtime.DefaultBatchConfig()
		c.SLO = slo
		c.MaxBatchSize = 1
		obs := &decisions{}
		b := runtime.NewBatcher(c, pool, obs)
		defer b.Close()
		// offer sends rate requests a second for d and returns the latencies of those admitted
		// in its last two seconds.
		offer := func(rate float64, d time.Duration) []time.Duration {
			var (
				wg  sync.WaitGroup
				mu  sync.Mutex
				lat []time.Duration
			)
			late := time.Now().Add(d - 2*time.Second)
			for end := time.Now().Add(d); time.Now().Before(end); {
				time.Sleep(time.Duration(float64(time.Second) / rate))
				wg.Go(func() {
					start := time.Now()
					if _, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(1, 16)}); err == nil && start.After(late) {
						mu.Lock()
						lat = append(lat, time.Since(start))
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			slices.Sort(lat)
			return lat
		}
		slow.Store(true)
		offer(100, 6*time.Second) // 2× the slow device's capacity (50/s)
		slow.Store(false)
		lat := offer(300, 6*time.Second) // 1.5× the fast device's (200/s)
		obs.mu.Lock()
		got := obs.log
		obs.mu.Unlock()
		t.Logf("decisions (decision@admission budget ms): %s", strings.Join(got, " "))
		first := func(prefix string) int {
			return slices.IndexFunc(got, func(d string) bool { return strings.HasPrefix(d, prefix) })
		}
		if tighten, loosen := first("tighten"), first("loosen"); tighten < 0 || loosen < tighten {
			t.Errorf("want a tighten (the slowdown) and then a loosen (refusing while well under the SLO)")
		}
		if p95 := lat[len(lat)*95/100]; len(lat) < 100 || p95 > slo {
			t.Errorf("on the fast device: %d admitted in the last 2 s, p95 %v: want it under the SLO %v", len(lat), p95, slo)
		}
		if st := b.State().SLO; st.BudgetMs < 25 || st.BudgetMs > 200 || st.Refused == 0 {
			t.Errorf("controller %+v: the budget must stay within [SLO/4, 2×SLO] and requests be refused at 1.5× capacity", st)
		}
	})
}

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
				var grid []tokenize.Batch
				for cols := 8; cols <= runtime.MaxPackTokens; cols *= 2 {
					grid = append(grid, tokenize.Pack([]tokenize.Encoding{enc(0, cols)}))
				}
				for _, rows := range []int{2, 4, 8} { // as serve calibrates a packing pool
					grid = append(grid, tokenize.PackRows(slices.Repeat([]tokenize.Encoding{enc(0, 32)}, rows), eachRow(rows)))
				}
				if err := pool.Calibrate(t.Context(), grid, time.Hour); err != nil {
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

// fittedCPU is the cost curve /info showed for minilm fp32 on one core of the project's
// machine (docs/batching.md): a 3.49 ms fixed part, 15.8 ms per 64 tokens a row, and
// attention's 1.37 ms per (64 tokens)².
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
	var grid []tokenize.Batch
	if pack {
		s = &packingSession{fakeSession{cost: fittedCPU}}
		for cols := 16; cols <= runtime.MaxPackTokens; cols *= 2 {
			grid = append(grid, tokenize.Pack([]tokenize.Encoding{enc(0, cols)}))
		}
	} else {
		for _, cols := range []int{16, 48} {
			for rows := 1; rows <= 32; rows *= 2 {
				grid = append(grid, tokenize.Pad(slices.Repeat([]tokenize.Encoding{enc(0, cols)}, rows)))
			}
		}
	}
	pool := runtime.NewPool([]runtime.Session{s})
	if err := pool.Calibrate(t.Context(), grid, time.Hour); err != nil {
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

// Packed, a whole-batch request still goes as its own rows, split only by the bounds: here
// MaxPackTokens (5 rows of 100 tokens, then 1), though on a curve with no fixed cost the
// batcher would otherwise run them one by one.
func TestBatcherWholeBatchPacked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &packingSession{fakeSession{cost: packedCost(0, 100*time.Microsecond)}}
		pool := runtime.NewPool([]runtime.Session{f})
		if err := pool.Calibrate(t.Context(), []tokenize.Batch{tokenize.Pack([]tokenize.Encoding{enc(0, 16)}), tokenize.Pack([]tokenize.Encoding{enc(0, 256)})}, time.Hour); err != nil {
			t.Fatal(err)
		}
		obs := &countingObserver{}
		b := runtime.NewBatcher(runtime.DefaultBatchConfig(), pool, obs)
		defer b.Close()
		encs := make([]tokenize.Encoding, 6)
		for i := range encs {
			encs[i] = enc(int64(i+1), 100)
		}
		out, _, err := b.Execute(runtime.WithWholeBatch(t.Context()), encs)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Data[0] != float32(i+1) {
				t.Errorf("row %d got text %v", i, o.Data[0])
			}
		}
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if got := fmt.Sprint(obs.batches); got != "[5 1]" {
			t.Errorf("batches %s, want [5 1]", got)
		}
	})
}
