package gate

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/tokenize"
)

// DefaultServedConcurrency is the served pass's requests in flight: two full batches at the
// default max batch size, so that a batch queues while another runs.
const DefaultServedConcurrency = 64

// Progress shows how far a run is; Draw may be called from several goroutines at once.
type Progress interface {
	Draw(done, total int, text string)
	Done()
}

// Job is one gate run on a loaded model: the baseline and candidates, the dataset, and how
// to judge and measure them.
type Job struct {
	Model      *models.Model
	Baseline   string
	Candidates []string
	Data       *Dataset
	Budget     Budget
	Options    Options
	// Chunk is the most texts of one fixed batch.
	Chunk int
	// Served is the served pass's requests in flight (ServedPass); 0: no served pass.
	Served int
	// Invariant fails a candidate whose served answers differ from its fixed-chunk ones.
	Invariant bool
	// Progress, when not nil, shows the runs' progress; Notes, when not nil, gets notes.
	Progress Progress
	Notes    io.Writer
}

// Run runs the baseline and every candidate on the dataset in fixed chunks, then, if asked,
// through the batcher as a server sends them (the served pass), and returns one report per
// candidate, in order. The chunks are the texts sorted by token count, so that a chunk pads
// little, and cut at Chunk texts; every version runs the same chunks, one at a time, each
// as batches of its own straight on the version's sessions (models.Model.Fixed): a version
// whose activations are quantized per batch (dynamic int8) then gives the same outputs on
// every run, and the numbers can be reproduced.
func Run(ctx context.Context, j Job) ([]*Report, error) {
	if j.Progress == nil {
		j.Progress = noProgress{}
	}
	m := j.Model
	fixed, err := m.Fixed()
	if err != nil {
		return nil, err
	}
	texts := make([]string, len(j.Data.Examples))
	for i, e := range j.Data.Examples {
		texts[i] = e.Text
	}
	chunks, err := chunkTexts(m, texts, j.Chunk)
	if err != nil {
		return nil, err
	}
	versions := append([]string{j.Baseline}, j.Candidates...)
	outputs := map[string]versionRun{}
	for _, v := range versions {
		r, err := runChunks(ctx, fixed, v, texts, chunks, j.Progress)
		j.Progress.Done()
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", m.Name(), v, err)
		}
		outputs[v] = r
	}
	served, note, err := j.servedPass(ctx, versions, texts)
	if err != nil {
		return nil, err
	}
	var reports []*Report
	for _, v := range j.Candidates {
		base, cand := outputs[j.Baseline], outputs[v]
		var rep *Report
		if m.Config.Task == models.TaskClassify {
			rep, err = Classify(j.Data,
				ClassifyRun{Version: j.Baseline, Classes: m.Labels(), Probs: base.out, Elapsed: base.elapsed},
				ClassifyRun{Version: v, Classes: m.Labels(), Probs: cand.out, Elapsed: cand.elapsed},
				j.Budget, j.Options)
		} else {
			rep, err = Embed(j.Data,
				EmbedRun{Version: j.Baseline, Vectors: base.out, Elapsed: base.elapsed},
				EmbedRun{Version: v, Vectors: cand.out, Elapsed: cand.elapsed},
				j.Budget, j.Options)
		}
		if err != nil {
			return nil, &DataError{Err: fmt.Errorf("%s/%s: %w", m.Name(), v, err)}
		}
		rep.Model = m.Name()
		switch {
		case served != nil:
			s, err := j.servedReport(served, outputs, v)
			if err != nil {
				return nil, err
			}
			if err := rep.AddServed(s); err != nil {
				return nil, err
			}
		case note != "":
			rep.Notes = append(rep.Notes, note)
		}
		reports = append(reports, rep)
	}
	return reports, nil
}

// DataError is an error of Classify or Embed in Run: data or outputs the gate cannot judge
// (a dataset label no class has, say), which a command reports as a usage or data error
// rather than as a candidate that failed.
type DataError struct{ Err error }

func (e *DataError) Error() string { return e.Err.Error() }

func (e *DataError) Unwrap() error { return e.Err }

// versionRun is one version's outputs on a dataset, in its order, and the time they took.
type versionRun struct {
	out     [][]float32
	elapsed time.Duration
}

// chunkTexts orders the texts by token count and cuts them into chunks of at most size
// texts, by index.
func chunkTexts(m *models.Model, texts []string, size int) ([][]int, error) {
	encs, err := m.Tokenizer().Encode(texts, tokenize.Options{Truncate: true})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name(), err)
	}
	order := make([]int, len(texts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return encs[a].Len() - encs[b].Len() })
	return slices.Collect(slices.Chunk(order, max(size, 1))), nil
}

// runChunks runs texts through version's pipeline one chunk at a time. The outputs keep
// texts' order.
func runChunks(ctx context.Context, m *models.Model, version string, texts []string, chunks [][]int, bar Progress) (versionRun, error) {
	out := make([][]float32, len(texts))
	batch := make([]string, 0, len(texts))
	done := 0
	start := time.Now()
	for _, c := range chunks {
		batch = batch[:0]
		for _, i := range c {
			batch = append(batch, texts[i])
		}
		res, err := answer(ctx, m, version, batch)
		if err != nil {
			return versionRun{}, err
		}
		for j, i := range c {
			out[i] = res[j]
		}
		done += len(c)
		bar.Draw(done, len(texts), fmt.Sprintf("%s/%s %d/%d texts  %s", m.Name(), version, done, len(texts), time.Since(start).Round(time.Second)))
	}
	return versionRun{out: out, elapsed: time.Since(start)}, nil
}

// answer runs texts through version's pipeline as one request, truncating as a request with
// truncate does: probabilities in label order (classify) or vectors normalized as the model's
// config says (embed).
func answer(ctx context.Context, m *models.Model, version string, texts []string) ([][]float32, error) {
	var res [][]float32
	var err error
	if m.Config.Task == models.TaskClassify {
		res, _, err = m.Classify(ctx, version, texts, models.ClassifyOptions{Truncate: true})
	} else {
		res, _, err = m.Embed(ctx, version, texts, models.EmbedOptions{Truncate: true, Normalize: m.Config.Normalize})
	}
	return res, err
}

// servedPass runs every version's texts through the batcher, j.Served requests in flight
// (serveTexts). It returns nil and a note instead when the pass is off or cannot measure
// anything.
func (j *Job) servedPass(ctx context.Context, versions, texts []string) (map[string]versionRun, string, error) {
	m := j.Model
	if j.Served == 0 {
		return nil, "", nil
	}
	if m.Config.Cache.MaxBytes > 0 {
		note := fmt.Sprintf("Served-path variability was not measured: %s has a response cache (cache.max_bytes), which would answer the served pass from the fixed chunks' answers.", m.Name())
		if j.Notes != nil {
			fmt.Fprintf(j.Notes, "gate: %s\n", note)
		}
		return nil, note, nil
	}
	out := make(map[string]versionRun, len(versions))
	for _, v := range versions {
		r, err := serveTexts(ctx, m, v, texts, j.Served, j.Options.Seed, j.Progress)
		j.Progress.Done()
		if err != nil {
			return nil, "", fmt.Errorf("%s/%s, served pass: %w", m.Name(), v, err)
		}
		out[v] = r
	}
	return out, "", nil
}

// servedReport is the served-path variability of candidate's report: the baseline's and the
// candidate's, each against its own fixed-chunk answers.
func (j *Job) servedReport(served, fixed map[string]versionRun, candidate string) (*Served, error) {
	task := TaskEmbed
	if j.Model.Config.Task == models.TaskClassify {
		task = TaskClassify
	}
	s := &Served{
		Method:      fmt.Sprintf("one text per request, %d in flight, in a shuffled order", j.Served),
		Concurrency: j.Served,
		Required:    j.Invariant,
	}
	for _, v := range []string{j.Baseline, candidate} {
		sv, err := ServedVariability(task, v, fixed[v].out, served[v].out, served[v].elapsed)
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
func serveTexts(ctx context.Context, m *models.Model, version string, texts []string, concurrency int, seed uint64, bar Progress) (versionRun, error) {
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
				bar.Draw(n, len(texts), fmt.Sprintf("%s/%s served %d/%d texts  %s", m.Name(), version, n, len(texts), time.Since(start).Round(time.Second)))
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
// order is the same for every version and from the seed alone.
const servedStream = 0x73657276 // "serv"

// noProgress shows nothing.
type noProgress struct{}

func (noProgress) Draw(int, int, string) {}
func (noProgress) Done()                 {}
