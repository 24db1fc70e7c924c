package plan

import (
	"fmt"
	"math"
	"testing"
	"time"
)

func TestErlangC(t *testing.T) {
	for _, tc := range []struct {
		c    int
		a    float64
		want float64
	}{
		{1, 0.5, 0.5},            // M/M/1: the probability of waiting is ρ
		{2, 1, 1.0 / 3},          // M/M/2 at ρ = 1/2: 2ρ²/(1+ρ)
		{3, 2, 4.0 / 9},          // M/M/3 at ρ = 2/3
		{11, 10, 0.682118},       // the call-centre textbook case: 10 erlangs on 11 agents
		{20, 16, 0.256078},       // a wider pool at ρ = 0.8
		{4, 0, 0},                // no load, no wait
		{4, 4, 1},                // at capacity the queue grows without bound
		{4, 9, 1},                // past it too
		{200, 150, 6.0151928e-5}, // large c stays stable (mpmath, 50 digits)
		{1000, 990, 0.65908042},  // and near saturation
	} {
		got := ErlangC(tc.c, tc.a)
		if math.Abs(got-tc.want) > 1e-6*max(tc.want, 1e-3) {
			t.Errorf("ErlangC(%d, %v) = %.6f, want %.6f", tc.c, tc.a, got, tc.want)
		}
	}
	// Mean wait: M/M/1 at λ = 0.5, μ = 1 waits ρ/(μ−λ) = 1 s on average.
	if w := MMcWait(0.5, 1, 1); math.Abs(w-1) > 1e-12 {
		t.Errorf("MMcWait(0.5, 1, 1) = %v, want 1", w)
	}
	if w := MMcWait(2, 1, 2); !math.IsInf(w, 1) {
		t.Errorf("MMcWait at capacity = %v, want +Inf", w)
	}
}

func TestErlangCPanicsOnNonsense(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("ErlangC(0, 1) did not panic")
		}
	}()
	ErlangC(0, 1)
}

// mmc simulates an M/M/c queue with the simulator `server plan` uses (one replica of c
// servers, exponential service, Poisson arrivals, no admission limit) and returns the mean
// wait in seconds over independent replications, and its standard error.
func mmc(t *testing.T, lambda, mu float64, c, perRep, reps int) (mean, stderr float64, p95 float64) {
	t.Helper()
	var xs []float64
	for r := range reps {
		d := float64(perRep) / lambda
		s := Sim{
			Trace:  &Trace{T: []float64{0, d}, RPS: []float64{lambda, lambda}},
			Model:  Model{Servers: c, Service: Exponential{Rate: mu}},
			Policy: Policy{Name: "fixed", Metric: Fixed},
			Scaler: Autoscaler{Min: 1, Max: 1}, Initial: 1,
			SLO: time.Hour, Seed: uint64(r + 1), Warmup: d / 20,
		}
		o, err := s.Run(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		xs = append(xs, o.MeanWait/1e3)
		p95 += o.Latency.P95 / 1e3 / float64(reps)
	}
	for _, x := range xs {
		mean += x / float64(len(xs))
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1) / float64(len(xs))), p95
}

// TestSimulationMatchesErlangC: the simulated mean wait is within 5% of the closed form, for
// one server and several. Six independent replications give the standard error, checked
// too so that a pass is not luck: the sizes below keep it under about 2%, so 5% is two and
// a half standard errors or more. (The sizes are what -race allows in a few seconds; with ten times the
// requests the simulation agrees within about 1%.)
func TestSimulationMatchesErlangC(t *testing.T) {
	for _, tc := range []struct {
		lambda, mu float64
		c          int
		perRep     int
	}{
		{0.5, 1, 1, 20000},   // M/M/1, ρ = 0.5
		{0.7, 1, 1, 40000},   // M/M/1, ρ = 0.7
		{2.4, 1, 4, 60000},   // M/M/4, ρ = 0.6
		{11.2, 2, 8, 120000}, // M/M/8, ρ = 0.7, faster servers
	} {
		t.Run(fmt.Sprintf("λ=%v,μ=%v,c=%d", tc.lambda, tc.mu, tc.c), func(t *testing.T) {
			t.Parallel()
			want := MMcWait(tc.lambda, tc.mu, tc.c)
			got, se, _ := mmc(t, tc.lambda, tc.mu, tc.c, tc.perRep, 6)
			t.Logf("simulated %.4f ± %.4f s, Erlang C %.4f s (%+.1f%%)", got, se, want, (got/want-1)*100)
			if math.Abs(got/want-1) > 0.05 {
				t.Errorf("mean wait %.4f s, Erlang C gives %.4f s: off by more than 5%%", got, want)
			}
			if se/want > 0.022 {
				t.Errorf("standard error %.1f%% of the mean: too few requests for the 5%% check to mean anything", se/want*100)
			}
		})
	}
}

// TestMM1Sojourn: in M/M/1 the time in the system is exponential with rate μ−λ, so its p95
// is ln(20)/(μ−λ); the latency histogram must give it.
func TestMM1Sojourn(t *testing.T) {
	t.Parallel()
	_, _, p95 := mmc(t, 0.5, 1, 1, 60000, 2)
	want := math.Log(20) / (1 - 0.5)
	if math.Abs(p95/want-1) > 0.03 {
		t.Errorf("M/M/1 p95 sojourn %.3f s, want ln(20)/(μ−λ) = %.3f s", p95, want)
	}
}
