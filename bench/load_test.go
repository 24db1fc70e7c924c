package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeServer is an http.RoundTripper whose latency the test decides. It runs inside a
// synctest bubble, so its sleeps are the fake clock's and the latencies are exact.
type fakeServer struct {
	// pool, if set, is the client's connection pool: a request waits for a slot before it
	// is on the wire (GotConn), a queue the server never sees.
	pool chan struct{}
	// sessions, if set, is the server's own capacity: a request on the wire waits for one.
	sessions chan struct{}
	// latency is the service time of request n arriving at now.
	latency func(n int64, now time.Time) time.Duration
	n       atomic.Int64
}

func (f *fakeServer) RoundTrip(req *http.Request) (*http.Response, error) {
	if f.pool != nil {
		f.pool <- struct{}{}
		defer func() { <-f.pool }()
	}
	if tr := httptrace.ContextClientTrace(req.Context()); tr != nil && tr.GotConn != nil {
		tr.GotConn(httptrace.GotConnInfo{})
	}
	io.Copy(io.Discard, req.Body)
	start := time.Now()
	if f.sessions != nil {
		f.sessions <- struct{}{}
		defer func() { <-f.sessions }()
	}
	d := f.latency(f.n.Add(1), time.Now())
	select {
	case <-time.After(d):
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	h := http.Header{}
	total := time.Since(start)
	h.Set("x-total-time", strconvMS(total))
	h.Set("x-queue-time", strconvMS(total-d))
	h.Set("x-inference-time", strconvMS(d))
	h.Set("x-tokenization-time", "0.000")
	h.Set("x-compute-tokens", "12")
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: h, Body: io.NopCloser(strings.NewReader(`[[0.5]]`)), Request: req}, nil
}

func strconvMS(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) }

func fakeClient(f *fakeServer) Doer { return &http.Client{Transport: f} }

var words = &Workload{Source: "test", Texts: []string{"one", "two words", "three more words"}}

var target = Target{URL: "http://fake", Route: "/predict", Model: "m", Version: "v"}

// uniform spreads latencies evenly over [10ms, 110ms) whatever the arrival order.
func uniform(n int64, _ time.Time) time.Duration {
	return 10*time.Millisecond + time.Duration((n*7919)%1000)*100*time.Microsecond
}

func TestRecoversKnownLatency(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec StepSpec
	}{
		{"open constant", StepSpec{Rate: 200}},
		{"open poisson", StepSpec{Rate: 200, Poisson: true, Seed: 7}},
		{"closed", StepSpec{Concurrency: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				spec := tc.spec
				spec.Warmup, spec.Duration, spec.Inputs = time.Second, 10*time.Second, 1
				st, err := RunStep(t.Context(), fakeClient(&fakeServer{latency: uniform}), target, words, spec)
				if err != nil {
					t.Fatal(err)
				}
				// Uniform on [10, 110) ms: p50 60, p95 105.
				near(t, "p50", st.Latency.P50, 60, 0.03)
				near(t, "p95", st.Latency.P95, 105, 0.03)
				near(t, "mean", st.Latency.Mean, 60, 0.03)
				if st.OK != st.Sent || st.Sent == 0 {
					t.Errorf("ok %d of %d sent", st.OK, st.Sent)
				}
				if spec.Rate > 0 {
					near(t, "achieved", st.Achieved, spec.Rate, 0.1)
				}
				if st.Little.Flag {
					t.Errorf("Little's Law flagged a queue-free server: %+v", st.Little)
				}
				if !st.Phases.Headers || st.Dominant != "inference" {
					t.Errorf("phases %+v, dominant %q: want server headers read and inference dominant", st.Phases, st.Dominant)
				}
				near(t, "inference phase", st.Phases.Inference, 60, 0.03)
				if st.TokensPerS != 12*st.Achieved {
					t.Errorf("tokens/s %v, want 12 × %v", st.TokensPerS, st.Achieved)
				}
			})
		})
	}
}

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol*want {
		t.Errorf("%s = %.3f, want %.3f ± %.0f%%", what, got, want, tol*100)
	}
}

// A server that stalls every request for a second: the open-loop p99 shows the second,
// where a closed loop of one client (latency from the actual send) sees one slow request in
// hundreds and hides it — coordinated omission.
func TestStallShowsInOpenLoopTail(t *testing.T) {
	stall := func(_ int64, now time.Time) time.Duration { return 5 * time.Millisecond }
	run := func(spec StepSpec) Step {
		var st Step
		synctest.Test(t, func(t *testing.T) {
			begin := time.Now()
			f := &fakeServer{latency: func(n int64, now time.Time) time.Duration {
				// From 2 s to 3 s the server answers nothing; what arrives then waits.
				if at := now.Sub(begin); at >= 2*time.Second && at < 3*time.Second {
					return 3*time.Second - at + stall(n, now)
				}
				return stall(n, now)
			}}
			spec.Duration, spec.Inputs = 5*time.Second, 1
			var err error
			st, err = RunStep(t.Context(), fakeClient(f), target, words, spec)
			if err != nil {
				t.Fatal(err)
			}
		})
		return st
	}
	open := run(StepSpec{Rate: 100})
	if open.Latency.P99 < 900 {
		t.Errorf("open-loop p99 %.1f ms: the 1 s stall is hidden", open.Latency.P99)
	}
	if open.Latency.P90 < 400 {
		t.Errorf("open-loop p90 %.1f ms: a fifth of the requests arrived during the stall", open.Latency.P90)
	}
	closed := run(StepSpec{Concurrency: 1})
	if closed.Latency.Max < 900 || closed.Latency.P99 > 50 {
		t.Errorf("closed loop: max %.1f ms, p99 %.1f ms: want the stall in max only (coordinated omission)", closed.Latency.Max, closed.Latency.P99)
	}
}

// A client connection pool of two in front of a server taking 20 ms: requests queue for a
// connection where neither the server nor the in-flight count sees them. Little's Law
// exposes it; without the pool it holds.
func TestLittleFlagsHiddenQueue(t *testing.T) {
	for _, tc := range []struct {
		name string
		pool int
		flag bool
	}{
		{"no hidden queue", 0, false},
		{"pool of two", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeServer{latency: func(int64, time.Time) time.Duration { return 20 * time.Millisecond }}
				if tc.pool > 0 {
					f.pool = make(chan struct{}, tc.pool)
				}
				st, err := RunStep(t.Context(), fakeClient(f), target, words, StepSpec{Rate: 90, Poisson: true, Seed: 3, Warmup: time.Second, Duration: 20 * time.Second, Inputs: 1})
				if err != nil {
					t.Fatal(err)
				}
				if st.Little.Flag != tc.flag {
					t.Errorf("flag %v, want %v: %+v", st.Little.Flag, tc.flag, st.Little)
				}
				if tc.flag && st.Dominant != "client" {
					t.Errorf("dominant %q, want client: %+v", st.Dominant, st.Phases)
				}
			})
		})
	}
}

// The generator's own cap on requests outstanding is a hidden queue too, and is flagged.
func TestLittleFlagsGeneratorCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{latency: func(int64, time.Time) time.Duration { return 20 * time.Millisecond }}
		st, err := RunStep(t.Context(), fakeClient(f), target, words, StepSpec{Rate: 90, Poisson: true, Seed: 3, Warmup: time.Second, Duration: 20 * time.Second, Inputs: 1, MaxInFlight: 2})
		if err != nil {
			t.Fatal(err)
		}
		if !st.Little.Flag {
			t.Errorf("not flagged: %+v", st.Little)
		}
	})
}

// A server of four sessions taking 10 ms each tops out at 400 rps; the search for p95 ≤
// 50 ms must land below that and above where the queue is still short.
func TestSearchFindsCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{sessions: make(chan struct{}, 4), latency: func(int64, time.Time) time.Duration { return 10 * time.Millisecond }}
		o := DefaultOptions()
		o.Targets = []Target{target, {URL: "http://fake", Route: "/predict", Model: "m", Version: "w"}}
		o.SLO = &SLO{P95: 50 * time.Millisecond, RPS: 500}
		o.Warmup, o.Step = 500*time.Millisecond, 3*time.Second
		o.Price = 2
		var seen []Progress
		o.Progress = func(p Progress) { seen = append(seen, p) }
		r, err := Measure(t.Context(), fakeClient(f), words, o)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Runs) != 1 || len(r.Runs[0].Versions) != 2 {
			t.Fatalf("runs %+v", r.Runs)
		}
		for _, v := range r.Runs[0].Versions {
			if v.Best < 250 || v.Best > 400 {
				t.Errorf("%s: best %.0f rps, want within (250, 400]: steps %+v", v.Name, v.Best, rates(v.Steps))
			}
			if v.Verdict == nil || v.Verdict.Meets {
				t.Errorf("%s: verdict %+v, want not met (500 rps target)", v.Name, v.Verdict)
			}
			if v.Plan == nil || v.Plan.Replicas != int(math.Ceil(500*1.3/v.Best)) || v.Plan.CostPerMillion <= 0 {
				t.Errorf("%s: plan %+v", v.Name, v.Plan)
			}
			if len(v.Steps) > o.Search.MaxSteps {
				t.Errorf("%s: %d steps, budget %d", v.Name, len(v.Steps), o.Search.MaxSteps)
			}
		}
		// Interleaved: the targets alternate.
		if len(seen) < 4 || seen[0].Target == seen[1].Target {
			t.Errorf("steps not interleaved: %+v", seen[:min(4, len(seen))])
		}
	})
}

func rates(steps []Step) []float64 {
	var out []float64
	for _, s := range steps {
		out = append(out, s.Offered)
	}
	return out
}

func TestRepeatReportsVariance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{latency: uniform}
		o := DefaultOptions()
		o.Targets = []Target{target}
		o.Rates = []float64{50, 100}
		o.SLO = &SLO{P95: 200 * time.Millisecond}
		o.Repeat = 3
		r, err := Measure(t.Context(), fakeClient(f), words, o)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Runs) != 3 || len(r.Variance) != 1 {
			t.Fatalf("%d runs, %d variance rows", len(r.Runs), len(r.Variance))
		}
		v := r.Variance[0]
		if v.Rate != 100 || v.Best.Mean != 100 || v.Best.SD != 0 || v.P95.Mean < 90 || v.P95.Max < v.P95.Min {
			t.Errorf("variance %+v", v)
		}
	})
}

// A run cut short by ctx returns what it measured and ctx's error.
func TestRunInterrupted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		f := &fakeServer{latency: func(int64, time.Time) time.Duration { return time.Millisecond }}
		o := DefaultOptions()
		o.Targets = []Target{target}
		o.Rates = []float64{10, 20, 30}
		o.Progress = func(p Progress) {
			if p.Step == 2 {
				time.AfterFunc(time.Second, cancel)
			}
		}
		r, err := Measure(ctx, fakeClient(f), words, o)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		steps := r.Runs[0].Versions[0].Steps
		if len(steps) != 2 || !steps[1].Interrupted {
			t.Errorf("steps %+v", steps)
		}
	})
}

// The real HTTP path: statuses are counted and timing headers read from a real server.
// Nothing here depends on timing.
func TestRealHTTP(t *testing.T) {
	var n atomic.Int64
	var bodies atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies.Store(string(b))
		if r.URL.Path != "/predict" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("x-total-time", "1.5")
		w.Header().Set("x-inference-time", "1.0")
		if n.Add(1)%10 == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte(`[[{"label":"pos","score":0.9}]]`))
	}))
	defer srv.Close()
	tg := target
	tg.URL = srv.URL
	st, err := RunStep(t.Context(), srv.Client(), tg, words, StepSpec{Rate: 400, Duration: 250 * time.Millisecond, Inputs: 2, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent != 100 || st.Rejected != 10 || st.OK != 90 || st.Errors != 0 {
		t.Errorf("sent %d ok %d rejected %d errors %d (%s)", st.Sent, st.OK, st.Rejected, st.Errors, st.ErrorSample)
	}
	if !st.Phases.Headers || st.Phases.Server != 1.5 || st.ItemsPerS != 2*st.Achieved {
		t.Errorf("phases %+v items/s %v achieved %v", st.Phases, st.ItemsPerS, st.Achieved)
	}
	if b := bodies.Load().(string); !strings.Contains(b, `"inputs":[`) || !strings.Contains(b, `"model":"m"`) || !strings.Contains(b, `"version":"v"`) {
		t.Errorf("body %s", b)
	}
}

// A precise pacer sends every arrival of an open-loop step, on the real clock. How close
// to their times they go is measured by BenchmarkPacing, not asserted here.
func TestPrecisePacing(t *testing.T) {
	srv := pacingServer(t)
	st, err := RunStep(t.Context(), srv.Client(), Target{URL: srv.URL, Route: "/embed"}, words,
		StepSpec{Rate: 200, Duration: 250 * time.Millisecond, Inputs: 1, Timeout: 5 * time.Second, Precise: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("generator lag %.3f ms on average", st.Phases.Client)
	if st.OK != 50 || st.Errors != 0 || st.Phases.Client < 0 {
		t.Errorf("%d answered, %d errors; want all 50 of 200/s × 250 ms", st.OK, st.Errors)
	}
}

func pacingServer(t testing.TB) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("[[0.5]]"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// BenchmarkPacing is the generator's lag (from an arrival's intended time to its request
// having a connection) with a timer alone and with the precise pacer, at 200 arrivals/s.
func BenchmarkPacing(b *testing.B) {
	srv := pacingServer(b)
	for _, precise := range []bool{false, true} {
		b.Run(fmt.Sprintf("precise=%v", precise), func(b *testing.B) {
			var lag float64
			for b.Loop() {
				st, err := RunStep(b.Context(), srv.Client(), Target{URL: srv.URL, Route: "/embed"}, words,
					StepSpec{Rate: 200, Duration: 250 * time.Millisecond, Inputs: 1, Timeout: 5 * time.Second, Precise: precise})
				if err != nil {
					b.Fatal(err)
				}
				lag += st.Phases.Client
			}
			b.ReportMetric(lag/float64(b.N)*1e3, "lag-µs")
		})
	}
}

// --min-requests lengthens open-loop steps whose window would hold fewer requests, and only
// those; closed-loop steps keep --step.
func TestMinRequestsLengthensSteps(t *testing.T) {
	for _, tc := range []struct {
		name        string
		rates       []float64
		concurrency []int
		minRequests int
		want        []float64 // each step's measured window, s
		wantSent    []int
	}{
		{name: "off", rates: []float64{50, 500}, want: []float64{4, 4}, wantSent: []int{200, 2000}},
		{name: "slow rates wait for the count", rates: []float64{50, 125, 500}, minRequests: 1000, want: []float64{20, 8, 4}, wantSent: []int{1000, 1000, 2000}},
		{name: "closed loop", concurrency: []int{2}, minRequests: 1000, want: []float64{4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeServer{latency: func(int64, time.Time) time.Duration { return 5 * time.Millisecond }}
				o := DefaultOptions()
				o.Targets = []Target{target}
				o.Poisson = false
				o.Rates, o.Concurrency, o.MinRequests = tc.rates, tc.concurrency, tc.minRequests
				r, err := Measure(t.Context(), fakeClient(f), words, o)
				if err != nil {
					t.Fatal(err)
				}
				if r.Load.MinRequests != tc.minRequests || r.Load.StepS != 4 {
					t.Errorf("load %+v: want min_requests %d, step 4 s", r.Load, tc.minRequests)
				}
				steps := r.Runs[0].Versions[0].Steps
				if len(steps) != len(tc.want) {
					t.Fatalf("%d steps, want %d", len(steps), len(tc.want))
				}
				for i, st := range steps {
					if st.DurationS != tc.want[i] {
						t.Errorf("step %d: window %.3f s, want %.0f", i, st.DurationS, tc.want[i])
					}
					if tc.wantSent != nil && st.Sent != tc.wantSent[i] {
						t.Errorf("step %d: sent %d, want %d", i, st.Sent, tc.wantSent[i])
					}
				}
			})
		})
	}
}

func TestMinRequestsNegative(t *testing.T) {
	o := DefaultOptions()
	o.Targets, o.Rates, o.MinRequests = []Target{target}, []float64{10}, -1
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--min-requests") {
		t.Errorf("Validate: %v, want the --min-requests line", err)
	}
}

// scripted is a search's view of a server: whether a step passes, by its rate and by how
// many windows that rate has had.
type scripted func(rate float64, window int) bool

func TestSearchConfirm(t *testing.T) {
	under := func(capacity float64) scripted { return func(r float64, _ int) bool { return r <= capacity } }
	// stall: capacity 300, but the first window at 188 rps fails (a host stall).
	stall := func(r float64, w int) bool { return r <= 300 && !(r == 188 && w == 0) }
	for _, tc := range []struct {
		name      string
		pass      scripted
		confirm   int
		saturate  bool // failed steps answer under 80% of the rate
		wantBest  float64
		wantRates []float64
	}{
		// 8 steps each, and with confirm a retry after every failure that is not saturated.
		{name: "off: one stall ends the search low", pass: stall, wantBest: 186.6,
			wantRates: []float64{94, 188, 141, 164.5, 176.3, 182.2, 185.1, 186.6}},
		{name: "confirm: the stall is measured again", pass: stall, confirm: 1, wantBest: 299.7,
			wantRates: []float64{94, 188, 188, 376, 376, 282, 329, 329, 305.5, 305.5, 293.8, 299.7}},
		{name: "confirm: a real failure is retried, then counts", pass: under(150), confirm: 1, wantBest: 149.9,
			wantRates: []float64{94, 188, 188, 141, 164.5, 164.5, 152.8, 152.8, 146.9, 149.9, 151.4, 151.4}},
		{name: "confirm: a saturated step counts at once", pass: under(150), confirm: 1, saturate: true, wantBest: 149.9,
			wantRates: []float64{94, 188, 141, 164.5, 152.8, 146.9, 149.9, 151.4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &search{Search: Search{Start: 94, Resolution: 0.01, MaxSteps: 8, Confirm: tc.confirm}, rate: 94}
			windows := map[float64]int{}
			var rates []float64
			best := 0.0
			for {
				spec, ok := s.next()
				if !ok {
					break
				}
				r := spec.Rate
				rates = append(rates, r)
				pass := tc.pass(r, windows[r])
				windows[r]++
				st := Step{Offered: r, Sent: int(r * 4), DurationS: 4, Achieved: r, Pass: &pass}
				if !pass && tc.saturate {
					st.Achieved = 0.7 * r
				}
				if pass {
					best = max(best, r)
				}
				s.saw(st)
				if len(rates) > 40 {
					t.Fatalf("search does not end: %v", rates)
				}
			}
			if best != tc.wantBest || !slices.Equal(rates, tc.wantRates) {
				t.Errorf("best %.1f after %v, want %.1f after %v", best, rates, tc.wantBest, tc.wantRates)
			}
		})
	}
}

// TestSearchConfirmMeasure runs a search whose server stalls for 100 requests in the 128 rps
// step's window: without --search-confirm the search ends below it; with it, the rate is
// measured again, passes, and the search goes on to the step budget.
func TestSearchConfirmMeasure(t *testing.T) {
	for _, confirm := range []int{0, 1} {
		t.Run(fmt.Sprint("confirm=", confirm), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// Requests 1-1200: 16, 32, 64 and 128 rps steps, 1 s warm-up and 4 s each,
				// constant arrivals; 128 rps's window holds requests 689-1200.
				f := &fakeServer{latency: func(n int64, _ time.Time) time.Duration {
					if n > 700 && n <= 800 {
						return 150 * time.Millisecond
					}
					return 10 * time.Millisecond
				}}
				o := DefaultOptions()
				o.Targets = []Target{target}
				o.Poisson = false
				o.SLO = &SLO{P95: 50 * time.Millisecond}
				o.Search = Search{Start: 16, Resolution: 0.1, MaxSteps: 6, Confirm: confirm}
				r, err := Measure(t.Context(), fakeClient(f), words, o)
				if err != nil {
					t.Fatal(err)
				}
				v := r.Runs[0].Versions[0]
				want, steps := 112.0, 6 // 16, 32, 64, 128 fails, 96, 112
				if confirm == 1 {
					want, steps = 512, 7 // 16, 32, 64, 128 twice, 256, 512
				}
				if v.Best != want || len(v.Steps) != steps {
					t.Errorf("best %.0f rps after %v, want %.0f after %d steps", v.Best, rates(v.Steps), want, steps)
				}
				if r.Load.Confirm != confirm {
					t.Errorf("load %+v: want search_confirm %d", r.Load, confirm)
				}
				if got := loadText(r.Load); confirm == 1 && !strings.Contains(got, "measured again up to 1×") {
					t.Errorf("load text %q: want the confirmation named", got)
				}
			})
		})
	}
}

func TestSearchConfirmNegative(t *testing.T) {
	o := DefaultOptions()
	o.Targets, o.Rates, o.Search.Confirm = []Target{target}, []float64{10}, -1
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--search-confirm") {
		t.Errorf("Validate: %v, want the --search-confirm line", err)
	}
}
