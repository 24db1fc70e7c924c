package tune

import (
	"fmt"
	"io"
)

// Changed says whether the serve config file key differs between two configs: whether a tuned
// config changed it from the starting one.
func Changed(from, to Config, key string) bool {
	switch key {
	case KeyQueueDelay:
		return from.MaxQueueDelay != to.MaxQueueDelay
	case KeyMaxBatch:
		return from.MaxBatch != to.MaxBatch
	case KeyBatchTokens:
		return from.MaxBatchTokens != to.MaxBatchTokens
	case KeySessions, KeyThreads:
		return from.Sessions != to.Sessions || from.Threads != to.Threads
	case KeyModels:
		return from.Version != to.Version || from.CacheBytes != to.CacheBytes
	}
	return false
}

// PrintProgress returns a Settings.Record companion that prints each experiment's decision
// as it is made, and the notes, to w; with quiet, nothing.
func PrintProgress(w io.Writer, quiet bool) func(*Outcome) {
	if quiet {
		return func(*Outcome) {}
	}
	said := map[string]bool{}
	return func(o *Outcome) {
		for _, e := range o.Entries {
			if e.N > 0 && (e.Decision == "" || e.Decision == "confirming") {
				continue // not decided yet
			}
			key := fmt.Sprintf("%d/%s/%s", e.N, e.Decision, e.Why)
			if said[key] {
				continue
			}
			said[key] = true
			if e.N == 0 {
				fmt.Fprintf(w, "tune: %s\n", e.Why)
				continue
			}
			what := e.Kind
			if e.Lever != "" {
				what += fmt.Sprintf(" %s %s", e.Lever, e.Value)
			}
			fmt.Fprintf(w, "tune: #%d %-40s %6.1f rps  p95 %6.1f ms  %-8s %s\n", e.N, what, e.Best, e.P95, e.Decision, e.Why)
		}
	}
}
