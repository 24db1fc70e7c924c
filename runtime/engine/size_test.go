package engine

import (
	"testing"

	"github.com/ortserve/ortserve/runtime/ort"
)

// On CPU a version gets one single-thread session per thread the process may run at once
// (GOMAXPROCS, which follows a container's CPU limit), not per core of the host; on CUDA one
// session. What is asked for wins.
func TestSize(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		p                        ort.Provider
		threads, sessions, procs int
		wantThreads, wantSess    int
	}{
		{"cpu limited to 2 on a large host", ort.ProviderCPU, 0, 0, 2, 1, 2},
		{"cpu one proc", ort.ProviderCPU, 0, 0, 1, 1, 1},
		{"cpu 64 procs", ort.ProviderCPU, 0, 0, 64, 1, 64},
		{"cpu two threads a session", ort.ProviderCPU, 2, 0, 8, 2, 4},
		{"cpu more threads than procs", ort.ProviderCPU, 4, 0, 2, 4, 1},
		{"cpu sessions given", ort.ProviderCPU, 0, 3, 64, 1, 3},
		{"cuda default", ort.ProviderCUDA, 0, 0, 64, 0, 1},
		{"cuda given", ort.ProviderCUDA, 2, 4, 64, 2, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			threads, sessions := size(tc.p, tc.threads, tc.sessions, tc.procs)
			if threads != tc.wantThreads || sessions != tc.wantSess {
				t.Errorf("size(%s, %d, %d, %d) = %d threads, %d sessions; want %d, %d",
					tc.p, tc.threads, tc.sessions, tc.procs, threads, sessions, tc.wantThreads, tc.wantSess)
			}
		})
	}
}

// Packing auto packs on the CPU only; on and off hold on every provider.
func TestPackingOn(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		provider ort.Provider
		want     bool
	}{
		{"auto", ort.ProviderCPU, true},
		{"auto", ort.ProviderCUDA, false},
		{"on", ort.ProviderCUDA, true},
		{"off", ort.ProviderCPU, false},
	} {
		if got := PackingOn(tc.mode, tc.provider); got != tc.want {
			t.Errorf("PackingOn(%q, %s) = %v, want %v", tc.mode, tc.provider, got, tc.want)
		}
	}
}
