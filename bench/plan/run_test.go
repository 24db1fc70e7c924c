package plan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	t.Parallel()
	p, fit := fixture(t)
	tr, err := BuiltIn("burst", Shape{Peak: 5 * p.Best, Burst: 3, Duration: 6 * time.Minute, BurstFor: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sc := DefaultAutoscaler()
	sc.Min, sc.Max = 0, 0
	o := Options{Point: p, Trace: tr, Fit: fit, Scaler: sc, Size: SizeOptions{Headroom: 1.3, Room: 2, Floor: 2},
		Policies: []string{"queue", "cpu"}, CPUTarget: 0.7, MaxRequests: 100000, Seed: 1}
	r, err := Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	// 5 × 130 rps peak, 217 rps base: 130k requests in 6 minutes, compressed to 100k.
	if r.Compress < 1.29 || r.Compress > 1.31 {
		t.Errorf("compress %v, want 1.3", r.Compress)
	}
	if len(r.Outcomes) != 2 || r.Outcomes[0].Policy.Name != "queue" || r.Outcomes[1].Policy.Name != "cpu" {
		t.Fatalf("outcomes %+v", r.Outcomes)
	}
	if r.Scaler.Min != r.Sizing.MinReplicas || r.Scaler.Max != r.Sizing.MaxReplicas || r.Price != 0.1 {
		t.Errorf("scaler %+v, sizing %+v, price %v", r.Scaler, r.Sizing, r.Price)
	}
	for _, out := range r.Outcomes {
		if out.Requests < 90000 || out.Answered+out.Rejected != out.Requests || out.Cost != out.ReplicaHours*0.1 || out.ReplicaHours <= 0 {
			t.Errorf("%s: %+v", out.Policy.Name, out)
		}
	}

	var text, md, js bytes.Buffer
	if err := WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Plan for sentiment/int8 under the burst trace, SLO p95 ≤ 100 ms", "4 servers (fitted)",
		"queue", "cpu", "70% busy", "replica-hours", "time compressed 1.3×", "replicaCount:", "targetInFlightPerPod: 2.4", "queue depth"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text does not say %q:\n%s", want, text.String())
		}
	}
	if err := WriteMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Plan for", "| policy | target |", "```yaml\n# Helm values", "\nreplicaCount: "} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if err := WriteJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Schema != Schema || len(back.Outcomes) != 2 || len(back.Outcomes[0].Timeline) == 0 || back.Fit.Model.Servers != 4 {
		t.Errorf("json round trip: %+v", back)
	}

	for name, mut := range map[string]func(*Options){
		"no trace":      func(o *Options) { o.Trace = nil },
		"no policy":     func(o *Options) { o.Policies = nil },
		"bad policy":    func(o *Options) { o.Policies = []string{"memory"} },
		"bad cpu":       func(o *Options) { o.CPUTarget = 70 },
		"min above max": func(o *Options) { o.Scaler.Min, o.Scaler.Max = 5, 4 },
	} {
		bad := o
		mut(&bad)
		if _, err := Run(t.Context(), bad); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestCompare: the comparison in the notes says what the numbers say, whichever way.
func TestCompare(t *testing.T) {
	o := func(over int64, longest int, hours float64) *Outcome {
		return &Outcome{Requests: 1000, OverSLO: over, LongestBreach: longest, ReplicaHours: hours}
	}
	for _, tc := range []struct {
		q, c *Outcome
		want string
	}{
		{o(10, 0, 12), o(200, 3, 10), "queue depth held it where CPU scaling did not; queue depth used 120% the replica-hours"},
		{o(200, 3, 10), o(10, 0, 12), "CPU held it where queue depth did not"},
		{o(100, 1, 10), o(300, 2, 10), "queue depth sent fewer requests over it"},
		{o(300, 2, 10), o(100, 1, 10), "CPU sent fewer requests over it"},
		{o(12, 0, 10), o(13, 0, 8), "the two did about as well on the SLO; queue depth used 125%"},
		{o(100, 3, 10), o(300, 2, 10), "the two did about as well"}, // fewer over, but a longer breach
	} {
		if got := compare(tc.q, tc.c); !strings.Contains(got, tc.want) {
			t.Errorf("compare = %q, want %q in it", got, tc.want)
		}
	}
}

// TestRunExtrapolationNote: a CPU target that holds pods past the best measured rate says
// that the model extrapolates there (fp32's fitted capacity is 175 rps; 70% of it is past
// the 97.5 rps measured at the SLO, and the step at 104 rps failed it).
func TestRunExtrapolationNote(t *testing.T) {
	p, err := FromReport(readFixture(t), "fp32", 0)
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := BuiltIn("constant", Shape{Peak: 200, Duration: 2 * time.Minute})
	sc := DefaultAutoscaler()
	sc.Min, sc.Max = 0, 0
	r, err := Run(t.Context(), Options{Point: p, Trace: tr, MaxInFlight: 512, Scaler: sc, Size: DefaultSizeOptions(),
		Policies: []string{"cpu"}, CPUTarget: 0.7, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(r.Notes, "\n")
	for _, want := range []string{"CPU at 70% holds pods near 122 rps, past the best rate measured at the SLO (97.5 rps)",
		"failed the SLO at 104 rps", "the model is off by more than 25% at 78 rps"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}
