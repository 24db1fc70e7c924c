package plan

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseTrace(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		wantT    []float64
		wantRPS  []float64
		err      string // part of the error, "" for none
	}{
		{name: "plain", in: "0,100\n60,200\n120,150\n", wantT: []float64{0, 60, 120}, wantRPS: []float64{100, 200, 150}},
		{name: "header, comments, blanks, spaces", in: "seconds,rps\n# from prometheus\n\n0, 10\n 30 ,20\n", wantT: []float64{0, 30}, wantRPS: []float64{10, 20}},
		{name: "extra columns and tabs", in: "0\t5\tx\n10\t6\ty\n", wantT: []float64{0, 10}, wantRPS: []float64{5, 6}},
		{name: "a step", in: "0,10\n60,10\n60,30\n120,30\n", wantT: []float64{0, 60, 60, 120}, wantRPS: []float64{10, 10, 30, 30}},
		{name: "clock from a later start", in: "1000,1\n1060,2\n", wantT: []float64{0, 60}, wantRPS: []float64{1, 2}},
		{name: "empty", in: "", err: "at least two rows"},
		{name: "one row", in: "0,100\n", err: "at least two rows"},
		{name: "no span", in: "5,100\n5,200\n", err: "at least two rows"},
		{name: "one column", in: "0\n", err: "no second column"},
		{name: "bad rps", in: "0,1\n10,lots\n", err: `rps "lots" is not a number`},
		{name: "bad seconds after data", in: "0,1\nsoon,2\n", err: `seconds "soon"`},
		{name: "mistyped number is not a header", in: "1o,5\n20,5\n", err: `seconds "1o"`},
		{name: "negative rate", in: "0,-1\n10,1\n", err: "outside 0"},
		{name: "infinite rate", in: "0,inf\n10,1\n", err: "not a number"},
		{name: "nan seconds", in: "NaN,1\n10,1\n", err: "not a number"},
		{name: "negative seconds", in: "-5,1\n10,1\n", err: "negative"},
		{name: "over a year", in: "0,1\n1e9,1\n", err: "more than a year"},
		{name: "unsorted", in: "0,1\n60,1\n30,1\n", err: "sort the rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ParseTrace(strings.NewReader(tc.in), "t.csv")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one with %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error is not one line: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equal(tr.T, tc.wantT) || !equal(tr.RPS, tc.wantRPS) {
				t.Errorf("got T %v RPS %v, want %v %v", tr.T, tr.RPS, tc.wantT, tc.wantRPS)
			}
		})
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTraceRate(t *testing.T) {
	tr := &Trace{T: []float64{0, 60, 60, 120}, RPS: []float64{10, 20, 40, 40}}
	for _, tc := range []struct{ at, want float64 }{
		{-1, 10}, {0, 10}, {30, 15}, {59.999, 19.9997}, {60, 40}, {90, 40}, {120, 40}, {500, 40},
	} {
		if got := tr.Rate(tc.at); math.Abs(got-tc.want) > 1e-3 {
			t.Errorf("Rate(%v) = %v, want %v", tc.at, got, tc.want)
		}
	}
	if got, want := tr.Requests(), 60*15.0+60*40; got != want {
		t.Errorf("Requests = %v, want %v", got, want)
	}
	if tr.Peak() != 40 || tr.Trough() != 10 || tr.Duration() != 2*time.Minute {
		t.Errorf("peak %v trough %v duration %v", tr.Peak(), tr.Trough(), tr.Duration())
	}
}

func TestBuiltIn(t *testing.T) {
	d, err := BuiltIn("diurnal", Shape{Peak: 1000, Trough: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	if d.Duration() != 24*time.Hour || d.Peak() != 1000 || math.Abs(d.Trough()-250) > 1e-9 {
		t.Errorf("diurnal: %v, peak %v, trough %v", d.Duration(), d.Peak(), d.Trough())
	}
	if r := d.Rate(4 * 3600); math.Abs(r-250) > 1e-6 {
		t.Errorf("diurnal at 04:00 = %v, want the trough", r)
	}
	if r := d.Rate(16 * 3600); math.Abs(r-1000) > 1e-6 {
		t.Errorf("diurnal at 16:00 = %v, want the peak", r)
	}
	// The sinusoid's mean is halfway between trough and peak.
	if mean := d.Requests() / 86400; math.Abs(mean-625) > 1 {
		t.Errorf("diurnal mean %v rps, want 625", mean)
	}

	b, err := BuiltIn("burst", Shape{Peak: 900, Burst: 3, BurstFor: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ at, want float64 }{{0, 300}, {599, 300}, {600, 900}, {899, 900}, {900, 300}, {1799, 300}} {
		if got := b.Rate(tc.at); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("burst at %v s = %v, want %v", tc.at, got, tc.want)
		}
	}

	rb, err := BuiltIn("burst", Shape{Peak: 900, Burst: 3, BurstFor: 5 * time.Minute, Ramp: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ at, want float64 }{{600, 300}, {660, 600}, {720, 900}, {899, 900}, {900, 300}} {
		if got := rb.Rate(tc.at); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("ramped burst at %v s = %v, want %v", tc.at, got, tc.want)
		}
	}

	c, err := BuiltIn("constant", Shape{Peak: 50, Duration: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if c.Requests() != 50*600 {
		t.Errorf("constant requests %v", c.Requests())
	}

	for _, tc := range []struct {
		name string
		s    Shape
		err  string
	}{
		{"weekly", Shape{Peak: 1}, "unknown traffic shape"},
		{"diurnal", Shape{Peak: 0}, "positive"},
		{"diurnal", Shape{Peak: 1, Trough: 2}, "trough"},
		{"burst", Shape{Peak: 1, Burst: 0.5}, "burst factor"},
		{"burst", Shape{Peak: 1, Burst: 3, Duration: time.Minute, BurstFor: time.Hour}, "does not fit"},
		{"burst", Shape{Peak: 1, Burst: 3, BurstFor: time.Minute, Ramp: 2 * time.Minute}, "does not fit"},
	} {
		if _, err := BuiltIn(tc.name, tc.s); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("BuiltIn(%q, %+v) err = %v, want %q", tc.name, tc.s, err, tc.err)
		}
	}
}

func FuzzParseTrace(f *testing.F) {
	for _, s := range []string{"0,100\n60,200\n", "seconds,rps\n0,1\n1,1\n", "0,1\n0,2\n5,3", "#x\n\n1e3,5\n2e3,0\n", "a,b\nc,d\n", "0;1\n1;2\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := ParseTrace(strings.NewReader(in), "fuzz")
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
			return
		}
		if len(tr.T) < 2 || len(tr.T) != len(tr.RPS) || tr.T[0] != 0 || !(tr.T[len(tr.T)-1] > 0) {
			t.Fatalf("accepted a trace without two rows spanning time: %v %v", tr.T, tr.RPS)
		}
		for i := range tr.T {
			if i > 0 && tr.T[i] < tr.T[i-1] {
				t.Fatalf("times go back: %v", tr.T)
			}
			if r := tr.RPS[i]; !(r >= 0) || math.IsInf(r, 0) || math.IsInf(tr.T[i], 0) {
				t.Fatalf("bad value accepted: %v %v", tr.T, tr.RPS)
			}
		}
		// What the simulation asks of a trace holds for any accepted one.
		if n := tr.Requests(); math.IsNaN(n) || n < 0 {
			t.Fatalf("requests %v", n)
		}
		if r := tr.Rate(tr.T[len(tr.T)-1] / 2); !(r >= 0) {
			t.Fatalf("rate %v", r)
		}
	})
}
