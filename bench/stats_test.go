package bench

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestModes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lognormal := func(n int, medianMS, sigma float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = medianMS * math.Exp(sigma*rng.NormFloat64())
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		lat     []float64
		bimodal bool
	}{
		{"one peak", lognormal(5000, 20, 0.3), false},
		{"one peak, heavy tail", lognormal(5000, 20, 0.8), false},
		{"cache hits and misses", append(lognormal(3000, 1, 0.2), lognormal(2000, 30, 0.2)...), true},
		{"a few slow ones", append(lognormal(4900, 10, 0.2), lognormal(100, 100, 0.1)...), false},
		{"batch caught or missed", append(lognormal(2500, 8, 0.1), lognormal(2500, 20, 0.1)...), true},
		{"a thin queued tail", append(lognormal(4650, 13, 0.15), lognormal(350, 40, 0.2)...), false},
		{"constant", []float64{5, 5, 5, 5, 5, 5}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := modes(bins(tc.lat, 40))
			if (m != nil) != tc.bimodal {
				t.Errorf("modes %+v, want bimodal %v", m, tc.bimodal)
			}
		})
	}
}

func TestBins(t *testing.T) {
	lat := []float64{1, 2, 4, 8, 16, 32, 64, 100}
	h := bins(lat, 10)
	var n int64
	for i, b := range h {
		n += b.Count
		if i > 0 && b.UpTo <= h[i-1].UpTo {
			t.Fatalf("bins not increasing: %+v", h)
		}
	}
	if n != int64(len(lat)) || h[len(h)-1].UpTo != 100 || h[0].Count != 1 {
		t.Errorf("bins %+v", h)
	}
	if bins(nil, 10) != nil {
		t.Error("bins of nothing")
	}
}

func TestJudge(t *testing.T) {
	o := Options{SLO: &SLO{P95: 100 * time.Millisecond}}
	for _, tc := range []struct {
		name string
		st   Step
		pass bool
		why  string
	}{
		{"meets", Step{Offered: 100, DurationS: 4, Sent: 400, OK: 400, Achieved: 99, Latency: Latency{P95: 80}}, true, ""},
		{"slow", Step{Offered: 100, DurationS: 4, Sent: 400, OK: 400, Achieved: 99, Latency: Latency{P95: 120}}, false, "p95 120.0 ms > 100ms"},
		{"shed", Step{Offered: 100, DurationS: 4, Sent: 400, OK: 380, Rejected: 20, Achieved: 95, Latency: Latency{P95: 80}}, false, "20 of 400"},
		{"behind", Step{Offered: 100, DurationS: 4, Sent: 400, OK: 400, Achieved: 80, Latency: Latency{P95: 80}}, false, "answered 80 of 100 rps that arrived"},
		{"nothing", Step{Offered: 100, DurationS: 4, Sent: 400, Errors: 400}, false, "no request succeeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.st
			o.judge(&st)
			if st.Pass == nil || *st.Pass != tc.pass || !strings.Contains(st.Why, tc.why) {
				t.Errorf("pass %v why %q, want %v %q", st.Pass != nil && *st.Pass, st.Why, tc.pass, tc.why)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	p := plan(1000, 300, 120, 3.6)
	// ceil(1000 × 1.3 / 300) = 5; 300 rps × 0.12 s = 36 in flight; $3.6/h at 300 rps.
	if p.Replicas != 5 || p.InFlight != 36 || math.Abs(p.CostPerMillion-3.6/(300*3600)*1e6) > 1e-9 {
		t.Errorf("plan %+v", p)
	}
}

func TestParseSLO(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want SLO
		err  string
	}{
		{"p95=150ms,rps=600", SLO{P95: 150 * time.Millisecond, RPS: 600}, ""},
		{"p95=1s", SLO{P95: time.Second}, ""},
		{" P95=20ms , rps=1.5", SLO{P95: 20 * time.Millisecond, RPS: 1.5}, ""},
		{"rps=600", SLO{}, "no p95"},
		{"p99=100ms", SLO{}, "unknown key"},
		{"p95=fast", SLO{}, "not a positive duration"},
		{"p95=-1ms", SLO{}, "not a positive duration"},
		{"p95=10ms,rps=0", SLO{}, "not a positive number"},
		{"p95", SLO{}, "not key=value"},
	} {
		got, err := ParseSLO(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || *got != tc.want {
			t.Errorf("%q: %+v %v, want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseRates(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []float64
		err  string
	}{
		{"100", []float64{100}, ""},
		{"50,100,200", []float64{50, 100, 200}, ""},
		{"50:200:50", []float64{50, 100, 150, 200}, ""},
		{"0.5:1.5:0.5", []float64{0.5, 1, 1.5}, ""},
		{"10:25:10", []float64{10, 20}, ""},
		{"100:50:10", nil, "ends before"},
		{"1:100000:1", nil, "more than"},
		{"1:2", nil, "three parts"},
		{"0", nil, "not a positive"},
		{"x", nil, "not a positive"},
		{"NaN", nil, "not a positive"},
	} {
		got, err := ParseRates(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
			continue
		}
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-9 {
				t.Errorf("%q: %v, want %v", tc.in, got, tc.want)
			}
		}
	}
	if _, err := ParseConcurrency("1.5"); err == nil {
		t.Error("1.5 clients accepted")
	}
	if c, err := ParseConcurrency("1,2,4"); err != nil || len(c) != 3 || c[2] != 4 {
		t.Errorf("concurrency %v %v", c, err)
	}
}

func FuzzParseRates(f *testing.F) {
	for _, s := range []string{"100", "50,100", "50:1000:50", "1:2:0", "1e308:1e308:1e-308", ":", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rates, err := ParseRates(s)
		if err != nil {
			return
		}
		if len(rates) == 0 || len(rates) > maxLevels+1 {
			t.Fatalf("%q: %d rates", s, len(rates))
		}
		for _, r := range rates {
			if !(r > 0) || math.IsInf(r, 0) {
				t.Fatalf("%q: rate %v", s, r)
			}
		}
	})
}

func FuzzParseSLO(f *testing.F) {
	for _, s := range []string{"p95=150ms,rps=600", "p95=1s", "rps=1", "p95=,", "="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		slo, err := ParseSLO(s)
		if err == nil && (slo.P95 <= 0 || slo.RPS < 0) {
			t.Fatalf("%q: %+v", s, slo)
		}
	})
}

// The SLO is written in the report's unit, milliseconds, and read back the same.
func TestSLOJSON(t *testing.T) {
	in := SLO{P95: 150 * time.Millisecond, RPS: 600}
	b, err := json.Marshal(in)
	if err != nil || string(b) != `{"p95_ms":150,"rps":600}` {
		t.Fatalf("%s %v", b, err)
	}
	var out SLO
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Errorf("%+v %v, want %+v", out, err, in)
	}
}
