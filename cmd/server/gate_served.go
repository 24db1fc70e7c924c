package main

// The gate's served pass: the same texts through the batcher as a server sends them.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ortserve/ortserve/bench/gate"
	"github.com/ortserve/ortserve/models"
)

// defaultServedConcurrency is the served pass's requests in flight: two full batches at the
// default max batch size, so that a batch queues while another runs.
const defaultServedConcurrency = 64

// servedPass runs every version's texts through the batcher under concurrency (serveTexts).
// It returns nil and a note instead when the pass is off or cannot measure anything.
func (j *gateJob) servedPass(ctx context.Context, m *models.Model, versions []string, texts []string, bar *progress, stderr io.Writer) (map[string]versionRun, string, error) {
	if j.served == 0 {
		return nil, "", nil
	}
	if j.cfg.Cache.MaxBytes > 0 {
		note := fmt.Sprintf("Served-path variability was not measured: %s has a response cache (cache.max_bytes), which would answer the served pass from the fixed chunks' answers.", j.cfg.Name)
		if !j.quiet {
			fmt.Fprintf(stderr, "gate: %s\n", note)
		}
		return nil, note, nil
	}
	// More in flight than a version may queue would fail with 429s, not measure anything.
	limit := j.cfg.Batching.Apply(j.serve.Batch).MaxQueueRequests
	concurrency := min(j.served, limit)
	if concurrency < j.served && !j.quiet {
		fmt.Fprintf(stderr, "gate: --served-concurrency %d is over %s's max_queue_requests: %d in flight\n", j.served, j.cfg.Name, concurrency)
	}
	j.served = concurrency // the reports say what ran
	out := make(map[string]versionRun, len(versions))
	for _, v := range versions {
		r, err := serveTexts(ctx, m, v, texts, concurrency, j.opts.Seed, bar)
		bar.done()
		if err != nil {
			return nil, "", fmt.Errorf("%s/%s, served pass: %w", j.cfg.Name, v, err)
		}
		out[v] = r
	}
	return out, "", nil
}

// servedReport is the served-path variability of candidate's report: the baseline's and the
// candidate's, each against its own fixed-chunk answers.
func servedReport(j *gateJob, served, fixed map[string]versionRun, candidate string) (*gate.Served, error) {
	task := gate.TaskEmbed
	if j.cfg.Task == models.TaskClassify {
		task = gate.TaskClassify
	}
	s := &gate.Served{
		Method:      fmt.Sprintf("one text per request, %d in flight, in a shuffled order", j.served),
		Concurrency: j.served,
		Required:    j.invariant,
	}
	for _, v := range []string{j.baseline, candidate} {
		sv, err := gate.ServedVariability(task, v, fixed[v].out, served[v].out, served[v].elapsed)
		if err != nil {
			return nil, err
		}
		s.Versions = append(s.Versions, sv)
	}
	return s, nil
}

// serveTexts sends texts to version the way a server's clients do: one text per request,
// concurrency requests in flight, in an order shuffled with seed. The batcher then batches
// each text with whatever else is queued, of any length, as it does in production, and a
// version whose output depends on its batch-mates answers differently than on the fixed
// chunks. The outputs keep texts' order.
func serveTexts(ctx context.Context, m *models.Model, version string, texts []string, concurrency int, seed uint64, bar *progress) (versionRun, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := make([][]float32, len(texts))
	next := make(chan int)
	var done atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range min(concurrency, len(texts)) {
		wg.Go(func() {
			for i := range next {
				res, err := answer(ctx, m, version, texts[i:i+1])
				if err != nil {
					cancel(err)
					continue // drain next; the feeder stops on the cancel
				}
				out[i] = res[0]
				n := int(done.Add(1))
				bar.draw(n, len(texts), fmt.Sprintf("%s/%s served %d/%d texts  %s", m.Name(), version, n, len(texts), time.Since(start).Round(time.Second)))
			}
		})
	}
feed:
	for _, i := range rand.New(rand.NewPCG(seed, servedStream)).Perm(len(texts)) {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return versionRun{}, err
	}
	return versionRun{out: out, elapsed: time.Since(start)}, nil
}

// servedStream is the second word of the served pass's shuffle: a fixed one, so that the
// order is the same for every version and from --seed alone.
const servedStream = 0x73657276 // "serv"
