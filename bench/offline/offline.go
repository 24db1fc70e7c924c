// Package offline measures the physical limit of a model version, as `server bench --offline`
// and `server tune` see it: raw session throughput at each batch size, the texts tokenized
// beforehand, every session busy, no HTTP and no batcher. It also lays out the report of a
// bench that measures only that (Result).
//
// The sessions and encodings come from a Loader, which opens them as serve would
// (runtime/engine): the package needs neither ONNX Runtime nor the tokenizer library, and
// builds and tests without cgo.
package offline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// ErrNoTexts is returned for a workload with no texts: there is nothing to run.
var ErrNoTexts = errors.New("offline: no texts to run")

// Rig is one model version's sessions, warmed up, and a workload's encodings: what Limit
// measures, once per batch size. The rig owns the sessions: Close closes them.
type Rig struct {
	Sessions  []runtime.Session
	Encodings []tokenize.Encoding
}

// Limit opens a rig with open, measures it at each batch size for per each (Rig.Measure),
// and closes it. Bad batch sizes fail before open is called, not after the first ones are
// measured.
//
// If ctx ends, Limit stops early and returns the points measured so far with ctx.Err().
func Limit(ctx context.Context, open func(context.Context) (*Rig, error), batches []int, per time.Duration) ([]bench.OfflinePoint, error) {
	for _, n := range batches {
		if n < 1 {
			return nil, batchError(n)
		}
	}
	r, err := open(ctx)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	points := make([]bench.OfflinePoint, 0, len(batches))
	for _, n := range batches {
		p, err := r.Measure(ctx, n, per)
		if err != nil {
			return points, err
		}
		points = append(points, p)
	}
	return points, nil
}

// Batches are the batch sizes Limit is asked for by default: powers of two up to most, and
// most itself.
func Batches(most int) []int {
	var out []int
	for n := 1; n < most; n *= 2 {
		out = append(out, n)
	}
	if most >= 1 {
		out = append(out, most)
	}
	return out
}

// Slowest is the best throughput of the slowest version: the least, over versions, of the
// most items/s any of its batch sizes reached; 0 when no version has a point above 0.
func Slowest(points map[string][]bench.OfflinePoint) float64 {
	var lo float64
	for _, pts := range points {
		var best float64
		for _, p := range pts {
			best = max(best, p.ItemsPerS)
		}
		if best > 0 && (lo == 0 || best < lo) {
			lo = best
		}
	}
	return lo
}

func batchError(n int) error {
	return fmt.Errorf("offline: batch size %d: want at least 1", n)
}

// Measure runs every session concurrently, each in its own goroutine, on padded batches of
// batch consecutive encodings (wrapping round the workload) until per has passed, after one
// un-timed run each of the same shape. Items/s is what all sessions completed over the time
// until the last run ended; P50 is the median of single runs.
func (r *Rig) Measure(ctx context.Context, batch int, per time.Duration) (bench.OfflinePoint, error) {
	switch {
	case batch < 1:
		return bench.OfflinePoint{}, batchError(batch)
	case len(r.Encodings) == 0:
		return bench.OfflinePoint{}, ErrNoTexts
	case len(r.Sessions) == 0:
		return bench.OfflinePoint{}, errors.New("offline: no sessions to run")
	}
	// Padded once, outside the timing: enough batches to cover the workload once.
	padded := make([]tokenize.Batch, (len(r.Encodings)+batch-1)/batch)
	for k := range padded {
		rows := make([]tokenize.Encoding, batch)
		for j := range rows {
			rows[j] = r.Encodings[(k*batch+j)%len(r.Encodings)]
		}
		padded[k] = tokenize.Pad(rows)
	}

	warm := func(ctx context.Context, i int, s runtime.Session) error {
		_, err := s.Run(ctx, padded[i%len(padded)])
		return err
	}
	if err := r.each(ctx, warm); err != nil {
		return bench.OfflinePoint{}, err
	}

	var next atomic.Int64
	times := make([][]time.Duration, len(r.Sessions)) // per session, merged after
	items := make([]int, len(r.Sessions))
	start := time.Now()
	err := r.each(ctx, func(ctx context.Context, i int, s runtime.Session) error {
		for {
			b := padded[int(next.Add(1)-1)%len(padded)]
			t := time.Now()
			if _, err := s.Run(ctx, b); err != nil {
				return err
			}
			times[i] = append(times[i], time.Since(t))
			items[i] += b.Rows
			if time.Since(start) >= per {
				return nil
			}
		}
	})
	elapsed := time.Since(start)
	if err != nil {
		return bench.OfflinePoint{}, err
	}
	all := slices.Sorted(slices.Values(slices.Concat(times...)))
	total := 0
	for _, n := range items {
		total += n
	}
	return bench.OfflinePoint{
		Batch:     batch,
		ItemsPerS: float64(total) / elapsed.Seconds(),
		P50:       float64(all[len(all)/2]) / float64(time.Millisecond),
	}, nil
}

// each runs f on every session at once, each in its own goroutine, and returns the first
// error, which stops the others; if ctx ends, it returns ctx.Err().
func (r *Rig) each(ctx context.Context, f func(ctx context.Context, i int, s runtime.Session) error) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i, s := range r.Sessions {
		wg.Go(func() {
			if err := f(rctx, i, s); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	// A run cut short by ctx fails with a wrapped ctx.Err(); say plainly that ctx ended.
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.Cause(rctx)
}

// Close closes the sessions. No Measure may be running.
func (r *Rig) Close() error {
	var errs []error
	for _, s := range r.Sessions {
		errs = append(errs, s.Close())
	}
	r.Sessions = nil
	return errors.Join(errs...)
}
