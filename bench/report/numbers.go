package report

import (
	"math"
	"strconv"
	"strings"
)

// Dash stands for a value that was not measured or does not apply; a zero would be a fake
// number.
const Dash = "–"

// Finite reports whether v is neither NaN nor an infinity.
func Finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Num prints v to three significant digits without an exponent: 0.0123, 4.56, 78.9, 412,
// 12345. Anything not finite prints as a dash.
func Num(v float64) string {
	if !Finite(v) {
		return Dash
	}
	if v == 0 {
		return "0"
	}
	decimals := 2 - int(math.Floor(math.Log10(math.Abs(v))))
	decimals = min(max(decimals, 0), 6)
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	// Rounding can carry into a new digit (9.996 → "10.00"); print it at the new magnitude.
	if r, err := strconv.ParseFloat(s, 64); err == nil && r != 0 && decimals > 0 &&
		2-int(math.Floor(math.Log10(math.Abs(r)))) < decimals {
		s = strconv.FormatFloat(r, 'f', max(decimals-1, 0), 64)
	}
	return s
}

// Short is Num without trailing zeros, for settings rather than measurements: "50 ms",
// "2.5 s".
func Short(v float64) string {
	s := Num(v)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// NumOrDash is Num with a dash for zero: for quantities where zero means "none".
func NumOrDash(v float64) string {
	if v == 0 {
		return Dash
	}
	return Num(v)
}

// Fixed prints v with dec decimals: Fixed(2.345, 1) is "2.3".
func Fixed(v float64, dec int) string { return strconv.FormatFloat(v, 'f', dec, 64) }

// FixedOrDash is Fixed with a dash for zero or a value that is not finite.
func FixedOrDash(v float64, dec int) string {
	if v == 0 || !Finite(v) {
		return Dash
	}
	return Fixed(v, dec)
}

// Signed is Fixed with a true minus sign (−0.5); a value that rounds to zero has none.
func Signed(v float64, dec int) string {
	s := Fixed(v, dec)
	if strings.TrimLeft(s, "-0.") == "" {
		return strings.TrimPrefix(s, "-")
	}
	return strings.Replace(s, "-", "−", 1)
}

// Decimals is how many decimals, from lo up to 4, tell v from limit apart in print, so that
// a check never reads "1.0 exceeds 1.0".
func Decimals(v, limit float64, lo int) int {
	for d := lo; d < 4; d++ {
		if v == limit || Fixed(v, d) != Fixed(limit, d) {
			return d
		}
	}
	return 4
}

// Pct prints a fraction as a percentage with the decimals it needs: 0.42 → "42%",
// 0.034 → "3.4%". Anything not finite prints as a dash.
func Pct(f float64) string {
	if !Finite(f) {
		return Dash
	}
	p := f * 100
	if math.Abs(p) < 10 && p != math.Trunc(p) {
		return Fixed(p, 1) + "%"
	}
	return Fixed(p, 0) + "%"
}

// Percent prints a fraction as a percentage with dec decimals: Percent(0.9, 1) is "90.0%".
func Percent(f float64, dec int) string { return Fixed(100*f, dec) + "%" }

// OrDash is s, or a dash when s is blank.
func OrDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return Dash
	}
	return s
}
