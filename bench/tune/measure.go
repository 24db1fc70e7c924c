package tune

import (
	"cmp"
	"context"
	"math"

	"github.com/ortserve/ortserve/bench"
)

// Measurer measures what one config sustains, under the same load profile and SLO every
// time it is called.
type Measurer interface {
	// Measure serves c and finds the highest rate that meets the SLO. hint is the rate to
	// search around (the current best); 0 asks for a wide search from scratch. A Result with
	// an error holds what was measured before the error, if anything.
	Measure(ctx context.Context, c Config, hint float64) (Result, error)
}

// Result is one measurement of one config.
type Result struct {
	// Best is the highest offered rate (requests/s) that met the SLO; 0: none did.
	Best float64
	// At is the step at Best: the operating point. Without a passing step, the slowest step.
	At Point
	// Steps are every load level measured, in order of rate.
	Steps []Point
	// Dominant is the phase with the largest mean at the operating point (bench's names:
	// client, network, tokenize, queue, inference, server).
	Dominant string
	Phases   bench.Phases
	// Requests is how many requests the server received, warm-ups included: with the
	// workload's distinct texts it says how often the replay repeated a text.
	Requests int
	// TokensMax is the most tokens one request computed, from the server's counts; 0: the
	// server sent none.
	TokensMax float64
	// Report is the bench report behind the result; nil from measurers that have none.
	Report *bench.Report
}

// Point is one step: the load offered, what was answered, and the latency.
type Point struct {
	Offered  float64 `json:"offered_rps"`
	Achieved float64 `json:"achieved_rps"`
	P50      float64 `json:"p50_ms"`
	P95      float64 `json:"p95_ms"`
	P99      float64 `json:"p99_ms"`
	Pass     bool    `json:"pass"`
}

// BenchMeasurer measures a config with the bench engine: it starts a server with the config
// (Serve), runs an open-loop SLO search against it, and stops it.
//
// Every call applies the same load profile: Options' arrivals, seed, warm-up, step and
// timeout. A call without a hint searches widely, from WideStart doubling while the SLO
// holds, in at most WideSteps steps. A call with a hint (the current best rate) starts at
// 0.7 × hint: a pass doubles the rate to 1.4 × hint, a failure halves it, and bench bisects
// between the last pass and the first failure until the bracket is within Resolution or
// NarrowSteps steps were spent.
type BenchMeasurer struct {
	// Serve starts a server for c and returns its base URL and a function that stops it
	// and waits until it has.
	Serve    func(ctx context.Context, c Config) (url string, stop func(), err error)
	Client   bench.Doer
	Workload *bench.Workload
	Model    string
	Route    string
	// Options is the load; Targets, Rates, Concurrency, Repeat and Search are set per call.
	Options     bench.Options
	WideStart   float64 // 0: 16 requests/s
	WideSteps   int     // 0: 8
	NarrowSteps int     // 0: 6
	Resolution  float64 // 0: 0.05
}

// Measure implements Measurer.
func (b *BenchMeasurer) Measure(ctx context.Context, c Config, hint float64) (Result, error) {
	url, stop, err := b.Serve(ctx, c)
	if err != nil {
		return Result{}, err
	}
	defer stop()
	o := b.Options
	o.Targets = []bench.Target{{URL: url, Route: b.Route, Model: b.Model, Version: c.Version}}
	o.Rates, o.Concurrency, o.Repeat, o.Progress = nil, nil, 1, nil
	o.Search = bench.Search{Start: cmp.Or(b.WideStart, 16), Resolution: cmp.Or(b.Resolution, 0.05), MaxSteps: cmp.Or(b.WideSteps, 8)}
	if hint > 0 {
		o.Search.Start = max(1, math.Round(0.7*hint*10)/10)
		o.Search.MaxSteps = cmp.Or(b.NarrowSteps, 6)
	}
	rep, err := bench.Measure(ctx, b.Client, b.Workload, o)
	if rep == nil {
		return Result{}, err
	}
	return FromReport(rep), err
}

// FromReport reads a one-target bench report as a Result.
func FromReport(rep *bench.Report) Result {
	r := Result{Report: rep}
	if len(rep.Runs) == 0 || len(rep.Runs[0].Versions) == 0 {
		return r
	}
	v := rep.Runs[0].Versions[0]
	r.Best = v.Best
	at := -1
	for i, st := range v.Steps {
		p := Point{Offered: st.Offered, Achieved: st.Achieved, P50: st.Latency.P50, P95: st.Latency.P95, P99: st.Latency.P99, Pass: st.Pass != nil && *st.Pass}
		r.Steps = append(r.Steps, p)
		r.Requests += st.Sent + int(math.Round(st.Offered*rep.Load.WarmupS))
		if p.Pass && st.Offered == v.Best {
			at = i
		}
	}
	if at < 0 && len(v.Steps) > 0 {
		at = 0 // bench sorts steps by rate: the slowest
	}
	if at >= 0 {
		r.At = r.Steps[at]
		r.Dominant = v.Steps[at].Dominant
		r.Phases = v.Steps[at].Phases
	}
	if rep.Workload.Tokens != nil {
		r.TokensMax = rep.Workload.Tokens.Max
	}
	return r
}
