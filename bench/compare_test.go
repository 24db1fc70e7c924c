package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompare(t *testing.T) {
	// before is the fixture: three runs, fp32 best 400, 425, 405 (mean 410, sd 12.5), int8
	// best 800 in each, variance for fp32 only.
	tests := []struct {
		name   string
		before func(*Report)
		after  func(*Report)
		want   []string
		not    []string
	}{
		{
			name: "faster beyond noise",
			after: func(r *Report) {
				r.Runs, r.Variance = r.Runs[:1], nil
				r.Runs[0].Versions[0].Best = 451
				r.Runs[0].Versions[0].Steps[2].Latency.P95 = 22.14
				r.Runs[0].Versions[0].Steps[2].Latency.P50 = 12.32
				r.Runs[0].Versions[0].Steps[3].Achieved = 772.2
			},
			want: []string{
				"sentiment/fp32\n  best rps at SLO (mean of 3 → 1 runs): 410 → 451 (+10.0%); beyond noise (|Δ| 41.0 > 2×sd 25.0)",
				"sentiment/int8\n  best rps at SLO (mean of 3 → 1 runs): 800 → 800 (+0.0%); noise unknown: use --repeat",
				"offered rps  p50 ms",
				"  400          11.2 → 12.3 (+10.0%)  24.6 → 22.1 (-10.0%)  38.0 → 38.0 (+0.0%)",
				"702 → 772 (+10.0%)",
			},
			not: []string{"only before", "only after", "differ"},
		},
		{
			name:  "within noise",
			after: func(r *Report) { r.Runs[0].Versions[0].Best = 420 },
			// after keeps its three runs: 420, 425, 405 → mean 416.7.
			want: []string{"410 → 417 (+1.6%); within noise (|Δ| 6.67 ≤ 2×sd 25.0)"},
		},
		{
			name:   "no variance anywhere",
			before: func(r *Report) { r.Runs, r.Variance = r.Runs[:1], nil },
			after: func(r *Report) {
				r.Runs, r.Variance = r.Runs[:1], nil
				r.Runs[0].Versions[0].Best = 300
			},
			want: []string{
				"best rps at SLO: 400 → 300 (-25.0%); noise unknown: use --repeat",
				"best rps at SLO: 800 → 800 (+0.0%); noise unknown: use --repeat",
			},
			not: []string{"beyond noise", "within noise"},
		},
		{
			name:  "versions in one report only",
			after: func(r *Report) { r.Runs[0].Versions[1].Name = "sentiment/int4" },
			want:  []string{"only before: sentiment/int8", "only after: sentiment/int4", "sentiment/fp32\n"},
			not:   []string{"\nsentiment/int8\n"},
		},
		{
			name: "best zero before",
			before: func(r *Report) {
				for i := range r.Runs {
					r.Runs[i].Versions[1].Best = 0
				}
			},
			want: []string{"sentiment/int8\n  best rps at SLO (mean of 3 → 3 runs): – → 800 (–); noise unknown: use --repeat"},
		},
		{
			name: "no rate in common",
			after: func(r *Report) {
				for _, run := range r.Runs {
					for _, v := range run.Versions {
						for i := range v.Steps {
							v.Steps[i].Offered *= 1.5
						}
					}
				}
			},
			want: []string{"no load level measured in both"},
			not:  []string{"p50 ms"},
		},
		{
			name: "setup differs",
			after: func(r *Report) {
				r.Load.Inputs = 16
				r.Load.MinRequests, r.Load.Confirm = 1000, 1
				r.SLO.P95 = 100 * 1e6
				r.Route = "/embed"
			},
			want: []string{
				"! routes differ: /predict → /embed",
				"! inputs per request differ: 8 texts per request → 16 texts per request",
				"! least requests per step (--min-requests) differ: 0 → 1000",
				"! windows more a failed search step gets (--search-confirm) differ: 0 → 1",
				"! SLOs differ: p95 ≤ 50 ms at ≥ 600 req/s → p95 ≤ 100 ms at ≥ 600 req/s",
			},
		},
		{
			name:  "open against closed",
			after: func(r *Report) { *r = *edgeReports()["closed"] },
			want:  []string{"load modes differ (open and closed loop)", "best rps at SLO"},
			not:   []string{"p50 ms"},
		},
		{
			name:   "closed against closed",
			before: func(r *Report) { *r = *edgeReports()["closed"] },
			after: func(r *Report) {
				*r = *edgeReports()["closed"]
				r.Runs[0].Versions[1].Steps[3].Latency.P99 = 94.4
			},
			want: []string{"clients  p50 ms", "  16       7.90 → 7.90 (+0.0%)", "47.2 → 94.4 (+100.0%)"},
			not:  []string{"offered rps", "differ"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, after := viewFixture(), viewFixture()
			if tt.before != nil {
				tt.before(before)
			}
			if tt.after != nil {
				tt.after(after)
			}
			var b bytes.Buffer
			if err := Compare(&b, before, after); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("compare lacks %q", w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(out, n) {
					t.Errorf("compare has %q", n)
				}
			}
			if hasBadNumber(out) {
				t.Error("compare prints NaN or Inf")
			}
			if t.Failed() {
				t.Log("\n" + out)
			}
		})
	}
	if err := Compare(&bytes.Buffer{}, viewFixture(), nil); err == nil {
		t.Error("Compare with a nil report: no error")
	}
}

func TestReadReport(t *testing.T) {
	var good bytes.Buffer
	if err := WriteJSON(&good, viewFixture()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		content string
		want    string // in the error; "" for none
	}{
		{"round trip", good.String(), ""},
		{"no schema", `{"tool": "ortserve v0.1", "runs": []}`, "has no schema field"},
		{"empty schema", `{"schema": "", "runs": []}`, "has no schema field"},
		{"other schema", `{"schema": "ortserve.bench/v0", "runs": []}`, `is schema "ortserve.bench/v0" but this build reads "ortserve.bench/v1"`},
		{"not JSON", "latency,rps\n1,2\n", "is not a JSON report"},
		{"wrong type", `{"schema": "ortserve.bench/v1", "runs": 3}`, "cannot unmarshal"},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".json")
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := ReadReport(path)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("ReadReport error = %v, want one with %q", err, tt.want)
				}
				if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), path) {
					t.Errorf("error is not one line naming the file: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var again bytes.Buffer
			if err := WriteJSON(&again, r); err != nil {
				t.Fatal(err)
			}
			if again.String() != tt.content {
				t.Error("report changed on the way through JSON")
			}
		})
	}
	if _, err := ReadReport(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: %v", err)
	}
}

// FuzzReadReport checks that any report that parses can be shown and compared without a
// panic and without printing NaN or infinities.
func FuzzReadReport(f *testing.F) {
	var good bytes.Buffer
	if err := WriteJSON(&good, viewFixture()); err != nil {
		f.Fatal(err)
	}
	f.Add(good.Bytes())
	f.Add([]byte(`{"schema":"ortserve.bench/v1","load":{"mode":"closed"},"runs":[{"versions":[{"name":"a","steps":[{"concurrency":4,"histogram":[{"up_to_ms":0,"count":1},{"up_to_ms":1e308,"count":9}]}]}]}]}`))
	f.Add([]byte(`{"schema":"ortserve.bench/v1","runs":[{"versions":[{"steps":[{"offered_rps":1e308,"achieved_rps":1e308,"latency":{"p50_ms":1e-300,"p95_ms":1e308}}],"offline":[{"batch":-1,"items_per_s":1e308}],"best_rps":1e-308}]}],"variance":[{"name":"","best_rps":{"mean":1e308,"sd":1e308}}]}`))
	f.Add([]byte(`{"schema":"ortserve.bench/v0"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := parseReport(data, "fuzz.json")
		if err != nil {
			return
		}
		var b bytes.Buffer
		for name, write := range map[string]func() error{
			"text":     func() error { return WriteText(&b, r) },
			"markdown": func() error { return WriteMarkdown(&b, r) },
			"html":     func() error { return WriteHTML(&b, r) },
			"compare":  func() error { return Compare(&b, r, r) },
		} {
			b.Reset()
			if err := write(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if hasBadNumber(b.String()) {
				t.Fatalf("%s prints NaN or Inf", name)
			}
		}
	})
}
