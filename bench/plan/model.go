package plan

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Service is a distribution of service times in seconds: how long one request holds one of
// a replica's servers.
type Service interface {
	Sample(r *rand.Rand) float64
	Mean() float64
	String() string
}

// Exponential service times at Rate per second: the M in M/M/c.
type Exponential struct{ Rate float64 }

// Sample draws one service time.
func (e Exponential) Sample(r *rand.Rand) float64 { return r.ExpFloat64() / e.Rate }

// Mean is 1/Rate.
func (e Exponential) Mean() float64 { return 1 / e.Rate }

func (e Exponential) String() string { return fmt.Sprintf("exponential, mean %s", msText(1e3/e.Rate)) }

// LogNormal service times: exp(N(ln Median, Sigma²)), in seconds. Its right tail is what a
// measured latency histogram's usually is: most requests near the median, a few several
// times longer.
type LogNormal struct{ Median, Sigma float64 }

// Sample draws one service time.
func (l LogNormal) Sample(r *rand.Rand) float64 {
	return l.Median * math.Exp(l.Sigma*r.NormFloat64())
}

// Mean is Median·exp(σ²/2).
func (l LogNormal) Mean() float64 { return l.Median * math.Exp(l.Sigma*l.Sigma/2) }

// Quantile is the service time below which a fraction q of samples fall.
func (l LogNormal) Quantile(q float64) float64 { return l.Median * math.Exp(l.Sigma*normQuantile(q)) }

func (l LogNormal) String() string {
	return fmt.Sprintf("lognormal, median %s, σ %.2f (mean %s, p95 %s)",
		msText(l.Median*1e3), l.Sigma, msText(l.Mean()*1e3), msText(l.Quantile(0.95)*1e3))
}

// z95 is the standard normal's 95th percentile.
const z95 = 1.6448536269514722

// normQuantile is the standard normal quantile for the few q the package prints.
func normQuantile(q float64) float64 {
	switch q {
	case 0.5:
		return 0
	case 0.95:
		return z95
	case 0.99:
		return 2.3263478740408408
	}
	return math.Sqrt2 * math.Erfinv(2*q-1)
}

// Model is one replica of the server: Servers requests served at once, the rest waiting in
// one FIFO queue, each holding a server for a time drawn from Service. Overhead is added to
// every answer without holding a server: the client's and the network's share of the
// latency. Past MaxInFlight requests in the replica (served and queued) it answers 429 at
// once, as ortserve does at its limits.max_in_flight; 0 is no limit.
type Model struct {
	Servers     int     `json:"servers"`
	Service     Service `json:"-"`
	Overhead    float64 `json:"overhead_s"`
	MaxInFlight int     `json:"max_in_flight"`
}

// Capacity is the most requests/s a replica completes: Servers / mean service time.
func (m Model) Capacity() float64 { return float64(m.Servers) / m.Service.Mean() }

func (m Model) validate() error {
	if m.Servers < 1 || m.Service == nil || !(m.Service.Mean() > 0) || math.IsInf(m.Service.Mean(), 0) || m.Overhead < 0 || m.MaxInFlight < 0 {
		return fmt.Errorf("plan: a replica needs at least one server and a positive mean service time")
	}
	return nil
}
