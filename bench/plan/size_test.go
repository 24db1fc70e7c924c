package plan

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ortserve/ortserve/bench"
)

func readFixture(t *testing.T) *bench.Report {
	t.Helper()
	r, err := bench.ReadReport("testdata/sentiment.json")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestFromReport(t *testing.T) {
	r := readFixture(t)
	for _, tc := range []struct {
		version  string
		slo      time.Duration
		want     string
		wantBest float64
		err      string
	}{
		{version: "", want: "sentiment/int8", wantBest: 130}, // the most per replica
		{version: "fp32", want: "sentiment/fp32", wantBest: 97.5},
		{version: "sentiment/fp32", want: "sentiment/fp32", wantBest: 97.5},
		// Judged again at 60 ms: int8 passes at 104 rps only; fp32 at no rate.
		{version: "", slo: 60 * time.Millisecond, want: "sentiment/int8", wantBest: 104},
		{version: "fp32", slo: 60 * time.Millisecond, err: "met p95 ≤ 60ms at no measured rate"},
		{version: "fp16", err: `no version "fp16": it has [sentiment/fp32 sentiment/int8]`},
	} {
		p, err := FromReport(r, tc.version, tc.slo)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("FromReport(%q, %v) err = %v, want %q", tc.version, tc.slo, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("FromReport(%q, %v): %v", tc.version, tc.slo, err)
		}
		if p.Version != tc.want || p.Best != tc.wantBest {
			t.Errorf("FromReport(%q, %v) = %s at %v rps, want %s at %v", tc.version, tc.slo, p.Version, p.Best, tc.want, tc.wantBest)
		}
	}
	if _, err := FromReport(r, "fp32", 60*time.Millisecond); !errors.Is(err, ErrNoPoint) {
		t.Errorf("err = %v, want ErrNoPoint", err)
	}

	closed := *r
	closed.Load.Mode = "closed"
	if _, err := FromReport(&closed, "", 0); err == nil || !strings.Contains(err.Error(), "closed-loop") {
		t.Errorf("closed loop: err = %v", err)
	}
	noSLO := *r
	noSLO.SLO = nil
	if _, err := FromReport(&noSLO, "", 0); err == nil || !strings.Contains(err.Error(), "--slo") {
		t.Errorf("no SLO: err = %v", err)
	}
	if _, err := FromReport(&bench.Report{}, "", 0); err == nil {
		t.Error("an empty report gave no error")
	}
}

// TestSizeMatchesBenchPlan: Size gives the bench report's own plan the same replica count
// for its target, and the targets are Little's Law on the measured steps (worked by hand
// from testdata/sentiment.json).
func TestSizeMatchesBenchPlan(t *testing.T) {
	r := readFixture(t)
	for _, vr := range r.Runs[0].Versions {
		p, err := FromReport(r, vr.Name, 0)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Size(p, r.SLO.RPS, 0, DefaultSizeOptions())
		if err != nil {
			t.Fatal(err)
		}
		if s.Replicas != vr.Plan.Replicas {
			t.Errorf("%s: Size says %d replicas for %v rps, the report's plan %d", vr.Name, s.Replicas, r.SLO.RPS, vr.Plan.Replicas)
		}
	}

	p, _ := FromReport(r, "int8", 0)
	s, err := Size(p, 1300, 650, DefaultSizeOptions())
	if err != nil {
		t.Fatal(err)
	}
	// Per pod 130 / 1.3 = 100 rps. Server time at 100 rps, between the steps at 52 rps
	// (23.506 ms) and 104 rps (23.990 ms): 23.953 ms, so 2.3953 in flight. Queue time
	// there, between 5.8496 ms and 5.0749 ms: 5.1345 ms, so 0.513 queued.
	want := Sizing{PerPod: 100, Replicas: 13, MinReplicas: 7, MaxReplicas: 39, TargetInFlight: 2.4, TargetQueue: 0.51}
	if s.PerPod != want.PerPod || s.Replicas != want.Replicas || s.MinReplicas != want.MinReplicas ||
		s.MaxReplicas != want.MaxReplicas || s.TargetInFlight != want.TargetInFlight || s.TargetQueue != want.TargetQueue {
		t.Errorf("Size = %+v, want %+v", s, want)
	}
	if math.Abs(s.InServerMs-23.953) > 0.01 || math.Abs(s.QueueMs-5.1345) > 0.01 || !s.ServerMeasured || !s.QueueMeasured {
		t.Errorf("in server %v ms, queue %v ms (%v %v)", s.InServerMs, s.QueueMs, s.ServerMeasured, s.QueueMeasured)
	}

	// Without timing headers: the whole latency stands for the server's time, and the queue
	// target is a guess that says so.
	bare := p
	bare.Steps = append([]Sample(nil), p.Steps...)
	for i := range bare.Steps {
		bare.Steps[i].Headers, bare.Steps[i].ServerMs, bare.Steps[i].QueueMs = false, 0, 0
	}
	s, _ = Size(bare, 1300, 0, DefaultSizeOptions())
	// Mean latency at 100 rps: between 26.414 ms and 25.946 ms, 25.982 ms.
	if s.TargetInFlight != 2.6 || s.TargetQueue != 1.3 || s.ServerMeasured || s.QueueMeasured || s.MinReplicas != 2 {
		t.Errorf("without headers: %+v", s)
	}
	var b bytes.Buffer
	if err := WriteHelm(&b, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a guess", "no timing headers", "at least 2"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("helm values without headers do not say %q:\n%s", want, b.String())
		}
	}

	for _, tc := range []struct {
		peak float64
		o    SizeOptions
	}{{0, DefaultSizeOptions()}, {math.Inf(1), DefaultSizeOptions()}, {100, SizeOptions{Headroom: 0.5, Room: 3, Floor: 2}},
		{100, SizeOptions{Headroom: 1.3, Room: 0, Floor: 2}}, {100, SizeOptions{Headroom: 1.3, Room: 3, Floor: 0}}} {
		if _, err := Size(p, tc.peak, 0, tc.o); err == nil {
			t.Errorf("Size(peak %v, %+v): no error", tc.peak, tc.o)
		}
	}
}

// TestWriteHelm: the values have exactly the keys the chart reads, with a comment on each.
func TestWriteHelm(t *testing.T) {
	p, _ := FromReport(readFixture(t), "int8", 0)
	s, err := Size(p, 300, 0, DefaultSizeOptions())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteHelm(&b, s); err != nil {
		t.Fatal(err)
	}
	var v struct {
		ReplicaCount int `yaml:"replicaCount"`
		Autoscaling  struct {
			Enabled              bool    `yaml:"enabled"`
			MinReplicas          int     `yaml:"minReplicas"`
			MaxReplicas          int     `yaml:"maxReplicas"`
			Metric               string  `yaml:"metric"`
			TargetInFlightPerPod float64 `yaml:"targetInFlightPerPod"`
			TargetQueuePerPod    float64 `yaml:"targetQueuePerPod"`
		} `yaml:"autoscaling"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b.Bytes()))
	dec.KnownFields(true)
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not the chart's keys: %v\n%s", err, b.String())
	}
	a := v.Autoscaling
	if v.ReplicaCount != 3 || !a.Enabled || a.MinReplicas != 2 || a.MaxReplicas != 9 || a.Metric != "inflight" ||
		a.TargetInFlightPerPod != 2.4 || a.TargetQueuePerPod != 0.51 {
		t.Errorf("values %+v from:\n%s", v, b.String())
	}
	var keys int
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if strings.HasPrefix(line, "#") || strings.HasSuffix(line, ":") || line == "  enabled: true" {
			continue
		}
		keys++
		if !strings.Contains(line, "  # ") {
			t.Errorf("no comment on %q", line)
		}
	}
	if keys != 6 {
		t.Errorf("%d commented values, want 6:\n%s", keys, b.String())
	}
	for _, want := range []string{"ceil(300 rps peak × 1.3 headroom / 130 rps", "room for 3× the peak", "Little's Law: 100 rps per pod", "24 ms mean time in the server", "5.13 ms mean queue time"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("values do not say %q:\n%s", want, b.String())
		}
	}
}

func TestFitModel(t *testing.T) {
	t.Parallel()
	p, f := fixture(t)
	low := p.Steps[0]
	if !f.Fitted || len(f.Checks) != len(p.Steps) {
		t.Fatalf("fit %+v", f)
	}
	svc := f.Model.Service.(LogNormal)
	if got, want := svc.Median*1e3, low.P50Ms-low.OverheadMs; math.Abs(got-want) > 1e-9 {
		t.Errorf("service median %v ms, want the lowest step's p50 less the network: %v", got, want)
	}
	if got, want := svc.Quantile(0.95)*1e3, low.P95Ms-low.OverheadMs; math.Abs(got-want) > 1e-6 {
		t.Errorf("service p95 %v ms, want %v", got, want)
	}
	// c is the fewest servers meeting the SLO at the best rate.
	c := f.Model.Servers
	at := func(c int) float64 {
		m := f.Model
		m.Servers = c
		q, err := simulateAt(t.Context(), m, p.Best, 1)
		if err != nil {
			t.Fatal(err)
		}
		return q.P95
	}
	if p95 := at(c); p95 > 100 {
		t.Errorf("with the fitted %d servers p95 at %v rps is %.1f ms, over the SLO", c, p.Best, p95)
	}
	if p95 := at(c - 1); c > 1 && p95 <= 100 {
		t.Errorf("%d servers meet the SLO too (p95 %.1f ms): the fit is not the fewest", c-1, p95)
	}

	given, err := FitModel(t.Context(), p, 7, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if given.Fitted || given.Model.Servers != 7 || given.Model.MaxInFlight != 0 {
		t.Errorf("given servers: %+v", given)
	}
	if _, err := FitModel(t.Context(), Point{Version: "x"}, 0, 0, 1); !errors.Is(err, ErrNoPoint) {
		t.Errorf("no point: err = %v", err)
	}
}
