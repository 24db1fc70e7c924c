package report_test

import (
	"math"
	"testing"

	"github.com/ortserve/ortserve/bench/report"
)

func TestTextNumbers(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0"},
		{0.0123456, "0.0123"},
		{0.5, "0.500"},
		{4.567, "4.57"},
		{9.996, "10.0"},
		{78.94, "78.9"},
		{99.96, "100"},
		{412.4, "412"},
		{12345.6, "12346"},
		{-3.21, "-3.21"},
		{math.NaN(), report.Dash},
		{math.Inf(1), report.Dash},
	}
	for _, tt := range tests {
		if got := report.Num(tt.in); got != tt.want {
			t.Errorf("Num(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
	pcts := []struct {
		in   float64
		want string
	}{{0.42, "42%"}, {0.034, "3.4%"}, {0.05, "5%"}, {1.5, "150%"}, {math.NaN(), report.Dash}}
	for _, tt := range pcts {
		if got := report.Pct(tt.in); got != tt.want {
			t.Errorf("Pct(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFormats(t *testing.T) {
	tests := []struct {
		name, got, want string
	}{
		{"Short trims zeros", report.Short(50.0), "50"},
		{"Short keeps digits", report.Short(2.5), "2.5"},
		{"Short small", report.Short(0.0120), "0.012"},
		{"Short NaN", report.Short(math.NaN()), report.Dash},
		{"NumOrDash zero", report.NumOrDash(0), report.Dash},
		{"NumOrDash value", report.NumOrDash(12.34), "12.3"},
		{"Fixed", report.Fixed(2.345, 1), "2.3"},
		{"Fixed zero decimals", report.Fixed(99.5, 0), "100"},
		{"FixedOrDash zero", report.FixedOrDash(0, 1), report.Dash},
		{"FixedOrDash Inf", report.FixedOrDash(math.Inf(1), 1), report.Dash},
		{"FixedOrDash value", report.FixedOrDash(20, 1), "20.0"},
		{"Signed negative", report.Signed(-0.25, 2), "−0.25"},
		{"Signed rounds to zero", report.Signed(-0.004, 2), "0.00"},
		{"Signed positive", report.Signed(1.5, 1), "1.5"},
		{"Percent", report.Percent(0.9, 1), "90.0%"},
		{"Percent none", report.Percent(0.125, 0), "12%"},
		{"OrDash blank", report.OrDash("  "), report.Dash},
		{"OrDash text", report.OrDash("x"), "x"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, tt.got, tt.want)
		}
	}
	if report.Finite(math.NaN()) || report.Finite(math.Inf(-1)) || !report.Finite(-1e300) {
		t.Error("Finite is wrong about NaN, -Inf or -1e300")
	}
}

func TestDecimals(t *testing.T) {
	tests := []struct {
		v, limit float64
		lo, want int
	}{
		{1.04, 1, 1, 2},    // 1.0 and 1.0 would read alike
		{1.5, 1, 1, 1},     // 1.5 and 1.0 differ at once
		{1, 1, 1, 1},       // equal values need nothing more
		{1.00001, 1, 0, 4}, // never more than four
		{0.99, 0.9, 0, 1},
	}
	for _, tt := range tests {
		if got := report.Decimals(tt.v, tt.limit, tt.lo); got != tt.want {
			t.Errorf("Decimals(%v, %v, %d) = %d, want %d", tt.v, tt.limit, tt.lo, got, tt.want)
		}
	}
}
