package plan

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Schema names the JSON layout of a Result.
const Schema = "ortserve.plan/v1"

// DefaultMaxRequests is how many requests a policy's simulation runs at most before time is
// compressed: a few seconds of one core.
const DefaultMaxRequests = 20e6

// Options are one `server plan`.
type Options struct {
	Point Point
	Trace *Trace
	// Fit is the replica model when fitted already (FitModel); nil fits one to Point with
	// Servers and MaxInFlight.
	Fit *Fit
	// Servers per replica; 0: fitted to the report (FitModel).
	Servers int
	// MaxInFlight is a replica's admission limit (ortserve's limits.max_in_flight); 0: none.
	MaxInFlight int
	// Scaler is the autoscaler; Min and Max 0 take the sizing's.
	Scaler Autoscaler
	Size   SizeOptions
	// Policies to compare: "queue" (requests in flight per pod, at the sizing's target)
	// and "cpu" (busy fraction of the servers, at CPUTarget).
	Policies  []string
	CPUTarget float64
	// QueueWindow and CPUWindow are how far back each policy's metric is averaged (0: one
	// sync period): the chart's prometheus-adapter rules average in flight over 1 minute,
	// metrics-server reports CPU over about 15 s.
	QueueWindow, CPUWindow time.Duration
	Random                 bool    // balance at random, not round robin
	Price                  float64 // per replica-hour; 0: the report's
	// MaxRequests bounds the requests one policy simulates; a longer trace is compressed.
	MaxRequests float64
	Seed        uint64
}

// Result is a plan: the model, the sizing and what each policy did.
type Result struct {
	Schema   string     `json:"schema"`
	Version  string     `json:"version"`
	SLOMs    float64    `json:"slo_p95_ms"`
	Trace    TraceInfo  `json:"trace"`
	Fit      *Fit       `json:"fit"`
	Sizing   Sizing     `json:"sizing"`
	Scaler   ScalerInfo `json:"autoscaler"`
	Compress float64    `json:"compress"`
	Balance  string     `json:"balance"`
	Price    float64    `json:"price_per_hour,omitempty"`
	Seed     uint64     `json:"seed"`
	Outcomes []*Outcome `json:"outcomes"`
	Notes    []string   `json:"notes,omitempty"`
	Elapsed  float64    `json:"elapsed_s"`
	trace    *Trace     // for the views
	scaler   Autoscaler // as simulated
}

// TraceInfo describes the traffic simulated.
type TraceInfo struct {
	Name      string  `json:"name"`
	DurationS float64 `json:"duration_s"`
	Peak      float64 `json:"peak_rps"`
	Trough    float64 `json:"trough_rps"`
	Requests  float64 `json:"requests"` // expected
}

// ScalerInfo is Autoscaler in seconds, for the JSON.
type ScalerInfo struct {
	Min         int     `json:"min_replicas"`
	Max         int     `json:"max_replicas"`
	SyncS       float64 `json:"sync_s"`
	Tolerance   float64 `json:"tolerance"`
	UpWindowS   float64 `json:"scale_up_window_s"`
	DownWindowS float64 `json:"scale_down_window_s"`
	UpPods      int     `json:"scale_up_pods"`
	UpPercent   float64 `json:"scale_up_percent"`
	UpPeriodS   float64 `json:"scale_up_period_s"`
	DownPercent float64 `json:"scale_down_percent"`
	DownPeriodS float64 `json:"scale_down_period_s"`
	StartupS    float64 `json:"startup_s"`
}

// Run fits the model, sizes the deployment and simulates each policy (concurrently).
func Run(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	if o.Trace == nil {
		return nil, errors.New("plan: no traffic given")
	}
	if len(o.Policies) == 0 {
		return nil, errors.New("plan: no policy to simulate: give queue, cpu or both")
	}
	if o.Price == 0 {
		o.Price = o.Point.Price
	}
	if o.MaxRequests <= 0 {
		o.MaxRequests = DefaultMaxRequests
	}
	fit := o.Fit
	if fit == nil {
		var err error
		if fit, err = FitModel(ctx, o.Point, o.Servers, o.MaxInFlight, o.Seed); err != nil {
			return nil, err
		}
	}
	sz, err := Size(o.Point, o.Trace.Peak(), o.Trace.Trough(), o.Size)
	if err != nil {
		return nil, err
	}
	sc := o.Scaler
	if sc.Min == 0 {
		sc.Min = sz.MinReplicas
	}
	if sc.Max == 0 {
		sc.Max = max(sz.MaxReplicas, sc.Min)
	}
	if sc.Min < 1 || sc.Max < sc.Min {
		return nil, fmt.Errorf("plan: replicas from %d to %d: want 1 ≤ min ≤ max", sc.Min, sc.Max)
	}
	r := &Result{
		Schema: Schema, Version: o.Point.Version, SLOMs: sz.SLOMs,
		Trace: TraceInfo{Name: o.Trace.Name, DurationS: o.Trace.Duration().Seconds(),
			Peak: o.Trace.Peak(), Trough: o.Trace.Trough(), Requests: o.Trace.Requests()},
		Fit: fit, Sizing: sz, Compress: max(1, o.Trace.Requests()/o.MaxRequests),
		Balance: "round robin", Price: o.Price, Seed: o.Seed,
		Scaler: ScalerInfo{Min: sc.Min, Max: sc.Max, SyncS: sc.Sync.Seconds(), Tolerance: sc.Tolerance,
			UpWindowS: sc.UpWindow.Seconds(), DownWindowS: sc.DownWindow.Seconds(), StartupS: sc.Startup.Seconds(),
			UpPods: sc.UpPods, UpPercent: sc.UpPercent, UpPeriodS: sc.UpPeriod.Seconds(),
			DownPercent: sc.DownPercent, DownPeriodS: sc.DownPeriod.Seconds()},
		trace: o.Trace, scaler: sc,
	}
	if o.Random {
		r.Balance = "random"
	}
	initial := int(math.Ceil(o.Trace.RPS[0] / sz.PerPod))
	var sims []Sim
	for _, name := range o.Policies {
		p := Policy{Name: name}
		switch name {
		case "queue":
			p.Metric, p.Target, p.Window = InFlight, sz.TargetInFlight, o.QueueWindow
		case "cpu":
			p.Metric, p.Target, p.Window = CPU, o.CPUTarget, o.CPUWindow
			if !(p.Target > 0 && p.Target <= 1) {
				return nil, fmt.Errorf("plan: CPU target %v: want a fraction from 0 to 1, as 0.7", o.CPUTarget)
			}
		default:
			return nil, fmt.Errorf("plan: unknown policy %q: use queue, cpu or both", name)
		}
		sims = append(sims, Sim{
			Trace: o.Trace, Compress: r.Compress, Model: fit.Model, Policy: p, Scaler: sc,
			Initial: initial, SLO: time.Duration(sz.SLOMs * float64(time.Millisecond)),
			Random: o.Random, Seed: o.Seed,
		})
	}
	r.Outcomes = make([]*Outcome, len(sims))
	errs := make([]error, len(sims))
	var wg sync.WaitGroup
	for i, s := range sims {
		wg.Go(func() { r.Outcomes[i], errs[i] = s.Run(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, out := range r.Outcomes {
		if o.Price > 0 {
			out.Cost = out.ReplicaHours * o.Price
		}
	}
	r.Notes = notes(r)
	r.Elapsed = time.Since(start).Seconds()
	return r, nil
}

// notes are what to know before reading the numbers, and the comparison in words.
func notes(r *Result) []string {
	var n []string
	if r.Compress > 1 {
		n = append(n, fmt.Sprintf("time compressed %s×: the %s trace ran in %s of simulated time at its own rates, so traffic changed %s× faster than in the trace against the same %s syncs and %s start-up; requests over the SLO are pessimistic, replica-hours are in trace time, minutes are simulated ones (a larger --max-requests compresses less)",
			shortNum(r.Compress), durText(r.Trace.DurationS), durText(r.Trace.DurationS/r.Compress), shortNum(r.Compress), durText(r.Scaler.SyncS), durText(r.Scaler.StartupS)))
	}
	f := r.Fit
	if f.From.Offered > 0.6*r.Sizing.Best {
		n = append(n, fmt.Sprintf("the lowest measured rate (%s rps) is %s of the best: the service time fitted to it holds some queueing, so the model is pessimistic; measure lower rates (server bench --rate) for a better fit",
			shortNum(f.From.Offered), pct(f.From.Offered/r.Sizing.Best)))
	}
	var worst Check
	for _, c := range f.Checks {
		if c.Pass && c.ModelP95 > 0 && math.Abs(math.Log(c.ModelP95/c.MeasuredP95)) > math.Abs(math.Log(max(worst.ModelP95, 1e-9)/max(worst.MeasuredP95, 1e-9))) {
			worst = c
		}
	}
	if worst.MeasuredP95 > 0 && math.Abs(worst.ModelP95/worst.MeasuredP95-1) > 0.25 {
		n = append(n, fmt.Sprintf("the model is off by more than 25%% at %s rps: p95 %s modelled, %s measured (the fit table); the measurement's steps are noisy or the server is not a fixed set of servers (batching grows with load)",
			shortNum(worst.Offered), msText(worst.ModelP95), msText(worst.MeasuredP95)))
	}
	// A target that holds pods past the best measured rate rests on the model alone there.
	if c := r.outcome("cpu"); c != nil {
		if perPod := c.Policy.Target * f.Model.Capacity(); perPod > r.Sizing.Best {
			s := fmt.Sprintf("CPU at %s holds pods near %s rps, past the best rate measured at the SLO (%s rps): there the model extrapolates",
				pct(c.Policy.Target), shortNum(perPod), shortNum(r.Sizing.Best))
			for _, ch := range f.Checks {
				if ch.Offered > r.Sizing.Best && !ch.Pass {
					s += fmt.Sprintf(", and the measurement failed the SLO at %s rps (p95 %s)", shortNum(ch.Offered), msText(ch.MeasuredP95))
					break
				}
			}
			n = append(n, s)
		}
	}
	if q, c := r.outcome("queue"), r.outcome("cpu"); q != nil && c != nil {
		n = append(n, compare(q, c))
	}
	return n
}

func (r *Result) outcome(name string) *Outcome {
	for _, o := range r.Outcomes {
		if o.Policy.Name == name {
			return o
		}
	}
	return nil
}

// compare says in words how queue-depth scaling did against CPU scaling, from the numbers.
// The SLO is held over the run when at most 5% of requests were over it (the run's p95).
func compare(q, c *Outcome) string {
	held := func(o *Outcome) bool { return o.Requests > 0 && o.OverFraction() <= 0.05 }
	word := map[bool]string{true: "held", false: "missed"}
	s := fmt.Sprintf("queue depth %s the SLO over the run (%s of requests over it, %d of %d minutes breached, the longest run %d); CPU %s it (%s, %d of %d, %d)",
		word[held(q)], pct(q.OverFraction()), q.Breached, q.Windows, q.LongestBreach,
		word[held(c)], pct(c.OverFraction()), c.Breached, c.Windows, c.LongestBreach)
	switch {
	case held(q) && !held(c):
		s += ": scaling on queue depth held it where CPU scaling did not"
	case !held(q) && held(c):
		s += ": scaling on CPU held it where queue depth did not"
	case q.OverSLO < c.OverSLO*4/5 && q.LongestBreach <= c.LongestBreach:
		s += ": queue depth sent fewer requests over it"
	case c.OverSLO < q.OverSLO*4/5 && c.LongestBreach <= q.LongestBreach:
		s += ": CPU sent fewer requests over it"
	default:
		s += ": the two did about as well on the SLO"
	}
	if c.ReplicaHours > 0 {
		s += fmt.Sprintf("; queue depth used %s the replica-hours of CPU (each policy's target holds pods at a different rate: the ≈ rps/pod column)", pct(q.ReplicaHours/c.ReplicaHours))
	}
	return s
}

func pct(f float64) string {
	p := f * 100
	switch {
	case p == 0:
		return "0%"
	case p < 0.01:
		return "<0.01%"
	case p < 10:
		return shortNum(math.Round(p*100)/100) + "%"
	}
	return fmt.Sprintf("%.0f%%", p)
}

// durText prints seconds as "24 h", "30 min", "45 s".
func durText(s float64) string {
	switch {
	case s >= 3600 && math.Mod(s, 3600) == 0:
		return fmt.Sprintf("%.0f h", s/3600)
	case s >= 3600:
		return shortNum(s/3600) + " h"
	case s >= 60:
		return shortNum(s/60) + " min"
	}
	return shortNum(s) + " s"
}
