package server

import (
	"testing"
	"time"
)

// X-Request-Timeout: milliseconds or a Go duration, positive and within what a Duration
// holds; anything else is refused (400), never read as "no deadline".
func TestParseTimeout(t *testing.T) {
	tests := []struct {
		h    string
		want time.Duration // 0: refused
	}{
		{"250", 250 * time.Millisecond},
		{"0.5", 500 * time.Microsecond},
		{"250ms", 250 * time.Millisecond},
		{"2h", 2 * time.Hour},
		{"9000000000000", 9000000000000 * time.Millisecond}, // just under the largest Duration
		{"", 0},
		{"0", 0},
		{"-5", 0},
		{"-1ms", 0},
		{"soon", 0},
		{"NaN", 0},
		{"Inf", 0},
		{"+Inf", 0},
		{"1e300", 0},
		{"9300000000000", 0}, // past the largest Duration in milliseconds
		{"9223372036854775807s", 0},
	}
	for _, tt := range tests {
		d, err := parseTimeout(tt.h)
		if tt.want == 0 && err == nil {
			t.Errorf("%q: accepted as %v, want refused", tt.h, d)
		}
		if tt.want != 0 && (err != nil || d != tt.want) {
			t.Errorf("%q: %v, %v; want %v", tt.h, d, err, tt.want)
		}
	}
}
