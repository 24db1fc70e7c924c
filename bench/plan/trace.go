package plan

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Trace is offered traffic over time: requests/s at points in time, linear in between. Two
// points at the same time make a step. Times are seconds from the start; the trace ends at
// its last point.
type Trace struct {
	Name string    // "diurnal", "burst", "constant" or the file it was read from
	T    []float64 // seconds, non-decreasing, starting at 0
	RPS  []float64 // requests/s at T[i], finite and ≥ 0
}

// Duration is the trace's length.
func (t *Trace) Duration() time.Duration {
	return time.Duration(t.T[len(t.T)-1] * float64(time.Second))
}

// Rate is the requests/s at s seconds: linear between points; at a step, the later point.
func (t *Trace) Rate(s float64) float64 {
	i := t.segment(s)
	if i < 0 {
		return t.RPS[0]
	}
	if i >= len(t.T)-1 {
		return t.RPS[len(t.RPS)-1]
	}
	span := t.T[i+1] - t.T[i]
	if span <= 0 {
		return t.RPS[i+1]
	}
	f := (s - t.T[i]) / span
	return t.RPS[i] + f*(t.RPS[i+1]-t.RPS[i])
}

// segment is the last i with T[i] ≤ s, or -1 before the start.
func (t *Trace) segment(s float64) int {
	lo, hi := 0, len(t.T) // find the first T[i] > s
	for lo < hi {
		m := (lo + hi) / 2
		if t.T[m] <= s {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// Peak is the highest rate in the trace.
func (t *Trace) Peak() float64 {
	p := 0.0
	for _, r := range t.RPS {
		p = max(p, r)
	}
	return p
}

// Trough is the lowest rate in the trace.
func (t *Trace) Trough() float64 {
	p := math.Inf(1)
	for _, r := range t.RPS {
		p = min(p, r)
	}
	return p
}

// Requests is the number of requests the trace offers: the integral of its rate.
func (t *Trace) Requests() float64 {
	n := 0.0
	for i := 1; i < len(t.T); i++ {
		n += (t.T[i] - t.T[i-1]) * (t.RPS[i] + t.RPS[i-1]) / 2
	}
	return n
}

// Limits on a trace file, so that a wrong file fails with a clear error rather than a long
// simulation: a week of per-second rows, and more than any fleet serves.
const (
	maxTraceRows    = 1 << 20
	maxTraceRPS     = 1e8
	maxTraceSeconds = 366 * 86400
)

// ParseTrace reads a traffic trace as CSV: one "seconds,rps" row per line, seconds from the
// start, non-decreasing (two rows at the same second make a step), requests/s between them
// linear. A header row, blank lines and lines starting with # are skipped; so is a third
// column onwards. It needs at least two rows spanning some time.
func ParseTrace(r io.Reader, name string) (*Trace, error) {
	t := &Trace{Name: name}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<16)
	line := 0
	bad := func(why string) error {
		return fmt.Errorf("plan: trace %s line %d: %s: write rows as seconds,rps (0,120)", name, line, why)
	}
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		f := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || r == '\t' })
		if len(f) < 2 {
			return nil, bad(fmt.Sprintf("%q has no second column", s))
		}
		sec, err1 := strconv.ParseFloat(strings.TrimSpace(f[0]), 64)
		rps, err2 := strconv.ParseFloat(strings.TrimSpace(f[1]), 64)
		if (err1 != nil || err2 != nil) && len(t.T) == 0 && !looksNumeric(f[0]) {
			continue // a header
		}
		switch {
		case err1 != nil || math.IsNaN(sec) || math.IsInf(sec, 0):
			return nil, bad(fmt.Sprintf("seconds %q is not a number", f[0]))
		case err2 != nil || math.IsNaN(rps) || math.IsInf(rps, 0):
			return nil, bad(fmt.Sprintf("rps %q is not a number", f[1]))
		case sec < 0:
			return nil, bad(fmt.Sprintf("seconds %v is negative", sec))
		case len(t.T) > 0 && sec-t.T[0] > maxTraceSeconds:
			return nil, bad(fmt.Sprintf("seconds %v is more than a year after the first row", sec))
		case rps < 0 || rps > maxTraceRPS:
			return nil, bad(fmt.Sprintf("rps %v is outside 0 to %g", rps, float64(maxTraceRPS)))
		case len(t.T) > 0 && sec < t.T[len(t.T)-1]:
			return nil, bad(fmt.Sprintf("seconds %v comes before the row above (%v): sort the rows by time", sec, t.T[len(t.T)-1]))
		case len(t.T) >= maxTraceRows:
			return nil, bad(fmt.Sprintf("more than %d rows", maxTraceRows))
		}
		t.T = append(t.T, sec)
		t.RPS = append(t.RPS, rps)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("plan: trace %s line %d is too long: write rows as seconds,rps (0,120)", name, line+1)
		}
		return nil, fmt.Errorf("plan: trace %s: %w", name, err)
	}
	if len(t.T) < 2 || t.T[len(t.T)-1] <= t.T[0] {
		return nil, fmt.Errorf("plan: trace %s: want at least two rows spanning some time, as 0,100 then 3600,300", name)
	}
	// Times are from the trace's start, wherever its clock began.
	if t0 := t.T[0]; t0 != 0 {
		for i := range t.T {
			t.T[i] -= t0
		}
	}
	return t, nil
}

// looksNumeric reports whether s starts like a number, so that a header ("seconds") is told
// from a mistyped value ("12o").
func looksNumeric(s string) bool {
	s = strings.TrimSpace(s)
	return s != "" && strings.ContainsRune("0123456789+-.", rune(s[0]))
}

// ReadTrace reads a trace file (ParseTrace).
func ReadTrace(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	defer f.Close()
	return ParseTrace(f, path)
}

// Shape is a built-in traffic shape's settings.
type Shape struct {
	Peak     float64       // requests/s at the peak
	Duration time.Duration // 0: the shape's own default
	// Trough is diurnal's lowest rate as a fraction of the peak.
	Trough float64
	// Burst is burst's step as a multiple of its base rate (so base = Peak / Burst), and
	// BurstFor how long it lasts; it starts a third of the way in, rising to the peak over
	// Ramp (0: at once) and falling at once.
	Burst    float64
	BurstFor time.Duration
	Ramp     time.Duration
}

// Shapes names the built-in shapes.
var Shapes = []string{"diurnal", "burst", "constant"}

// BuiltIn makes a built-in shape:
//   - diurnal: a day's sinusoid, the trough at 04:00 and the peak at 16:00 (24 h by default);
//   - burst: a steady base with one burst of Burst× (30 min by default, the burst of
//     BurstFor from a third of the way in, reached at once or over Ramp);
//   - constant: the peak throughout (1 h by default).
func BuiltIn(name string, s Shape) (*Trace, error) {
	if !(s.Peak > 0) || s.Peak > maxTraceRPS {
		return nil, fmt.Errorf("plan: peak rate %v: want a positive number of requests/s", s.Peak)
	}
	if s.Duration < 0 || s.Duration.Seconds() > maxTraceSeconds {
		return nil, fmt.Errorf("plan: duration %v: want up to a year", s.Duration)
	}
	dur := func(def time.Duration) float64 {
		if s.Duration > 0 {
			return s.Duration.Seconds()
		}
		return def.Seconds()
	}
	switch name {
	case "diurnal":
		if s.Trough < 0 || s.Trough > 1 {
			return nil, fmt.Errorf("plan: diurnal trough %v: want a fraction of the peak from 0 to 1", s.Trough)
		}
		d := dur(24 * time.Hour)
		t := &Trace{Name: name}
		const points = 288 // every 5 minutes of a day; the sinusoid is smooth at that step
		lo := s.Peak * s.Trough
		for i := 0; i <= points; i++ {
			x := float64(i) / points // fraction of the day
			// cos is 1 at 04:00 (the trough) and −1 at 16:00 (the peak).
			v := lo + (s.Peak-lo)*(1-math.Cos(2*math.Pi*(x-4.0/24)))/2
			t.T = append(t.T, x*d)
			t.RPS = append(t.RPS, v)
		}
		return t, nil
	case "burst":
		if !(s.Burst >= 1) {
			return nil, fmt.Errorf("plan: burst factor %v: want 1 or more", s.Burst)
		}
		d := dur(30 * time.Minute)
		at, long := d/3, s.BurstFor.Seconds()
		if long <= 0 {
			long = d / 3
		}
		ramp := s.Ramp.Seconds()
		if at+long > d || ramp < 0 || ramp > long {
			return nil, fmt.Errorf("plan: a burst of %v ramped over %v from %v does not fit in %v", s.BurstFor, s.Ramp, time.Duration(at*1e9), time.Duration(d*1e9))
		}
		base := s.Peak / s.Burst
		return &Trace{Name: name,
			T:   []float64{0, at, at + ramp, at + long, at + long, d},
			RPS: []float64{base, base, s.Peak, s.Peak, base, base}}, nil
	case "constant":
		d := dur(time.Hour)
		return &Trace{Name: name, T: []float64{0, d}, RPS: []float64{s.Peak, s.Peak}}, nil
	}
	return nil, fmt.Errorf("plan: unknown traffic shape %q: use diurnal, burst, constant or a CSV file of seconds,rps", name)
}
