package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"
)

// Options is a whole bench: the targets compared, the load applied to each, and what they
// are judged against.
type Options struct {
	Targets []Target // compared side by side; steps interleave across them
	// Rates is the open-loop sweep in requests/s. Empty with an SLO: search for the highest
	// rate whose p95 meets it.
	Rates []float64
	// Concurrency is a closed-loop sweep in clients; it replaces Rates when set.
	Concurrency []int
	Poisson     bool
	Inputs      int
	Warmup      time.Duration
	Step        time.Duration
	// MinRequests lengthens an open-loop step past Step until it spans this many requests
	// at its rate: a p95 from a few hundred requests near capacity strays by tens of
	// milliseconds between windows of one setting. 0: every step lasts Step.
	MinRequests int
	Timeout     time.Duration
	MaxInFlight int
	Seed        uint64
	SLO         *SLO
	Search      Search
	// KeepGoing sweeps every rate even after a version saturates; by default a version's
	// sweep stops at its first saturated step (throughput under 80% of offered, or over 10%
	// of requests shed).
	KeepGoing bool
	Repeat    int
	Price     float64 // per hour, for cost per million requests
	// Offline is raw session throughput per target name, measured beforehand (--offline).
	Offline map[string][]OfflinePoint
	// Progress, if set, hears about each step as it starts.
	Progress func(Progress)
	// PrecisePacing sends open-loop arrivals within microseconds of their time
	// (StepSpec.Precise); it needs the real clock.
	PrecisePacing bool
}

// Search bounds the search for the highest rate meeting the SLO: from Start, double while
// the SLO holds, then bisect until the bracket is within Resolution (relative) or MaxSteps
// steps were spent on the version.
type Search struct {
	Start      float64
	Resolution float64
	MaxSteps   int
	// Confirm is how many more windows a step that fails the SLO gets at the same rate
	// before the rate counts as failed, so that one stall of a shared host does not end
	// the search. A saturated step (saturated) fails at once. Every window is reported;
	// the retries do not count against MaxSteps. 0: a failure counts at once.
	Confirm int
}

// Progress is where a bench stands.
type Progress struct {
	Run, Runs   int
	Target      string
	Rate        float64
	Concurrency int
	Step, Steps int // Steps is an estimate when searching
	Elapsed     time.Duration
}

// DefaultOptions are bench's defaults: Poisson arrivals, one input per request, 1 s warm-up
// and 4 s measured per step, a 10 s request timeout, and a search from 16 requests/s to
// within 10% in at most 10 steps per version.
func DefaultOptions() Options {
	return Options{
		Poisson: true, Inputs: 1, Warmup: time.Second, Step: 4 * time.Second,
		Timeout: 10 * time.Second, MaxInFlight: 4096, Seed: 1, Repeat: 1,
		Search: Search{Start: 16, Resolution: 0.1, MaxSteps: 10},
	}
}

// Validate reports the first option that cannot work, as one line a user can act on.
func (o Options) Validate() error {
	switch {
	case len(o.Targets) == 0:
		return errors.New("bench: nothing to measure: name a model and versions")
	case len(o.Rates) == 0 && len(o.Concurrency) == 0 && o.SLO == nil:
		return errors.New("bench: no load given: pass --rate, --concurrency, or an --slo to search for the highest rate that meets it")
	case len(o.Concurrency) > 0 && len(o.Rates) > 0:
		return errors.New("bench: --rate and --concurrency exclude each other: open loop or closed loop, not both")
	case o.Inputs < 1:
		return errors.New("bench: --inputs must be at least 1")
	case o.Step <= 0:
		return errors.New("bench: --step must be positive")
	case o.MinRequests < 0:
		return errors.New("bench: --min-requests must be 0 (off) or more")
	case o.Search.Confirm < 0:
		return errors.New("bench: --search-confirm must be 0 (off) or more")
	case o.Repeat < 1:
		return errors.New("bench: --repeat must be at least 1")
	case len(o.Rates) == 0 && len(o.Concurrency) == 0 && (o.Search.Start <= 0 || o.Search.MaxSteps < 1 || o.Search.Resolution <= 0):
		return errors.New("bench: the SLO search needs a positive start rate, resolution and step budget")
	}
	for _, t := range o.Targets {
		if err := CheckRoute(t.Route); err != nil {
			return err
		}
	}
	return nil
}

// Measure measures every target under the options' load, o.Repeat times, and returns the
// report. Within a run, steps interleave across targets (the first target's order rotates
// each round), so drift of a shared, noisy machine hits them alike. If ctx ends, Measure
// returns what it measured so far with ctx's error.
func Measure(ctx context.Context, c Doer, w *Workload, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	r := &Report{
		Schema: Schema, Started: time.Now().UTC(),
		Host:   Host{CPUs: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH},
		Target: o.Targets[0].URL, Route: o.Targets[0].Route,
		Workload: w.Summary(), SLO: o.SLO, Price: o.Price,
		Load: LoadSpec{
			Mode: "open", Arrival: "constant", Search: len(o.Rates) == 0 && len(o.Concurrency) == 0,
			Inputs: o.Inputs, WarmupS: o.Warmup.Seconds(), StepS: o.Step.Seconds(), MinRequests: o.MinRequests,
			Confirm: o.Search.Confirm, MaxInFlight: o.MaxInFlight, TimeoutS: o.Timeout.Seconds(), Seed: int64(o.Seed),
		},
	}
	if o.Poisson {
		r.Load.Arrival = "poisson"
	}
	if len(o.Concurrency) > 0 {
		r.Load.Mode, r.Load.Arrival = "closed", ""
	}
	start := time.Now()
	var tokens []float64
	for run := range o.Repeat {
		res, err := o.run(ctx, c, w, run, start, &tokens)
		r.Runs = append(r.Runs, Run{Versions: res})
		if err != nil {
			return r, err
		}
	}
	if len(tokens) > 0 {
		d := Summarize(tokens)
		r.Workload.Tokens = &d
	}
	r.Variance = variance(r.Runs)
	r.Notes = notes(r)
	return r, nil
}

// prober picks a target's next load level.
type prober interface {
	next() (spec StepSpec, ok bool)
	saw(Step)
}

func (o Options) run(ctx context.Context, c Doer, w *Workload, run int, start time.Time, tokens *[]float64) ([]VersionResult, error) {
	res := make([]VersionResult, len(o.Targets))
	probers := make([]prober, len(o.Targets))
	steps := 0
	for i, t := range o.Targets {
		res[i] = VersionResult{Name: t.Name(), Model: t.Model, Version: t.Version, Offline: o.Offline[t.Name()]}
		probers[i] = o.prober()
	}
	switch {
	case len(o.Concurrency) > 0:
		steps = len(o.Concurrency) * len(o.Targets)
	case len(o.Rates) > 0:
		steps = len(o.Rates) * len(o.Targets)
	default:
		steps = o.Search.MaxSteps * len(o.Targets)
	}
	done := 0
	for round := 0; ; round++ {
		active := false
		for k := range o.Targets {
			i := (k + round) % len(o.Targets)
			spec, ok := probers[i].next()
			if !ok {
				continue
			}
			active = true
			spec.Seed = o.Seed + uint64(run)*1000 + uint64(round)
			spec.Duration = o.window(spec)
			done++
			if o.Progress != nil {
				o.Progress(Progress{Run: run + 1, Runs: o.Repeat, Target: res[i].Name, Rate: spec.Rate, Concurrency: spec.Concurrency, Step: done, Steps: max(steps, done), Elapsed: time.Since(start)})
			}
			st, err := RunStep(ctx, c, o.Targets[i], w, spec)
			if err != nil {
				return res, err
			}
			o.judge(&st)
			probers[i].saw(st)
			res[i].Steps = append(res[i].Steps, st)
			if st.Interrupted || ctx.Err() != nil {
				return res, ctx.Err()
			}
		}
		if !active {
			break
		}
	}
	for i := range res {
		o.finish(&res[i])
		for _, st := range res[i].Steps {
			*tokens = append(*tokens, st.tokens...)
		}
	}
	return res, nil
}

// window is a step's measured window: Step, or longer for an open-loop step that would
// otherwise span fewer than MinRequests requests.
func (o Options) window(s StepSpec) time.Duration {
	if o.MinRequests == 0 || s.Rate <= 0 {
		return s.Duration
	}
	need := time.Duration(float64(o.MinRequests) / s.Rate * float64(time.Second)).Round(time.Millisecond)
	return max(s.Duration, need)
}

func (o Options) spec() StepSpec {
	return StepSpec{Poisson: o.Poisson, Warmup: o.Warmup, Duration: o.Step, Timeout: o.Timeout, MaxInFlight: o.MaxInFlight, Inputs: o.Inputs, Precise: o.PrecisePacing}
}

func (o Options) prober() prober {
	switch {
	case len(o.Concurrency) > 0:
		return &sweep{base: o.spec(), n: len(o.Concurrency), set: func(s *StepSpec, i int) { s.Concurrency = o.Concurrency[i] }, keepGoing: o.KeepGoing}
	case len(o.Rates) > 0:
		return &sweep{base: o.spec(), n: len(o.Rates), set: func(s *StepSpec, i int) { s.Rate = o.Rates[i] }, keepGoing: o.KeepGoing}
	}
	return &search{base: o.spec(), Search: o.Search, rate: o.Search.Start}
}

// sweep walks a fixed list of load levels, stopping after a saturated step.
type sweep struct {
	base      StepSpec
	n, i      int
	set       func(*StepSpec, int)
	keepGoing bool
	stopped   bool
}

func (s *sweep) next() (StepSpec, bool) {
	if s.stopped || s.i >= s.n {
		return StepSpec{}, false
	}
	spec := s.base
	s.set(&spec, s.i)
	s.i++
	return spec, true
}

func (s *sweep) saw(st Step) {
	if !s.keepGoing && saturated(st) {
		s.stopped = true
	}
}

// saturated reports a step past what the server can do: it shed over 10% of requests, or
// (open loop) answered under 80% of the offered rate.
func saturated(st Step) bool {
	if st.Sent == 0 {
		return true
	}
	if float64(st.Rejected+st.Errors+st.Timeouts) > 0.1*float64(st.Sent) {
		return true
	}
	return st.Offered > 0 && st.Achieved < 0.8*st.Offered
}

// search doubles the rate while steps pass, then bisects between the last pass and the
// first failure. A failure is measured again up to Confirm times first; it counts only
// if every window at that rate fails.
type search struct {
	base StepSpec
	Search
	lo, hi, rate float64
	steps        int
	tries        int // windows after the first at the current rate: above 0, the next step is a retry
	done         bool
}

func (s *search) next() (StepSpec, bool) {
	retry := s.tries > 0
	if s.done || s.rate < 1 || (s.steps >= s.MaxSteps && !retry) {
		return StepSpec{}, false
	}
	if !retry {
		s.steps++
	}
	spec := s.base
	spec.Rate = math.Round(s.rate*10) / 10
	return spec, true
}

func (s *search) saw(st Step) {
	if st.Pass != nil && !*st.Pass && s.tries < s.Confirm && !saturated(st) {
		s.tries++
		return
	}
	s.tries = 0
	if st.Pass != nil && *st.Pass {
		s.lo = max(s.lo, st.Offered)
	} else if s.hi == 0 || st.Offered < s.hi {
		s.hi = st.Offered
	}
	switch {
	case s.hi == 0:
		s.rate = s.lo * 2
	case (s.hi-s.lo)/s.hi <= s.Resolution:
		s.done = true
	default:
		s.rate = (s.lo + s.hi) / 2
	}
}

// judge marks a step against the SLO: p95 within target, at most 1% of requests failed or
// shed, and (open loop) the server answering at least 90% of the rate that arrived.
func (o Options) judge(st *Step) {
	if o.SLO == nil {
		return
	}
	var why []string
	bad := st.Rejected + st.Errors + st.Timeouts
	switch {
	case st.OK == 0:
		why = append(why, "no request succeeded")
	case st.Latency.P95 > ms(o.SLO.P95):
		why = append(why, fmt.Sprintf("p95 %.1f ms > %v", st.Latency.P95, o.SLO.P95))
	}
	if st.Sent > 0 && float64(bad) > 0.01*float64(st.Sent) {
		why = append(why, fmt.Sprintf("%d of %d requests failed or shed", bad, st.Sent))
	}
	// Against the requests that did arrive in the window, not the nominal rate: a Poisson
	// schedule's count strays from rate × window by its square root.
	if arrived := float64(st.Sent) / st.DurationS; st.Offered > 0 && st.Achieved < 0.9*arrived {
		why = append(why, fmt.Sprintf("answered %.0f of %.0f rps that arrived", st.Achieved, arrived))
	}
	pass := len(why) == 0
	st.Pass = &pass
	if !pass {
		st.Why = joinWhy(why)
	}
}

func joinWhy(why []string) string {
	s := why[0]
	for _, w := range why[1:] {
		s += "; " + w
	}
	return s
}

// finish sorts a version's steps by load and works out its operating point, efficiency,
// verdict and plan.
func (o Options) finish(v *VersionResult) {
	slices.SortStableFunc(v.Steps, func(a, b Step) int {
		if a.Offered != b.Offered {
			return cmpFloat(a.Offered, b.Offered)
		}
		return a.Concurrency - b.Concurrency
	})
	best := -1
	for i, st := range v.Steps {
		if st.Pass != nil && *st.Pass && st.Offered > 0 && (best < 0 || st.Offered > v.Steps[best].Offered) {
			best = i
		}
	}
	if best >= 0 {
		v.Best = v.Steps[best].Offered
		v.BestItems = v.Best * float64(o.Inputs)
	}
	var raw float64
	for _, p := range v.Offline {
		raw = max(raw, p.ItemsPerS)
	}
	if raw > 0 {
		v.Efficiency = v.BestItems / raw
	}
	if o.SLO == nil || v.Steps == nil || v.Steps[0].Concurrency > 0 {
		return
	}
	switch {
	case best < 0:
		v.Verdict = &Verdict{Why: fmt.Sprintf("no rate measured met p95 ≤ %v", o.SLO.P95)}
	case o.SLO.RPS > 0 && v.Best < o.SLO.RPS:
		v.Verdict = &Verdict{Why: fmt.Sprintf("p95 ≤ %v up to %.0f rps, short of the %.0f rps target", o.SLO.P95, v.Best, o.SLO.RPS)}
	default:
		v.Verdict = &Verdict{Meets: true, Why: fmt.Sprintf("p95 %.1f ms ≤ %v at %.0f rps", v.Steps[best].Latency.P95, o.SLO.P95, v.Best)}
	}
	if best >= 0 {
		v.Plan = plan(o.SLO.RPS, v.Best, v.Steps[best].Latency.P95, o.Price)
	}
}

// plan sizes a deployment for target requests/s from one replica's best rate at the SLO:
// replicas with 30% headroom, the concurrency Little's Law implies per replica at that
// rate and p95, and the cost of a million requests at that rate.
func plan(target, best, p95ms, price float64) *Plan {
	p := &Plan{TargetRPS: target, InFlight: int(math.Ceil(best * p95ms / 1e3))}
	if target > 0 {
		p.Replicas = int(math.Ceil(target * 1.3 / best))
	}
	if price > 0 {
		p.CostPerMillion = price / (best * 3600) * 1e6
	}
	return p
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// variance is the spread of each version's results across runs; nil for one run.
func variance(runs []Run) []Variance {
	if len(runs) < 2 {
		return nil
	}
	var out []Variance
	for i, v := range runs[0].Versions {
		vr := Variance{Name: v.Name}
		var best []float64
		for _, r := range runs {
			if i < len(r.Versions) {
				best = append(best, r.Versions[i].Best)
			}
		}
		vr.Best = spread(best)
		// The highest load level every run measured, preferring one every run passed: the
		// spread of a step past saturation says little.
		var rate float64
		for _, passed := range []bool{true, false} {
			for _, st := range v.Steps {
				if st.Offered > rate && st.OK > 0 && allHave(runs, i, st.Offered, passed) {
					rate = st.Offered
				}
			}
			if rate > 0 {
				break
			}
		}
		if rate > 0 {
			vr.Rate = rate
			var p50, p95 []float64
			for _, r := range runs {
				for _, st := range r.Versions[i].Steps {
					if st.Offered == rate {
						p50, p95 = append(p50, st.Latency.P50), append(p95, st.Latency.P95)
						break
					}
				}
			}
			vr.P50, vr.P95 = spread(p50), spread(p95)
		}
		out = append(out, vr)
	}
	return out
}

// allHave reports whether every run measured version i at rate, and (if passed) met the
// SLO there.
func allHave(runs []Run, i int, rate float64, passed bool) bool {
	for _, r := range runs {
		if i >= len(r.Versions) || !slices.ContainsFunc(r.Versions[i].Steps, func(s Step) bool {
			return s.Offered == rate && s.OK > 0 && (!passed || s.Pass == nil || *s.Pass)
		}) {
			return false
		}
	}
	return true
}

func spread(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := Spread{Min: slices.Min(xs), Max: slices.Max(xs)}
	for _, x := range xs {
		s.Mean += x
	}
	s.Mean /= float64(len(xs))
	if len(xs) > 1 {
		for _, x := range xs {
			s.SD += (x - s.Mean) * (x - s.Mean)
		}
		s.SD = math.Sqrt(s.SD / float64(len(xs)-1))
	}
	if s.Mean != 0 {
		s.CV = s.SD / s.Mean
	}
	return s
}

// notes are the warnings about the whole run a reader needs before trusting the numbers;
// each step's own flags (Little's Law, bimodal latency, errors) are in its data and views.
func notes(r *Report) []string {
	var out []string
	for _, v := range r.Runs[0].Versions {
		var flagged []string
		for _, st := range v.Steps {
			if st.Little.Flag && st.Little.Deviation > 0 && st.OK > 0 && (st.Pass == nil || *st.Pass) {
				flagged = append(flagged, stepLabel(st))
			}
		}
		if len(flagged) > 0 {
			out = append(out, fmt.Sprintf("%s: a hidden queue at %s, below saturation: requests waited before they were on the wire; raise --max-in-flight or check the client's connection pool before trusting these latencies", v.Name, joinWhy(flagged)))
		}
	}
	return out
}

func stepLabel(st Step) string {
	if st.Concurrency > 0 {
		return fmt.Sprintf("%d clients", st.Concurrency)
	}
	return fmt.Sprintf("%g rps", st.Offered)
}
