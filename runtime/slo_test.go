package runtime_test

import (
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
