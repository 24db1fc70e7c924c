package tune

// The tuner's entries and statistics: an entry filled as its experiment ends, the profile of
// the dominant phase, and the noise a gain must pass (threshold).

import (
	"cmp"
	"fmt"
	"math"
	"strings"
	"time"
)

func (e *Entry) fill(r Result, price float64) {
	e.Best, e.Dominant, e.Steps = r.Best, r.Dominant, r.Steps
	if r.Best > 0 {
		e.P50, e.P95, e.P99, e.Achieved = r.At.P50, r.At.P95, r.At.P99, r.At.Achieved
		if price > 0 {
			e.CostPerMillion = price / (r.Best * 3600) * 1e6
		}
	}
}

func (t *tuner) count() int {
	n := 0
	for _, e := range t.o.Entries {
		n = max(n, e.N)
	}
	return n
}

func (t *tuner) add(e Entry, r *Result) {
	e.AtS = time.Since(t.s.Start).Seconds()
	t.o.Entries = append(t.o.Entries, e)
	t.record(r)
}

// set changes entry n and records the diary.
func (t *tuner) set(n int, f func(*Entry)) {
	for i := range t.o.Entries {
		if t.o.Entries[i].N == n && n > 0 {
			f(&t.o.Entries[i])
		}
	}
	t.record(nil)
}

func (t *tuner) note(decision string, l Lever, why string) {
	t.add(Entry{Kind: "note", Lever: l, Decision: decision, Why: why}, nil)
}

func (t *tuner) stop(why string) {
	if t.o.Stopped == "" {
		t.o.Stopped = why
		t.add(Entry{Kind: "stop", Why: why}, nil)
	}
}

func (t *tuner) record(r *Result) {
	if t.s.Record != nil {
		t.summarize()
		t.s.Record(t.o, r)
	}
}

// finish fills the outcome's summary.
func (t *tuner) finish() {
	t.summarize()
	t.record(nil)
}

func (t *tuner) summarize() {
	o := t.o
	o.BaselineRate, o.BaselineRuns = t.mean(o.Baseline), len(t.fresh(o.Baseline))
	// The best config is the last one kept.
	o.Best = o.Baseline
	for _, e := range o.Entries {
		if e.Decision == Kept && e.Cfg != nil {
			o.Best = *e.Cfg
		}
	}
	o.BestRate, o.BestRuns, o.Chosen = t.mean(o.Best), len(t.fresh(o.Best)), t.last[o.Best.key()]
	o.SD, o.Threshold = t.sd(), t.threshold()
	o.ElapsedS = time.Since(t.s.Start).Seconds()
}

// profile notes where the baseline's time goes at its operating point.
func (t *tuner) profile(r Result) {
	p := r.Phases
	var parts []string
	for _, ph := range []struct {
		name string
		ms   float64
	}{{"client", p.Client}, {"network", p.Network}, {"tokenize", p.Tokenize}, {"queue", p.Queue}, {"inference", p.Inference}} {
		parts = append(parts, fmt.Sprintf("%s %.1f", ph.name, ph.ms))
	}
	why := fmt.Sprintf("profile at the baseline's operating point (%.0f rps): dominant phase %s; mean ms: %s", r.Best, cmp.Or(r.Dominant, "unknown"), strings.Join(parts, ", "))
	if t.s.Batch != nil {
		why += "; " + t.s.Batch.String()
	}
	var names []string
	for _, l := range leverOrder(r.Dominant, t.s.GPU) {
		names = append(names, string(l))
	}
	why += "; lever order: " + strings.Join(names, ", ")
	t.note("profile", "", why)
}

// dominant is the first baseline's dominant phase.
func (t *tuner) dominant() string {
	for _, e := range t.o.Entries {
		if e.Kind == "baseline" {
			return e.Dominant
		}
	}
	return ""
}

// fresh are c's best rates that were not picked for being high: all of them, but for a
// config a trial picked, the trial's own run.
func (t *tuner) fresh(c Config) []float64 {
	rs := t.rates[c.key()]
	if t.screened[c.key()] && len(rs) > 1 {
		return rs[1:]
	}
	return rs
}

// mean is c's mean best rate over its fresh runs: the rate claimed for it.
func (t *tuner) mean(c Config) float64 { return avg(t.fresh(c)) }

// sd is the pooled run-to-run standard deviation of the best rate, relative to each
// config's mean, over the configs measured more than once.
func (t *tuner) sd() float64 {
	var ss float64
	var dof int
	for _, rs := range t.rates {
		m := avg(rs)
		if len(rs) < 2 || m <= 0 {
			continue
		}
		for _, r := range rs {
			ss += (r/m - 1) * (r/m - 1)
		}
		dof += len(rs) - 1
	}
	if dof == 0 {
		return 0
	}
	return math.Sqrt(ss / float64(dof))
}

// threshold is the relative gain a change must beat: max(2 × SD, MinGain).
func (t *tuner) threshold() float64 { return max(2*t.sd(), t.s.MinGain) }

func (t *tuner) thresholdText() string {
	return fmt.Sprintf("the threshold %.1f%% = max(2 × SD %.1f%%, %.0f%%)", 100*t.threshold(), 100*t.sd(), 100*t.s.MinGain)
}

func avg(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
