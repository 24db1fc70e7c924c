// Package tune is the tuning loop behind `server tune`: from a measured baseline, change one
// lever of a serve configuration at a time around the current best, measure each change
// against the same load and SLO, keep it only when it beats the run-to-run noise, and record
// every experiment. It decides; it does not measure: a Measurer does (BenchMeasurer with the
// bench engine, or a fake in tests), so the loop's rules test without a server.
package tune

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Config is what one experiment serves: the levers tune moves. Everything else comes from
// the base serve configuration unchanged.
type Config struct {
	MaxQueueDelay  time.Duration // batching.max_queue_delay
	MaxBatch       int           // batching.max_batch_size
	MaxBatchTokens int           // batching.max_batch_tokens; 0: no budget
	Sessions       int           // sessions per version, resolved (never the 0 of "auto")
	Threads        int           // intra-op threads per session, resolved
	Version        string        // the model version served by default and measured
	CacheBytes     int64         // the model's response cache (model.yaml cache.max_bytes); 0: off
}

// configJSON is Config as the diary writes it: durations as Go durations.
type configJSON struct {
	MaxQueueDelay  string `json:"max_queue_delay"`
	MaxBatch       int    `json:"max_batch_size"`
	MaxBatchTokens int    `json:"max_batch_tokens"`
	Sessions       int    `json:"sessions"`
	Threads        int    `json:"threads"`
	Version        string `json:"version"`
	CacheBytes     int64  `json:"cache_max_bytes"`
}

// MarshalJSON writes the config with its delay as a duration string ("5ms").
func (c Config) MarshalJSON() ([]byte, error) {
	return json.Marshal(configJSON{c.MaxQueueDelay.String(), c.MaxBatch, c.MaxBatchTokens, c.Sessions, c.Threads, c.Version, c.CacheBytes})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *Config) UnmarshalJSON(data []byte) error {
	var j configJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	d, err := time.ParseDuration(j.MaxQueueDelay)
	if err != nil {
		return fmt.Errorf("tune: max_queue_delay: %w", err)
	}
	*c = Config{d, j.MaxBatch, j.MaxBatchTokens, j.Sessions, j.Threads, j.Version, j.CacheBytes}
	return nil
}

// key identifies a config: two experiments with the same key measured the same thing.
func (c Config) key() string {
	b, _ := c.MarshalJSON()
	return string(b)
}

// Lever is one setting tune changes on its own.
type Lever string

// The levers, named by the setting they change.
const (
	LeverQueueDelay  Lever = "max_queue_delay"
	LeverMaxBatch    Lever = "max_batch_size"
	LeverBatchTokens Lever = "max_batch_tokens"
	LeverSessions    Lever = "sessions"
	// LeverThreads changes intra-op threads at a fixed core budget: sessions follow as
	// cores ÷ threads, so that the lever trades parallel batches for faster ones instead of
	// oversubscribing the CPU. It is one lever, though it writes two settings.
	LeverThreads Lever = "threads"
	LeverVersion Lever = "version"
	LeverCache   Lever = "cache"
)

// Levers lists every lever.
var Levers = []Lever{LeverQueueDelay, LeverMaxBatch, LeverBatchTokens, LeverSessions, LeverThreads, LeverVersion, LeverCache}

// Value prints the lever's value in c as the diary shows it.
func (l Lever) Value(c Config) string {
	switch l {
	case LeverQueueDelay:
		return c.MaxQueueDelay.String()
	case LeverMaxBatch:
		return strconv.Itoa(c.MaxBatch)
	case LeverBatchTokens:
		if c.MaxBatchTokens == 0 {
			return "0 (none)"
		}
		return strconv.Itoa(c.MaxBatchTokens)
	case LeverSessions:
		return strconv.Itoa(c.Sessions)
	case LeverThreads:
		return strconv.Itoa(c.Threads)
	case LeverVersion:
		return c.Version
	case LeverCache:
		if c.CacheBytes == 0 {
			return "off"
		}
		return bytesText(c.CacheBytes)
	}
	return ""
}

// bytesText prints a byte count in MiB or KiB.
func bytesText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
