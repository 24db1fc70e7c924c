package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// The SLO controller holds a version's p95 latency at or under a target. It has two levers,
// both read by the batcher: the admission budget (a request is refused with 429 when the
// latency predicted for it, from the time it arrived, would pass the budget) and the batch
// budget (no batch is formed whose predicted run is longer). Every controlPeriod it looks at
// the latencies of the requests completed since its last decision and, once it has enough of
// them, decides:
//
//   - tighten: the observed p95 is over the target. The budget shrinks in proportion
//     (target / p95, between ×0.5 and ×0.9), because the predictions were too optimistic or
//     the work behind the batcher (HTTP, tokenization) grew.
//   - loosen: the p95 is under 80% of the target while requests were being refused. The
//     budget grows by a tenth of the target, up to twice the target: the predictions were
//     too pessimistic.
//   - hold: otherwise.
//
// This is additive increase, multiplicative decrease on a prediction's threshold, the rule
// that congestion control uses for the same reason: overshooting the target costs more than
// undershooting it.
const (
	controlPeriod     = 250 * time.Millisecond
	controlMinSamples = 40              // a decision needs this many latencies…
	controlMaxWindow  = 2 * time.Second // …or this long with at least controlFewSamples
	controlFewSamples = 10
)

// ControlState is what the SLO controller knows and has decided; /info and the metrics show
// it. Durations are in milliseconds.
type ControlState struct {
	TargetP95Ms   float64 `json:"target_p95_ms"`
	BudgetMs      float64 `json:"admission_budget_ms"` // predicted latency a request must fit in
	BatchBudgetMs float64 `json:"batch_budget_ms"`     // longest predicted run of one batch
	ObservedP95Ms float64 `json:"observed_p95_ms"`     // over the last decision's window
	Samples       int     `json:"samples"`             // latencies in that window
	Decision      string  `json:"decision"`            // hold, tighten or loosen
	Decisions     int     `json:"decisions"`           // budget changes so far
	Admitted      int64   `json:"admitted"`
	Refused       int64   `json:"refused"` // by prediction: the SLO or the request's deadline
}

type controller struct {
	target time.Duration

	mu          sync.Mutex
	samples     []time.Duration // latencies completed since the last decision
	refused     int             // in the same window
	windowStart time.Time
	budget      time.Duration
	state       ControlState
}

func newController(target time.Duration, now time.Time) *controller {
	c := &controller{target: target, budget: target * 8 / 10, windowStart: now}
	c.state = ControlState{TargetP95Ms: ms(target), Decision: "hold"}
	c.publish()
	return c
}

func ms(d time.Duration) float64 { return round3(d.Seconds() * 1e3) }

// budgets are the admission and batch budgets now.
func (c *controller) budgets() (admission, batch time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.budget, c.budget / 2
}

// record notes the latency of a completed request.
func (c *controller) record(d time.Duration) {
	c.mu.Lock()
	c.samples = append(c.samples, d)
	c.mu.Unlock()
}

// admitted and refusedOne count admission decisions.
func (c *controller) admitted() {
	c.mu.Lock()
	c.state.Admitted++
	c.mu.Unlock()
}

func (c *controller) refusedOne() {
	c.mu.Lock()
	c.refused++
	c.state.Refused++
	c.mu.Unlock()
}

// tick decides when the window holds enough; it reports whether it decided, and the state.
func (c *controller) tick(now time.Time) (bool, ControlState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.samples)
	waited := now.Sub(c.windowStart)
	if n < controlMinSamples && (waited < controlMaxWindow || (n < controlFewSamples && c.refused == 0)) {
		if waited >= controlMaxWindow && n == 0 && c.refused == 0 {
			c.windowStart = now // idle: start the next window afresh
		}
		return false, c.state
	}
	var p95 time.Duration
	if n > 0 {
		slices.Sort(c.samples)
		p95 = c.samples[min(n-1, (n*95+99)/100-1)]
	}
	floor := c.target / 4
	decision := "hold"
	switch {
	case n > 0 && p95 > c.target:
		f := min(0.9, max(0.5, float64(c.target)/float64(p95)))
		c.budget = max(floor, time.Duration(float64(c.budget)*f))
		decision = "tighten"
	case p95 <= c.target*8/10 && c.refused > 0 && c.budget < 2*c.target:
		c.budget = min(2*c.target, c.budget+c.target/10)
		decision = "loosen"
	}
	if decision != "hold" {
		c.state.Decisions++
	}
	c.state.Decision = decision
	c.state.ObservedP95Ms = ms(p95)
	c.state.Samples = n
	c.publish()
	c.samples = c.samples[:0]
	c.refused = 0
	c.windowStart = now
	return true, c.state
}

func (c *controller) publish() {
	c.state.BudgetMs = ms(c.budget)
	c.state.BatchBudgetMs = ms(c.budget / 2)
}

func (c *controller) snapshot() ControlState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

type arrivalKey struct{}

// WithArrival records in ctx when the request arrived (at the server, before tokenization),
// so that the batcher's admission and SLO controller count the time spent before it.
func WithArrival(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, arrivalKey{}, t)
}

// arrival is when ctx's request arrived, or now if nobody said.
func arrival(ctx context.Context, now time.Time) time.Time {
	if t, ok := ctx.Value(arrivalKey{}).(time.Time); ok && !t.After(now) {
		return t
	}
	return now
}

// ParseSLO reads a latency objective as `serve --slo` and model.yaml's `slo` take it:
// "p95=50ms", or "50ms" (p95 is the only percentile held to). "" and "0" mean none.
func ParseSLO(s string) (time.Duration, error) {
	v := strings.TrimSpace(s)
	if v == "" || v == "0" {
		return 0, nil
	}
	if k, rest, ok := strings.Cut(v, "="); ok {
		if strings.TrimSpace(k) != "p95" {
			return 0, fmt.Errorf("slo %q: only p95 is held to: write p95=50ms", s)
		}
		v = strings.TrimSpace(rest)
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("slo %q: want p95=DURATION, such as p95=50ms", s)
	}
	return d, nil
}

// FormatSLO is ParseSLO's inverse: "" for none.
func FormatSLO(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return "p95=" + d.String()
}
