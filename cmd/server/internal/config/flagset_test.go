package config

import "testing"

// FlagSet hands out each command's own set, and nothing for a name that is not a command.
func TestFlagSet(t *testing.T) {
	tests := []struct{ command, flag string }{
		{"serve", "max-batch"},
		{"bench", "offline-batches"},
		{"gate", "require-batch-invariance"},
		{"inspect", "version"},
		{"plan", "peak-rps"},
		{"tune", "budget"},
	}
	for _, tt := range tests {
		fs := FlagSet(tt.command)
		if fs == nil || fs.Name() != tt.command || fs.Lookup(tt.flag) == nil {
			t.Errorf("FlagSet(%q) = %v, want the %s flag set, with --%s", tt.command, fs, tt.command, tt.flag)
		}
	}
	for _, name := range []string{"", "quantize", "bench compare"} {
		if fs := FlagSet(name); fs != nil {
			t.Errorf("FlagSet(%q) = %s's set, want nil", name, fs.Name())
		}
	}
}
