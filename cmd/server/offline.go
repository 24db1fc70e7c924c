package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// offlineLimit measures the physical limit of one model version: raw ONNX Runtime session
// throughput at each batch size, with the sessions and threads `serve` would give the version
// on backend b, the texts tokenized beforehand, no HTTP and no batcher. dir is the model
// folder; version "" is the config's default version. Each batch size runs for per.
//
// If ctx ends, offlineLimit stops early and returns the points measured so far with ctx.Err().
func offlineLimit(ctx context.Context, b *backend, dir, version string, texts []string, batches []int, per time.Duration) ([]bench.OfflinePoint, error) {
	// Bad batch sizes fail before the sessions load, not after the first ones are measured.
	for _, n := range batches {
		if n < 1 {
			return nil, fmt.Errorf("offline: batch size %d: want at least 1", n)
		}
	}
	r, err := openOffline(ctx, b, dir, version, texts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	points := make([]bench.OfflinePoint, 0, len(batches))
	for _, n := range batches {
		p, err := r.measure(ctx, n, per)
		if err != nil {
			return points, err
		}
		points = append(points, p)
	}
	return points, nil
}

// offlineBatches are the batch sizes offlineLimit is asked for by default: powers of two up
// to most, and most itself.
func offlineBatches(most int) []int {
	var out []int
	for n := 1; n < most; n *= 2 {
		out = append(out, n)
	}
	if most >= 1 {
		out = append(out, most)
	}
	return out
}

// offlineRig is one model version's sessions, warmed up, and a workload's encodings: what
// offlineLimit measures, once per batch size.
type offlineRig struct {
	sessions []runtime.Session
	encs     []tokenize.Encoding
}

// openOffline reads the config in dir, tokenizes texts (cut at the config's max length) and
// opens and warms up the sessions serve would run version on, as Backend.Executor does.
func openOffline(ctx context.Context, b *backend, dir, version string, texts []string) (*offlineRig, error) {
	if len(texts) == 0 {
		return nil, errors.New("offline: no texts to run")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg, err := models.ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	version = cmp.Or(version, cfg.DefaultVersion)
	vc, ok := cfg.Versions[version]
	if !ok {
		return nil, &models.UnknownError{Kind: models.ErrUnknownVersion, Name: cfg.Name + "/" + version, Known: slices.Sorted(maps.Keys(cfg.Versions))}
	}
	if !vc.RunsOn(b.Device()) {
		return nil, fmt.Errorf("offline: %s/%s runs on %v, not %s", cfg.Name, version, vc.Devices, b.Device())
	}

	tok, err := b.Tokenizer(filepath.Join(dir, cfg.Tokenizer), cfg.MaxLength)
	if err != nil {
		return nil, fmt.Errorf("offline: %s: tokenizer: %w", cfg.Name, err)
	}
	encs, err := tok.Encode(texts, tokenize.Options{Truncate: true})
	tok.Close()
	if err != nil {
		return nil, fmt.Errorf("offline: %s: %w", cfg.Name, err)
	}

	sessions, err := b.openSessions(filepath.Join(dir, vc.File), cfg.Output, cmp.Or(cfg.Instances, b.sessions))
	if err != nil {
		return nil, fmt.Errorf("offline: %s/%s: %w", cfg.Name, version, err)
	}
	r := &offlineRig{encs: encs, sessions: sessions}
	return r, nil
}

// measure runs every session concurrently, each in its own goroutine, on padded batches of
// batch consecutive encodings (wrapping round the workload) until per has passed, after one
// un-timed run each of the same shape. Items/s is what all sessions completed over the time
// until the last run ended; P50 is the median of single runs.
func (r *offlineRig) measure(ctx context.Context, batch int, per time.Duration) (bench.OfflinePoint, error) {
	if batch < 1 {
		return bench.OfflinePoint{}, fmt.Errorf("offline: batch size %d: want at least 1", batch)
	}
	// Padded once, outside the timing: enough batches to cover the workload once.
	padded := make([]tokenize.Batch, (len(r.encs)+batch-1)/batch)
	for k := range padded {
		rows := make([]tokenize.Encoding, batch)
		for j := range rows {
			rows[j] = r.encs[(k*batch+j)%len(r.encs)]
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
	times := make([][]time.Duration, len(r.sessions)) // per session, merged after
	items := make([]int, len(r.sessions))
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
func (r *offlineRig) each(ctx context.Context, f func(ctx context.Context, i int, s runtime.Session) error) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i, s := range r.sessions {
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

// Close closes the sessions. No measure may be running.
func (r *offlineRig) Close() error {
	var errs []error
	for _, s := range r.sessions {
		errs = append(errs, s.Close())
	}
	r.sessions = nil
	return errors.Join(errs...)
}
