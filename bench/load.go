package bench

import (
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"time"
)

// StepSpec is one load level: an open-loop arrival rate or a closed-loop concurrency, for a
// warm-up and then a measured window.
type StepSpec struct {
	Rate        float64       // open loop: requests per second
	Concurrency int           // closed loop: clients, each sending its next request when answered
	Poisson     bool          // open loop: exponential gaps (a Poisson process), else constant
	Warmup      time.Duration // sent but not measured
	Duration    time.Duration // the measured window
	Timeout     time.Duration // per request; 0: none
	MaxInFlight int           // the generator's cap on requests outstanding; 0: none
	Inputs      int           // texts per request
	Seed        uint64        // Poisson gaps and the workload's starting offset
	// Precise sends each open-loop arrival within microseconds of its time: a timer takes
	// the pacer to the last millisecond, a nanosleep on a thread of its own the rest
	// (preciseClock). Off, the timer alone may send up to a millisecond late. It needs the
	// real clock: tests on testing/synctest's fake clock leave it off.
	Precise bool
}

// Validate reports the first setting that cannot work.
func (s StepSpec) Validate() error {
	switch {
	case (s.Rate > 0) == (s.Concurrency > 0):
		return errors.New("bench: a step needs either a rate or a concurrency")
	case s.Duration <= 0:
		return errors.New("bench: a step needs a positive duration")
	case s.Inputs < 1:
		return errors.New("bench: a request needs at least one input")
	}
	return nil
}

// sample is what one request saw. Times are offsets from the step's start.
type sample struct {
	intended time.Duration // when the schedule meant it to be sent
	sent     time.Duration // when it got a connection: on the wire from here
	wire     bool          // it did get one
	done     time.Duration // response read to the end, or failure
	status   int           // 0: transport error or timeout
	timeout  bool
	err      string
	server   serverTimes
}

// serverTimes are a response's timing headers, in milliseconds; ok when x-total-time came.
type serverTimes struct {
	ok                                bool
	total, tokenize, queue, inference float64
	tokens                            int
}

func parseServerTimes(h http.Header) serverTimes {
	f := func(name string) float64 {
		v, _ := strconv.ParseFloat(h.Get(name), 64)
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return 0
		}
		return v
	}
	st := serverTimes{total: f("x-total-time"), tokenize: f("x-tokenization-time"), queue: f("x-queue-time"), inference: f("x-inference-time")}
	st.ok = h.Get("x-total-time") != ""
	st.tokens, _ = strconv.Atoi(h.Get("x-compute-tokens"))
	return st
}

// RunStep applies one load level to the target and measures it. Open-loop latency runs
// from each request's intended send time, so a server that stalls cannot hide the
// requests that piled up behind the stall; closed-loop latency runs from the actual send.
// RunStep waits for every request it sent (each bounded by the timeout) before it returns.
// If ctx ends early it stops sending and returns what it measured, marked Interrupted.
func RunStep(ctx context.Context, c Doer, t Target, w *Workload, s StepSpec) (Step, error) {
	if err := s.Validate(); err != nil {
		return Step{}, err
	}
	if len(w.Texts) == 0 {
		return Step{}, errors.New("bench: the workload has no texts")
	}
	bodies := make([][]byte, len(w.Texts))
	for i := range bodies {
		b, err := t.body(w.Request(i, s.Inputs))
		if err != nil {
			return Step{}, err
		}
		bodies[i] = b
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0x6f7274))
	first := rng.IntN(len(bodies))
	r := &recorder{c: c, t: t, bodies: bodies, first: first, timeout: s.Timeout, start: time.Now()}
	if s.MaxInFlight > 0 {
		r.slots = make(chan struct{}, s.MaxInFlight)
	}
	end := s.Warmup + s.Duration
	var interrupted bool
	if s.Rate > 0 {
		interrupted = r.open(ctx, s, rng, end)
	} else {
		interrupted = r.closed(ctx, s, end)
	}
	r.wg.Wait()
	st := summarize(r.samples, s, s.Warmup, end)
	st.Interrupted = interrupted
	return st, nil
}

// recorder sends requests and keeps their samples.
type recorder struct {
	c       Doer
	t       Target
	bodies  [][]byte
	first   int
	timeout time.Duration
	start   time.Time
	slots   chan struct{} // nil: no cap on requests outstanding
	wg      sync.WaitGroup

	mu      sync.Mutex
	samples []sample
}

// preciseLast is the stretch before an arrival that a precise pacer sleeps instead of
// waiting on a timer: more than the timer's worst lateness.
const preciseLast = 1500 * time.Microsecond

// open sends requests on the arrival schedule until end; true if ctx cut it short.
func (r *recorder) open(ctx context.Context, s StepSpec, rng *rand.Rand, end time.Duration) bool {
	gap := float64(time.Second) / s.Rate
	var at time.Duration
	timer := time.NewTimer(0)
	defer timer.Stop()
	var sleep func(time.Duration)
	if s.Precise {
		var undo func()
		sleep, undo = preciseClock()
		defer undo()
	}
	for i := 0; ; i++ {
		if s.Poisson {
			at += time.Duration(rng.ExpFloat64() * gap)
		} else {
			at = time.Duration(float64(i) * gap)
		}
		if at >= end {
			return false
		}
		due := r.start.Add(at)
		if wait := time.Until(due); sleep == nil && wait > 0 || wait > preciseLast {
			if sleep != nil {
				wait -= preciseLast
			}
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return true
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return true
		}
		if wait := time.Until(due); sleep != nil && wait > 0 {
			sleep(wait)
		}
		r.wg.Add(1)
		go func(at time.Duration) {
			defer r.wg.Done()
			r.send(ctx, i, at)
		}(at)
	}
}

// closed runs s.Concurrency clients back to back until end; true if ctx cut it short.
func (r *recorder) closed(ctx context.Context, s StepSpec, end time.Duration) bool {
	var next int
	var mu sync.Mutex
	for range s.Concurrency {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for ctx.Err() == nil {
				now := time.Since(r.start)
				if now >= end {
					return
				}
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				r.send(ctx, i, now)
			}
		}()
	}
	r.wg.Wait()
	return ctx.Err() != nil
}

// send makes request i, meant to go at offset at, and records what happened. It does not
// stop for ctx: a request sent is a request measured, bounded by the timeout.
func (r *recorder) send(ctx context.Context, i int, at time.Duration) {
	ctx = context.WithoutCancel(ctx)
	if r.slots != nil {
		r.slots <- struct{}{}
		defer func() { <-r.slots }()
	}
	smp := sample{intended: at, sent: -1}
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	// On the wire from the moment a connection is ours: a wait for one in the client's pool
	// is a queue the server never sees, and the Little's Law check is there to expose it.
	var once sync.Once
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { once.Do(func() { smp.sent, smp.wire = time.Since(r.start), true }) },
	})
	req, err := r.t.request(ctx, r.bodies[(r.first+i)%len(r.bodies)])
	if err == nil {
		var resp *http.Response
		resp, err = r.c.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			smp.status = resp.StatusCode
			smp.server = parseServerTimes(resp.Header)
			if resp.StatusCode != http.StatusOK && smp.err == "" {
				smp.err = "HTTP " + resp.Status
			}
		}
	}
	smp.done = time.Since(r.start)
	once.Do(func() { smp.sent = smp.done }) // never got a connection
	if err != nil {
		smp.status = 0
		smp.timeout = errors.Is(err, context.DeadlineExceeded)
		smp.err = err.Error()
	}
	r.mu.Lock()
	r.samples = append(r.samples, smp)
	r.mu.Unlock()
}

// rejected reports whether status is the server shedding load.
func rejected(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}
