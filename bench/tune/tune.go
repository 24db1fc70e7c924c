package tune

// The loop. A baseline is measured Repeats times; the spread of those runs (and of every
// later repeat) is the noise. The baseline's operating point names the dominant phase, which
// orders the levers. Then, pass after pass until a pass keeps nothing or the budget ends,
// each lever in turn tries values around the current best, one lever at a time: a trial
// that does not beat the current best by more than the threshold is reverted; one that does
// is confirmed by measuring the current best and the trial again, and kept only if its
// repeat still beats the current best's mean by more than the (updated) threshold. The
// trial's own run is left out of that judgement, and of the rate claimed for the config: it
// was picked for being high, so it is biased upwards (the winner's curse). A kept value moves
// the current best, and the lever goes on one more step in the same direction. When a pass
// keeps nothing, the chosen config is measured again, time allowing, until it has three runs.
//
// Threshold: a gain counts only above max(2 × SD, MinGain), SD being the pooled run-to-run
// standard deviation of the best rate, relative to its mean, over every config measured more
// than once.
//
// Budget: an experiment is not started unless it fits in what is left, by the longest one
// of its kind so far (×1.1); each runs under a context that ends at the deadline, so the
// budget holds even when an estimate is wrong.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ortserve/ortserve/bench"
)

// Settings are a tuning run's inputs besides the Measurer.
type Settings struct {
	Model string
	// Base is the starting config: the serve config given, its sessions and threads
	// resolved as serve resolves them.
	Base Config
	SLO  bench.SLO
	// Price is the price of one server per hour, for the cost of a million requests; 0: none.
	Price float64
	// Budget is the whole run's time, counted from Start (zero: when Run is called). Reserve
	// of it is kept back for what the caller does after Run (writing the outputs).
	Budget  time.Duration
	Start   time.Time
	Reserve time.Duration
	// Repeats is how many times the baseline is measured, for the noise; at least 2.
	Repeats int
	// MinGain is the threshold's floor, relative (0.05: 5%).
	MinGain float64
	// MaxTrials caps the values one lever tries in one pass; 0: 3.
	MaxTrials int
	// MaxExperiments caps the measurements of the whole run, baselines included, as the
	// budget caps its time (Optuna's n_trials beside its timeout); 0: no cap.
	MaxExperiments int
	Cores          int  // CPU cores, for the sessions and threads levers
	GPU            bool // sessions are CUDA streams; threads are not a lever
	// Versions are the model's other versions, with whether a gate report allows them.
	Versions []VersionChoice
	Workload WorkloadInfo
	// Batch is the offline batch-cost model, if one was measured; it orders values to try.
	Batch *BatchModel
	// Pinned are levers that cannot be tuned here, each with why (see Pinned).
	Pinned map[Lever]string
	// Load describes the load profile in a line, for the diary's header.
	Load string
	// Record, if set, hears the outcome so far after every change to the diary, and the
	// Result of a measurement just added (nil otherwise).
	Record func(o *Outcome, r *Result)
}

// Outcome is what a tuning run found: its diary, the baseline and the chosen config.
type Outcome struct {
	Model    string       `json:"model"`
	SLO      bench.SLO    `json:"slo"`
	Price    float64      `json:"price_per_hour,omitempty"`
	BudgetS  float64      `json:"budget_s"`
	Load     string       `json:"load,omitempty"`
	Workload WorkloadInfo `json:"workload"`
	Entries  []Entry      `json:"entries"`
	// Baseline and Best are the starting config and the best one kept, with the mean best
	// rate over their runs (for a config a trial picked, the runs after the trial) and how
	// many runs that is: the rate claimed.
	Baseline     Config  `json:"baseline"`
	BaselineRate float64 `json:"baseline_rps"`
	BaselineRuns int     `json:"baseline_runs"`
	Best         Config  `json:"best"`
	BestRate     float64 `json:"best_rps"`
	BestRuns     int     `json:"best_runs"`
	// Chosen is the entry number of the best config's last measurement: its operating point.
	Chosen int `json:"chosen"`
	// SD is the pooled relative run-to-run SD of the best rate; Threshold the gain a change
	// had to beat when the run ended.
	SD        float64 `json:"sd"`
	Threshold float64 `json:"threshold"`
	Stopped   string  `json:"stopped"`
	ElapsedS  float64 `json:"elapsed_s"`
}

// Kept lists the changes kept, in order.
func (o *Outcome) Kept() []Entry {
	var out []Entry
	for _, e := range o.Entries {
		if e.Decision == Kept {
			out = append(out, e)
		}
	}
	return out
}

// Entry is one line of the diary: a measurement (N > 0) or a note.
type Entry struct {
	N     int     `json:"n,omitempty"`
	Kind  string  `json:"kind"` // baseline, trial, repeat, note, stop
	Lever Lever   `json:"lever,omitempty"`
	Value string  `json:"value,omitempty"`
	From  string  `json:"from,omitempty"` // the lever's value in the current best
	Cfg   *Config `json:"config,omitempty"`
	// At the operating point: the best rate meeting the SLO, its latency and throughput.
	Best           float64 `json:"best_rps"`
	P50            float64 `json:"p50_ms,omitempty"`
	P95            float64 `json:"p95_ms,omitempty"`
	P99            float64 `json:"p99_ms,omitempty"`
	Achieved       float64 `json:"achieved_rps,omitempty"`
	CostPerMillion float64 `json:"cost_per_million,omitempty"`
	Dominant       string  `json:"dominant,omitempty"`
	// ReplayRepeat is, for a config with the cache on, the fraction of the requests that
	// repeated a text the server had answered, as the bench replays the workload.
	ReplayRepeat *float64 `json:"replay_repeat_ratio,omitempty"`
	Steps        []Point  `json:"steps,omitempty"`
	Decision     string   `json:"decision,omitempty"`
	Why          string   `json:"why,omitempty"`
	Report       string   `json:"report,omitempty"` // the bench JSON of the measurement, in the output folder
	AtS          float64  `json:"at_s"`             // seconds from the start when it was written
	DurationS    float64  `json:"duration_s,omitempty"`
}

// Decisions.
const (
	Baseline = "baseline"
	Kept     = "kept"
	Reverted = "reverted"
	Repeat   = "repeat"
	Skipped  = "skipped"
)

// ErrNoBaseline is a baseline that met the SLO at no rate: there is nothing to improve on.
var ErrNoBaseline = errors.New("tune: the baseline met the SLO at no rate: loosen the SLO or check the server")

// errStop ends the loop early: the budget, or an interruption already recorded.
var errStop = errors.New("tune: stop")

type tuner struct {
	m        Measurer
	s        Settings
	o        *Outcome
	rates    map[string][]float64 // best rates per config key
	screened map[string]bool      // configs whose first run was a trial that picked them
	last     map[string]int       // a config's latest entry number
	wide     time.Duration        // longest wide measurement
	narrow   time.Duration        // longest narrow measurement
	deadline time.Time
	measured int     // measurements started
	tokens   float64 // most tokens per request seen
	noted    map[string]bool
}

// Run tunes: baseline, profile, then one lever at a time (see the file comment for the
// rules). It returns the outcome so far with an error when ctx ends, when the baseline
// cannot be measured, or when it meets the SLO at no rate (ErrNoBaseline). The budget ending
// is not an error: it is the usual way a run stops.
func Run(ctx context.Context, m Measurer, s Settings) (*Outcome, error) {
	if s.Start.IsZero() {
		s.Start = time.Now()
	}
	s.Repeats = max(2, s.Repeats)
	s.MinGain = cmp.Or(s.MinGain, 0.05)
	s.MaxTrials = cmp.Or(s.MaxTrials, 3)
	s.Cores = max(1, s.Cores)
	t := &tuner{m: m, s: s, rates: map[string][]float64{}, screened: map[string]bool{}, last: map[string]int{}, noted: map[string]bool{},
		deadline: s.Start.Add(s.Budget - s.Reserve)}
	t.o = &Outcome{Model: s.Model, SLO: s.SLO, Price: s.Price, BudgetS: s.Budget.Seconds(), Load: s.Load, Workload: s.Workload,
		Baseline: s.Base, Best: s.Base}
	err := t.run(ctx)
	if errors.Is(err, errStop) {
		err = nil
	}
	t.finish()
	return t.o, err
}

func (t *tuner) run(ctx context.Context) error {
	base := t.s.Base
	for i := range t.s.Repeats {
		hint := 0.0
		if i > 0 {
			hint = t.mean(base)
		}
		r, n, err := t.measure(ctx, "baseline", "", base, base, hint)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errStop) && i == 0:
			return errors.New("tune: the baseline did not finish within the budget: give a longer --budget or shorter steps")
		case errors.Is(err, errStop):
			t.note("", "", "the baseline could not be measured again: the noise is unknown, so no change can be judged")
			return err
		default:
			return fmt.Errorf("tune: baseline: %w", err)
		}
		t.set(n, func(e *Entry) {
			e.Decision = Baseline
			e.Why = fmt.Sprintf("baseline run %d of %d", i+1, t.s.Repeats)
		})
		if i == 0 && r.Best == 0 {
			t.stop(ErrNoBaseline.Error())
			return ErrNoBaseline
		}
		if i == 0 {
			t.profile(r)
		}
	}
	for _, v := range t.s.Versions {
		if !v.Allowed {
			t.note(Skipped, LeverVersion, v.Why)
		}
	}
	cur := base
	order := leverOrder(t.dominant(), t.s.GPU)
	for pass := 1; ; pass++ {
		kept := false
		for _, l := range order {
			if why := t.unavailable(l, cur); why != "" {
				if !t.noted[why] {
					t.noted[why] = true
					t.note(Skipped, l, why)
				}
				continue
			}
			cands := t.candidates(l, cur)
			for tried := 0; len(cands) > 0 && tried < t.s.MaxTrials; {
				c := cands[0]
				cands = cands[1:]
				if len(t.rates[c.key()]) > 0 {
					continue // measured before: nothing new to learn at this point
				}
				tried++
				ok, err := t.trial(ctx, l, cur, c)
				if err != nil {
					return err
				}
				if ok {
					cands = t.further(l, cur, c)
					cur = c
					kept = true
				}
			}
		}
		if !kept {
			t.settle(ctx, cur)
			if err := ctx.Err(); err != nil {
				return err
			}
			t.stop(fmt.Sprintf("pass %d over the levers kept no change", pass))
			return nil
		}
	}
}

// settle measures the chosen config again, while the budget allows, until it has
// claimRuns measurements: the rate claimed for it is their mean.
func (t *tuner) settle(ctx context.Context, best Config) {
	for len(t.fresh(best)) < claimRuns {
		if time.Now().Add(t.estimate(false)).After(t.deadline) {
			return
		}
		_, n, err := t.measure(ctx, "repeat", "", best, best, t.mean(best))
		if err != nil {
			return
		}
		t.set(n, func(e *Entry) {
			e.Decision, e.Why = Repeat, "repeat of the chosen config: the rate claimed is the mean of its runs"
		})
	}
}

// claimRuns is how many measurements the chosen config gets, time allowing.
const claimRuns = 3

// trial measures c, a change of lever l from cur, and keeps it or reverts it.
func (t *tuner) trial(ctx context.Context, l Lever, cur, c Config) (bool, error) {
	ref := t.mean(cur)
	r, n, err := t.measure(ctx, "trial", l, cur, c, ref)
	if err != nil {
		if errors.Is(err, errStop) || ctx.Err() != nil {
			return false, cmp.Or(ctx.Err(), err)
		}
		t.set(n, func(e *Entry) { e.Decision, e.Why = Reverted, "failed: "+err.Error() })
		return false, nil
	}
	t.screened[c.key()] = true
	gain, thr := r.Best/ref-1, t.threshold()
	var rep *float64
	if c.CacheBytes > 0 {
		v := t.s.Workload.replayRepeat(r.Requests)
		rep = &v
	}
	switch {
	case r.Best == 0:
		t.set(n, func(e *Entry) { e.Decision, e.Why = Reverted, fmt.Sprintf("no rate met p95 ≤ %v", t.s.SLO.P95) })
		return false, nil
	case gain <= thr:
		what := "within the noise"
		if gain < -thr {
			what = "worse, beyond the noise"
		}
		t.set(n, func(e *Entry) {
			e.Decision = Reverted
			e.Why = fmt.Sprintf("%.0f rps against the current best's %.0f (%+.0f%%): %s; a change must gain over %s", r.Best, ref, 100*gain, what, t.thresholdText())
		})
		return false, nil
	case rep != nil && *rep > t.s.Workload.Repeat+0.05:
		t.set(n, func(e *Entry) {
			e.Decision = Reverted
			e.Why = fmt.Sprintf("%+.0f%% (%.0f against %.0f rps), but %.0f%% of the requests repeated a text the server had answered, as the bench replays the workload's %d texts, where the workload itself repeats %.0f%%: the gain is the replay's, not the traffic's; give --data with as many requests as an experiment sends (%d) to judge the cache",
				100*gain, r.Best, ref, 100**rep, t.s.Workload.Texts, 100*t.s.Workload.Repeat, r.Requests)
		})
		return false, nil
	}
	// It looks like a win: measure the current best again, then the change again, and judge
	// the means. Both fit, or neither is started.
	if time.Now().Add(2 * t.estimate(false)).After(t.deadline) {
		t.set(n, func(e *Entry) {
			e.Decision = Reverted
			e.Why = fmt.Sprintf("%+.0f%% looked like a win, but the budget leaves no time to confirm it with repeats", 100*gain)
		})
		t.stop("budget: no time left to confirm a change")
		return false, errStop
	}
	t.set(n, func(e *Entry) {
		e.Decision, e.Why = "confirming", fmt.Sprintf("%+.0f%%: over %s; confirming with repeats", 100*gain, t.thresholdText())
	})
	for _, rc := range []struct {
		c   Config
		why string
	}{{cur, fmt.Sprintf("repeat of the current best, to confirm #%d", n)}, {c, fmt.Sprintf("repeat of #%d's change", n)}} {
		_, k, err := t.measure(ctx, "repeat", l, cur, rc.c, t.mean(rc.c))
		if err != nil {
			if errors.Is(err, errStop) || ctx.Err() != nil {
				t.set(n, func(e *Entry) { e.Decision, e.Why = Reverted, "not confirmed: the run ended during its repeats" })
				return false, cmp.Or(ctx.Err(), err)
			}
			t.set(k, func(e *Entry) { e.Decision, e.Why = Repeat, "failed: "+err.Error() })
			continue
		}
		t.set(k, func(e *Entry) { e.Decision, e.Why = Repeat, rc.why })
	}
	if len(t.rates[c.key()]) < 2 {
		t.set(n, func(e *Entry) { e.Decision, e.Why = Reverted, "not confirmed: its repeat failed" })
		return false, nil
	}
	// Judged on the repeat alone: the trial's own run was picked for being high.
	refs, cands := t.fresh(cur), t.fresh(c)
	ref, mean := avg(refs), avg(cands)
	gain, thr = mean/ref-1, t.threshold()
	ok := gain > thr
	t.set(n, func(e *Entry) {
		e.Decision = Kept
		verb := "beats"
		if !ok {
			e.Decision, verb = Reverted, "did not hold on repeat: within"
		}
		e.Why = fmt.Sprintf("on repeat %.0f rps (the trial's own run left out, picked as it was for being high) against the current best's %.0f over %d runs (%+.0f%%) %s %s",
			mean, ref, len(refs), 100*gain, verb, t.thresholdText())
	})
	return ok, nil
}

// measure runs one experiment and adds it to the diary: kind, the lever changed from cur,
// the config measured. It returns the result and the entry's number; errStop when the
// experiment does not fit in the time left (nothing is recorded then) or was cut by it.
func (t *tuner) measure(ctx context.Context, kind string, l Lever, cur, c Config, hint float64) (Result, int, error) {
	if err := ctx.Err(); err != nil {
		t.stop("interrupted")
		return Result{}, 0, err
	}
	if n := t.s.MaxExperiments; n > 0 && t.measured >= n {
		t.stop(fmt.Sprintf("experiments: %d run, the most allowed", n))
		return Result{}, 0, errStop
	}
	if est := t.estimate(hint == 0); time.Now().Add(est).After(t.deadline) {
		left := max(0, time.Until(t.deadline))
		t.stop(fmt.Sprintf("budget: the next experiment needs about %v, %v is left", est.Round(time.Second), left.Round(time.Second)))
		return Result{}, 0, errStop
	}
	mctx, cancel := context.WithDeadline(ctx, t.deadline)
	defer cancel()
	t.measured++
	begin := time.Now()
	r, err := t.m.Measure(mctx, c, hint)
	took := time.Since(begin)
	cfg := c
	e := Entry{N: t.count() + 1, Kind: kind, Lever: l, Cfg: &cfg, DurationS: took.Seconds()}
	if l != "" {
		e.Value, e.From = l.Value(c), l.Value(cur)
		if l == LeverThreads { // the lever moves sessions with threads: say so
			e.Value += fmt.Sprintf(" (sessions %d)", c.Sessions)
			e.From += fmt.Sprintf(" (sessions %d)", cur.Sessions)
		}
	}
	e.fill(r, t.s.Price)
	if r.Report != nil {
		e.Report = fmt.Sprintf("exp-%02d.json", e.N)
	}
	if c.CacheBytes > 0 && r.Requests > 0 {
		v := t.s.Workload.replayRepeat(r.Requests)
		e.ReplayRepeat = &v
	}
	switch {
	case ctx.Err() != nil:
		e.Decision, e.Why = "interrupted", "interrupted; not judged"
		t.add(e, &r)
		t.stop("interrupted")
		return r, e.N, ctx.Err()
	case mctx.Err() != nil:
		e.Decision, e.Why = "cut", "cut by the time budget; not judged"
		t.add(e, &r)
		t.stop("budget: the last experiment ran past the time left")
		return r, e.N, errStop
	case err != nil:
		t.add(e, &r)
		return r, e.N, err
	}
	if hint == 0 {
		t.wide = max(t.wide, took)
	} else {
		t.narrow = max(t.narrow, took)
	}
	t.tokens = max(t.tokens, r.TokensMax)
	t.rates[c.key()] = append(t.rates[c.key()], r.Best)
	t.last[c.key()] = e.N
	t.add(e, &r)
	return r, e.N, nil
}

// estimate is how long the next experiment may take: the longest of its kind so far, with
// a tenth to spare; a narrow one falls back on the wide ones. The first is not estimated.
func (t *tuner) estimate(wide bool) time.Duration {
	d := t.narrow
	if wide || d == 0 {
		d = max(d, t.wide)
	}
	return d + d/10
}

// leverOrder orders the levers by the dominant phase: the lever that acts on it first.
func leverOrder(dominant string, gpu bool) []Lever {
	var order []Lever
	switch dominant {
	case "queue":
		order = []Lever{LeverQueueDelay, LeverMaxBatch, LeverBatchTokens, LeverSessions, LeverThreads, LeverVersion, LeverCache}
	case "inference":
		order = []Lever{LeverMaxBatch, LeverBatchTokens, LeverSessions, LeverThreads, LeverVersion, LeverQueueDelay, LeverCache}
	case "tokenize":
		order = []Lever{LeverCache, LeverSessions, LeverThreads, LeverMaxBatch, LeverQueueDelay, LeverBatchTokens, LeverVersion}
	default: // client, network, server: the CPU the server and the load share
		order = []Lever{LeverSessions, LeverThreads, LeverMaxBatch, LeverQueueDelay, LeverBatchTokens, LeverVersion, LeverCache}
	}
	if gpu {
		order = slices.DeleteFunc(order, func(l Lever) bool { return l == LeverThreads })
	}
	return order
}
