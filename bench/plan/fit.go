package plan

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Fit is the replica model fitted to a measured operating point, with how well it
// reproduces the measurement.
//
// The fit: the lowest measured rate stands for "no queueing", so its latency, less the
// time outside the server (the client's and the network's, from the timing headers), is
// the service time; a lognormal takes its p50 and p95 from there. The number of servers c
// is then the fewest with which the simulated replica meets the SLO at the best measured
// rate: the model reaches the SLO no later than the measurement did. c is an effective
// concurrency, sessions and batching together, not a setting to copy.
type Fit struct {
	Model   Model  `json:"model"`
	Service string `json:"service"` // the service-time distribution, in words
	// From is the step the service time came from, AtBest the one at the best rate.
	From   Sample `json:"from"`
	AtBest Sample `json:"at_best"`
	// Fitted is false when the servers were given (Options.Servers), not fitted.
	Fitted bool `json:"fitted"`
	// Checks compare the model with every measured step.
	Checks []Check `json:"checks"`
}

// Check is the model against one measured step.
type Check struct {
	Offered      float64 `json:"offered_rps"`
	MeasuredP95  float64 `json:"measured_p95_ms"`
	ModelP95     float64 `json:"model_p95_ms"` // 0: the model is saturated at this rate
	MeasuredMean float64 `json:"measured_mean_ms"`
	ModelMean    float64 `json:"model_mean_ms"`
	Pass         bool    `json:"pass"`
}

// fitRequests is how many requests one fitting simulation runs: enough for a p95 within a
// few percent, few enough that a scan over c takes milliseconds.
const fitRequests = 20000

// maxServers bounds the scan over c; no measured server is that wide.
const maxServers = 1024

// FitModel fits a replica's model to p. servers > 0 takes c as given instead of fitting it;
// maxInFlight is the replica's admission limit (0: none).
func FitModel(ctx context.Context, p Point, servers, maxInFlight int, seed uint64) (*Fit, error) {
	if err := checkPoint(p); err != nil {
		return nil, err
	}
	low := p.Steps[0]
	best, ok := p.at(p.Best)
	if !ok {
		return nil, fmt.Errorf("plan: %s: no step at its best rate %v", p.Version, p.Best)
	}
	over := low.OverheadMs
	if low.P50Ms-over <= 0 {
		over = 0
	}
	p50, p95 := (low.P50Ms-over)/1e3, (low.P95Ms-over)/1e3
	if p50 <= 0 {
		return nil, fmt.Errorf("plan: %s: the lowest step's p50 is %v ms: nothing to fit a service time to", p.Version, low.P50Ms)
	}
	sigma := 0.05
	if p95 > p50 {
		sigma = min(max(math.Log(p95/p50)/z95, 0.05), 2.5)
	}
	svc := LogNormal{Median: p50, Sigma: sigma}
	f := &Fit{From: low, AtBest: best, Model: Model{Service: svc, Overhead: over / 1e3, MaxInFlight: maxInFlight}}
	f.Service = svc.String()
	if over > 0 {
		f.Service += fmt.Sprintf(", plus %s outside the server", msText(over))
	}

	sloMs := float64(p.SLO.Microseconds()) / 1e3
	p95At := func(c int, rate float64) (Quantile, error) {
		m := f.Model
		m.Servers = c
		return simulateAt(ctx, m, rate, seed)
	}
	if servers > 0 {
		f.Model.Servers = servers
	} else {
		f.Fitted = true
		// The least c that keeps up at Best, then up to the first whose p95 there is within
		// the SLO: the model is no more optimistic than the measurement.
		c := max(1, int(math.Floor(p.Best*svc.Mean()))+1)
		for ; ; c++ {
			if c > maxServers {
				return nil, fmt.Errorf("plan: %s: no replica of up to %d servers meets p95 ≤ %v at %v rps", p.Version, maxServers, p.SLO, p.Best)
			}
			q, err := p95At(c, p.Best)
			if err != nil {
				return nil, err
			}
			if q.P95 <= sloMs {
				break
			}
		}
		f.Model.Servers = c
	}
	for _, s := range p.Steps {
		ch := Check{Offered: s.Offered, MeasuredP95: s.P95Ms, MeasuredMean: s.MeanMs, Pass: s.Pass}
		if s.Offered < f.Model.Capacity() {
			q, err := p95At(f.Model.Servers, s.Offered)
			if err != nil {
				return nil, err
			}
			ch.ModelP95, ch.ModelMean = q.P95, q.Mean
		}
		f.Checks = append(f.Checks, ch)
	}
	return f, nil
}

// simulateAt runs one replica at a constant rate for fitRequests requests, the first tenth
// a warm-up, and returns the latency distribution.
func simulateAt(ctx context.Context, m Model, rate float64, seed uint64) (Quantile, error) {
	if !(rate > 0) {
		return Quantile{}, errors.New("plan: a rate must be positive")
	}
	d := fitRequests / rate
	s := Sim{
		Trace:  &Trace{T: []float64{0, d}, RPS: []float64{rate, rate}},
		Model:  m,
		Policy: Policy{Name: "fixed", Metric: Fixed},
		Scaler: Autoscaler{Min: 1, Max: 1}, Initial: 1,
		SLO: time.Hour, Seed: seed, Warmup: d / 10, Window: time.Duration(d * 1e9),
	}
	o, err := s.Run(ctx)
	if err != nil {
		return Quantile{}, err
	}
	return o.Latency, nil
}
