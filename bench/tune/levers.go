package tune

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// delayLadder are the batch windows tried: each trial moves one rung from the current one.
var delayLadder = []time.Duration{0, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond,
	5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond}

// unavailable says why lever l cannot be tried here, or "".
func (t *tuner) unavailable(l Lever, cur Config) string {
	if why, ok := t.s.Pinned[l]; ok {
		return why
	}
	w := t.s.Workload
	switch l {
	case LeverThreads:
		if t.s.GPU {
			return "threads not tried: on CUDA the model does not run on intra-op threads"
		}
		if t.s.Cores < 2 {
			return "threads not tried: this machine has one core"
		}
	case LeverBatchTokens:
		if t.tokens == 0 {
			return "max_batch_tokens not tried: the server sent no token counts (x-compute-tokens) to size a budget by"
		}
	case LeverCache:
		if w.Repeat < 0.05 {
			return fmt.Sprintf("cache not tried: the workload's own repeat ratio is %.0f%% (%d distinct of %d texts). The bench replays the texts in a cycle, "+
				"so under a cache nearly every request after the first %d would hit: that would measure the replay, not traffic like this workload",
				100*w.Repeat, w.Distinct, w.Texts, w.Texts)
		}
	}
	return ""
}

// candidates are the values lever l tries from cur, the most promising first.
func (t *tuner) candidates(l Lever, cur Config) []Config {
	var out []Config
	with := func(f func(*Config)) {
		c := cur
		f(&c)
		if c != cur && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	pays := t.s.Batch != nil && t.s.Batch.batchingPays()
	switch l {
	case LeverQueueDelay:
		// A longer window builds bigger batches; the offline batch cost says whether they
		// pay. Without it, or when they do not, a shorter window goes first.
		down, up := ladderNeighbours(delayLadder, cur.MaxQueueDelay)
		first, second := down, up
		if pays {
			first, second = up, down
		}
		for _, d := range []*time.Duration{first, second} {
			if d != nil {
				with(func(c *Config) { c.MaxQueueDelay = *d })
			}
		}
	case LeverMaxBatch:
		down, up := ladderNeighbours(batchLadder(t.s.GPU), cur.MaxBatch)
		if b := t.bestBatch(); b > 0 && b != cur.MaxBatch {
			with(func(c *Config) { c.MaxBatch = b })
			if b > cur.MaxBatch {
				down, up = up, down // toward the model's best first
			}
		}
		for _, n := range []*int{down, up} {
			if n != nil {
				with(func(c *Config) { c.MaxBatch = *n })
			}
		}
	case LeverBatchTokens:
		// The budget binds only below max batch × the longest text: tighter, long texts go
		// in smaller batches while short ones still fill one.
		longest := int(math.Ceil(t.tokens))
		binds := cur.MaxBatch * longest
		if cur.MaxBatchTokens == 0 || cur.MaxBatchTokens >= binds {
			for _, f := range []int{2, 4} {
				if v := pow2Below(binds / f); v >= longest {
					with(func(c *Config) { c.MaxBatchTokens = v })
				}
			}
		} else {
			if v := cur.MaxBatchTokens / 2; v >= longest {
				with(func(c *Config) { c.MaxBatchTokens = v })
			}
			with(func(c *Config) {
				c.MaxBatchTokens = cur.MaxBatchTokens * 2
				if c.MaxBatchTokens >= binds {
					c.MaxBatchTokens = 0
				}
			})
		}
	case LeverSessions:
		hi := 8
		if !t.s.GPU {
			hi = max(2, 2*t.s.Cores/max(1, cur.Threads))
		}
		order := []int{cur.Sessions + 1, cur.Sessions - 1} // below the cores: more first
		if !t.s.GPU && cur.Sessions*cur.Threads >= t.s.Cores {
			order = []int{cur.Sessions - 1, cur.Sessions + 1} // at or past them: fewer first
		}
		for _, n := range order {
			if n >= 1 && n <= hi {
				with(func(c *Config) { c.Sessions = n })
			}
		}
	case LeverThreads:
		var ts []int
		for n := 1; n <= t.s.Cores; n *= 2 {
			if n != cur.Threads {
				ts = append(ts, n)
			}
		}
		slices.SortStableFunc(ts, func(a, b int) int {
			da := math.Abs(math.Log2(float64(a) / float64(cur.Threads)))
			db := math.Abs(math.Log2(float64(b) / float64(cur.Threads)))
			switch {
			case da < db:
				return -1
			case da > db:
				return 1
			}
			return 0
		})
		_, fixed := t.s.Pinned[LeverSessions] // the model's instances: sessions stay
		for _, n := range ts {
			with(func(c *Config) {
				c.Threads = n
				if !fixed {
					c.Sessions = max(1, t.s.Cores/n)
				}
			})
		}
	case LeverVersion:
		for _, v := range t.s.Versions {
			if v.Allowed {
				with(func(c *Config) { c.Version = v.Version })
			}
		}
	case LeverCache:
		with(func(c *Config) {
			c.CacheBytes = t.s.Workload.FitBytes
			if cur.CacheBytes > 0 {
				c.CacheBytes = 0
			}
		})
	}
	return out
}

// further is the next value after a kept move of lever l from old to cur: one more step the
// same way, for the levers that have a direction.
func (t *tuner) further(l Lever, old, cur Config) []Config {
	next := cur
	switch l {
	case LeverQueueDelay:
		down, up := ladderNeighbours(delayLadder, cur.MaxQueueDelay)
		if d := pick(down, up, cur.MaxQueueDelay > old.MaxQueueDelay); d != nil {
			next.MaxQueueDelay = *d
		}
	case LeverMaxBatch:
		down, up := ladderNeighbours(batchLadder(t.s.GPU), cur.MaxBatch)
		if n := pick(down, up, cur.MaxBatch > old.MaxBatch); n != nil {
			next.MaxBatch = *n
		}
	case LeverBatchTokens:
		if cur.MaxBatchTokens != 0 && (old.MaxBatchTokens == 0 || cur.MaxBatchTokens < old.MaxBatchTokens) {
			if v := cur.MaxBatchTokens / 2; v >= int(math.Ceil(t.tokens)) {
				next.MaxBatchTokens = v
			}
		}
	case LeverSessions:
		n := cur.Sessions + 1
		if cur.Sessions < old.Sessions {
			n = cur.Sessions - 1
		}
		if n >= 1 && (t.s.GPU && n <= 8 || !t.s.GPU && n <= max(2, 2*t.s.Cores/max(1, cur.Threads))) {
			next.Sessions = n
		}
	}
	if next == cur {
		return nil
	}
	return []Config{next}
}

func pick[T any](down, up *T, upward bool) *T {
	if upward {
		return up
	}
	return down
}

// bestBatch is the offline model's best batch size, on the ladder; 0 without a model.
func (t *tuner) bestBatch() int {
	if t.s.Batch == nil {
		return 0
	}
	return t.s.Batch.BestBatch
}

func batchLadder(gpu bool) []int {
	top := 128
	if gpu {
		top = 512
	}
	var out []int
	for n := 1; n <= top; n *= 2 {
		out = append(out, n)
	}
	return out
}

// ladderNeighbours are the rungs just below and just above v (nil at an end); v need not be
// on the ladder.
func ladderNeighbours[T int | time.Duration](ladder []T, v T) (down, up *T) {
	for i := range ladder {
		if ladder[i] < v {
			down = &ladder[i]
		}
		if ladder[i] > v && up == nil {
			up = &ladder[i]
		}
	}
	return down, up
}

// pow2Below is the largest power of two at most n (0 for n < 1).
func pow2Below(n int) int {
	if n < 1 {
		return 0
	}
	p := 1
	for p*2 <= n {
		p *= 2
	}
	return p
}
