package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseSLO reads an SLO such as "p95=150ms,rps=600" (rps is optional).
func ParseSLO(s string) (*SLO, error) {
	slo := &SLO{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("bench: --slo %q: %q is not key=value: write it as p95=150ms,rps=600", s, part)
		}
		switch strings.ToLower(k) {
		case "p95":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("bench: --slo %q: p95 %q is not a positive duration: write it as p95=150ms", s, v)
			}
			slo.P95 = d
		case "rps":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 || math.IsInf(f, 0) {
				return nil, fmt.Errorf("bench: --slo %q: rps %q is not a positive number: write it as rps=600", s, v)
			}
			slo.RPS = f
		default:
			return nil, fmt.Errorf("bench: --slo %q: unknown key %q: the SLO takes p95 and rps, as p95=150ms,rps=600", s, k)
		}
	}
	if slo.P95 == 0 {
		return nil, fmt.Errorf("bench: --slo %q has no p95 target: write it as p95=150ms,rps=600", s)
	}
	return slo, nil
}

// maxLevels bounds a sweep, so a typo cannot ask for a day of load.
const maxLevels = 200

// ParseRates reads load levels: one value ("100"), a list ("50,100,200"), or a range
// start:stop:step ("50:1000:50", stop included). Every value must be positive.
func ParseRates(s string) ([]float64, error) {
	bad := func(why string) error {
		return fmt.Errorf("bench: %q: %s: write one rate (100), a list (50,100,200) or start:stop:step (50:1000:50)", s, why)
	}
	num := func(v string) (float64, error) {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, bad(fmt.Sprintf("%q is not a positive number", v))
		}
		return f, nil
	}
	if parts := strings.Split(s, ":"); len(parts) > 1 {
		if len(parts) != 3 {
			return nil, bad("a range has three parts")
		}
		var v [3]float64
		for i, p := range parts {
			f, err := num(p)
			if err != nil {
				return nil, err
			}
			v[i] = f
		}
		if v[1] < v[0] {
			return nil, bad("the range ends before it starts")
		}
		if (v[1]-v[0])/v[2] >= maxLevels {
			return nil, bad(fmt.Sprintf("more than %d levels", maxLevels))
		}
		n := int(math.Floor((v[1]-v[0])/v[2]+1e-9)) + 1 // stop included, within rounding
		out := make([]float64, n)
		for i := range out {
			out[i] = v[0] + float64(i)*v[2]
		}
		return out, nil
	}
	var out []float64
	for _, p := range strings.Split(s, ",") {
		f, err := num(p)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	if len(out) > maxLevels {
		return nil, bad(fmt.Sprintf("more than %d levels", maxLevels))
	}
	return out, nil
}

// ParseConcurrency reads closed-loop levels in the same forms as ParseRates; each must be a
// whole number of clients.
func ParseConcurrency(s string) ([]int, error) {
	rates, err := ParseRates(s)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(rates))
	for i, r := range rates {
		if r != math.Trunc(r) || r > 1e5 {
			return nil, fmt.Errorf("bench: --concurrency %q: %g is not a whole number of clients", s, r)
		}
		out[i] = int(r)
	}
	return out, nil
}
