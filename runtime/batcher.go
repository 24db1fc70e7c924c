package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ortserve/ortserve/tokenize"
)

// ErrQueueFull is returned at once when a version's queue is at its bound (in requests or
// in tokens): the caller should answer 429 and the client retry later.
var ErrQueueFull = errors.New("runtime: queue full")

// BatchConfig tunes a Batcher. A batch is dispatched to a free session when it has
// MaxBatchSize rows, when one more row would pass MaxBatchTokens padded tokens, or when its
// oldest row has waited MaxQueueDelay.
type BatchConfig struct {
	MaxBatchSize   int           // rows per batch
	MaxBatchTokens int           // padded tokens per batch (rows × longest row); 0: no budget
	MaxQueueDelay  time.Duration // longest a row waits for company while a session is free
	// Bounds on what may wait, beyond which Execute fails with ErrQueueFull.
	MaxQueueRequests int
	MaxQueueTokens   int
}

// DefaultBatchConfig is the starting point the seeds suggest: a 5 ms window.
func DefaultBatchConfig() BatchConfig {
	return BatchConfig{MaxBatchSize: 32, MaxBatchTokens: 16384, MaxQueueDelay: 5 * time.Millisecond, MaxQueueRequests: 1024, MaxQueueTokens: 1 << 20}
}

// Validate says what is wrong with a config.
func (c BatchConfig) Validate() error {
	if c.MaxBatchSize < 1 || c.MaxBatchTokens < 0 || c.MaxQueueDelay < 0 || c.MaxQueueRequests < 1 || c.MaxQueueTokens < 1 {
		return fmt.Errorf("runtime: batching: max_batch_size, max_queue_requests and max_queue_tokens must be ≥ 1, max_batch_tokens and max_queue_delay ≥ 0 (got %+v)", c)
	}
	return nil
}

// Observer receives what a Batcher does, for metrics. Implementations must be cheap and
// safe for concurrent use.
type Observer interface {
	// Batch is called as a batch is dispatched.
	Batch(rows, paddedTokens, realTokens int)
	// Queue reports the requests waiting and the batches running after each change.
	Queue(requests, running int)
	// Expired is called for a request dropped before dispatch because its context ended.
	Expired()
}

// ExecStats is how one request fared in an executor.
type ExecStats struct {
	Queue     time.Duration // from Execute to the dispatch of the request's last row
	Inference time.Duration // from that dispatch to the last result
	Batches   int           // batches the request's rows went into
}

// request is one Execute call: its rows, and where their results go.
type request struct {
	ctx      context.Context
	encs     []tokenize.Encoding
	tokens   int
	enqueued time.Time

	// Written by batch goroutines, read by Execute after done is closed.
	mu         sync.Mutex
	out        []Tensor
	left       int // rows not yet answered
	err        error
	dispatched time.Time // when the last row was dispatched
	batches    int
	done       chan struct{}
}

func (r *request) finish(rows []int, out []Tensor, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.left == 0 {
		return
	}
	if err != nil && r.err == nil {
		r.err = err
	}
	for i, row := range rows {
		if err == nil {
			r.out[row] = out[i]
		}
	}
	r.left -= len(rows)
	if r.left == 0 || r.err != nil {
		r.left = 0
		close(r.done)
	}
}

// row is one input of a request, waiting in the queue.
type row struct {
	req *request
	i   int
}

func (w row) len() int { return w.req.encs[w.i].Len() }

// Batcher forms batches from the rows of concurrent requests for one model version and runs
// them on a Pool, one batch per free session. One goroutine owns the queue.
type Batcher struct {
	cfg  BatchConfig
	pool *Pool
	obs  Observer

	in       chan *request
	finished chan struct{} // a batch finished; its session is free
	stop     chan struct{}
	stopped  chan struct{}
	// closeMu orders admission against Close: no request enters b.in after the drain.
	closeMu sync.RWMutex
	closed  bool

	queuedReqs   atomic.Int64
	queuedTokens atomic.Int64
}

// NewBatcher starts a batcher over pool; obs may be nil. Close stops it.
func NewBatcher(cfg BatchConfig, pool *Pool, obs Observer) *Batcher {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if obs == nil {
		obs = nopObserver{}
	}
	b := &Batcher{
		cfg: cfg, pool: pool, obs: obs,
		in:       make(chan *request, cfg.MaxQueueRequests),
		finished: make(chan struct{}, pool.Size()),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	go b.loop()
	return b
}

type nopObserver struct{}

func (nopObserver) Batch(int, int, int) {}
func (nopObserver) Queue(int, int)      {}
func (nopObserver) Expired()            {}

// Execute queues encs and waits for their results: one tensor per encoding, in order. It
// fails at once with ErrQueueFull when the queue is at its bound, and returns ctx's error as
// soon as ctx ends (rows not yet dispatched are then dropped).
func (b *Batcher) Execute(ctx context.Context, encs []tokenize.Encoding) ([]Tensor, ExecStats, error) {
	if len(encs) == 0 {
		return nil, ExecStats{}, nil
	}
	tokens := 0
	for _, e := range encs {
		tokens += e.Len()
	}
	if n := b.queuedReqs.Add(1); n > int64(b.cfg.MaxQueueRequests) {
		b.queuedReqs.Add(-1)
		return nil, ExecStats{}, ErrQueueFull
	}
	if n := b.queuedTokens.Add(int64(tokens)); n > int64(b.cfg.MaxQueueTokens) && n != int64(tokens) {
		// A single request larger than the token bound still gets in when the queue is empty.
		b.queuedTokens.Add(-int64(tokens))
		b.queuedReqs.Add(-1)
		return nil, ExecStats{}, ErrQueueFull
	}
	r := &request{ctx: ctx, encs: encs, tokens: tokens, enqueued: time.Now(), out: make([]Tensor, len(encs)), left: len(encs), done: make(chan struct{})}
	b.closeMu.RLock()
	if b.closed {
		b.closeMu.RUnlock()
		b.release(r)
		return nil, ExecStats{}, ErrClosed
	}
	b.in <- r // never blocks: admission bounds the requests in the channel
	b.closeMu.RUnlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, ExecStats{}, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := ExecStats{Queue: r.dispatched.Sub(r.enqueued), Inference: time.Since(r.dispatched), Batches: r.batches}
	if r.err != nil {
		return nil, st, r.err
	}
	return r.out, st, nil
}

// release takes a request's share out of the queue bounds.
func (b *Batcher) release(r *request) {
	b.queuedReqs.Add(-1)
	b.queuedTokens.Add(-int64(r.tokens))
}

// loop owns the queue: it takes in requests, forms batches when a session is free and
// dispatches them.
func (b *Batcher) loop() {
	defer close(b.stopped)
	var (
		queue   []row // in arrival order
		free    = b.pool.Size()
		timer   = time.NewTimer(time.Hour)
		waiting = map[*request]int{} // rows of each request still in the queue
	)
	timer.Stop()
	add := func(r *request) {
		for i := range r.encs {
			queue = append(queue, row{r, i})
		}
		waiting[r] = len(r.encs)
	}
	// next forms a batch and dispatches it on a free session; a request leaves the queue
	// bounds when its last row is dispatched.
	next := func() {
		batch := b.form(&queue)
		for _, w := range batch {
			if waiting[w.req]--; waiting[w.req] == 0 {
				delete(waiting, w.req)
				b.release(w.req)
			}
		}
		free--
		b.dispatch(batch)
	}
	for {
		// Drop rows of requests whose context ended: nobody waits for them.
		if n := len(queue); n > 0 {
			queue = slices.DeleteFunc(queue, func(w row) bool {
				if w.req.ctx.Err() == nil {
					return false
				}
				if _, ok := waiting[w.req]; ok {
					delete(waiting, w.req)
					b.release(w.req)
					b.obs.Expired()
				}
				return true
			})
		}
		if free > 0 && len(queue) > 0 {
			wait := b.cfg.MaxQueueDelay - time.Since(queue[0].req.enqueued)
			if wait <= 0 || b.full(queue) {
				next()
				b.obs.Queue(len(waiting), b.pool.Size()-free)
				continue
			}
			timer.Reset(wait)
		}
		select {
		case r := <-b.in:
			add(r)
			b.obs.Queue(len(waiting), b.pool.Size()-free)
		case <-b.finished:
			free++
			b.obs.Queue(len(waiting), b.pool.Size()-free)
		case <-timer.C:
		case <-b.stop:
			// Drain: everything admitted is served before the batcher stops.
			for {
				select {
				case r := <-b.in:
					add(r)
					continue
				default:
				}
				break
			}
			for len(queue) > 0 {
				for free == 0 {
					<-b.finished
					free++
				}
				next()
			}
			for free < b.pool.Size() {
				<-b.finished
				free++
			}
			return
		}
		timer.Stop()
	}
}

// full says whether the queue already holds a full batch.
func (b *Batcher) full(queue []row) bool {
	if len(queue) >= b.cfg.MaxBatchSize {
		return true
	}
	if b.cfg.MaxBatchTokens == 0 {
		return false
	}
	longest := 0
	for _, w := range queue {
		longest = max(longest, w.len())
	}
	return (len(queue)+1)*longest > b.cfg.MaxBatchTokens
}

// form takes the next batch out of the queue. The oldest row always goes; the others are
// the rows closest to it in length, so that short rows are not padded to long ones, up to
// MaxBatchSize rows and MaxBatchTokens padded tokens.
func (b *Batcher) form(queue *[]row) []row {
	q := *queue
	oldest := q[0]
	// Candidates by length; ties keep arrival order, so among equals the oldest go first.
	idx := make([]int, len(q))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, c int) int { return q[a].len() - q[c].len() })
	at := slices.Index(idx, 0)
	lo, hi := at, at+1 // the window idx[lo:hi] holds the batch
	longest := oldest.len()
	for hi-lo < b.cfg.MaxBatchSize {
		// Grow towards the neighbour whose length is closer to the oldest row's.
		var next int
		switch {
		case lo > 0 && hi < len(idx):
			if oldest.len()-q[idx[lo-1]].len() <= q[idx[hi]].len()-oldest.len() {
				next = lo - 1
			} else {
				next = hi
			}
		case lo > 0:
			next = lo - 1
		case hi < len(idx):
			next = hi
		default:
			next = -1
		}
		if next < 0 {
			break
		}
		l := max(longest, q[idx[next]].len())
		if b.cfg.MaxBatchTokens > 0 && (hi-lo+1)*l > b.cfg.MaxBatchTokens {
			break
		}
		longest = l
		if next == hi {
			hi++
		} else {
			lo--
		}
	}
	take := idx[lo:hi]
	slices.Sort(take) // back to arrival order
	batch := make([]row, len(take))
	for i, j := range take {
		batch[i] = q[j]
	}
	*queue = slices.DeleteFunc(q, func(w row) bool {
		return slices.ContainsFunc(batch, func(x row) bool { return x == w })
	})
	return batch
}

// dispatch runs a batch on the pool and hands each row its result.
func (b *Batcher) dispatch(batch []row) {
	encs := make([]tokenize.Encoding, len(batch))
	real := 0
	now := time.Now()
	for i, w := range batch {
		encs[i] = w.req.encs[w.i]
		real += encs[i].Len()
		if i > 0 && batch[i-1].req == w.req {
			continue // rows of one request are adjacent: count the batch once
		}
		w.req.mu.Lock()
		w.req.dispatched = now
		w.req.batches++
		w.req.mu.Unlock()
	}
	padded := tokenize.Pad(encs)
	b.obs.Batch(len(batch), padded.Rows*padded.Cols, real)
	go func() {
		defer func() { b.finished <- struct{}{} }()
		// The batch serves several requests: no one request's context may cancel it.
		out, err := b.pool.Run(context.Background(), padded)
		var rows []Tensor
		if err == nil {
			rows = out.Rows()
		}
		// Group rows by request so each request is locked once.
		for i := 0; i < len(batch); {
			j := i
			var idx []int
			var res []Tensor
			for ; j < len(batch) && batch[j].req == batch[i].req; j++ {
				idx = append(idx, batch[j].i)
				if err == nil {
					res = append(res, rows[j])
				}
			}
			batch[i].req.finish(idx, res, err)
			i = j
		}
	}()
}

// Close serves every admitted request, then stops the batcher. It does not close the pool.
func (b *Batcher) Close() error {
	b.closeMu.Lock()
	if b.closed {
		b.closeMu.Unlock()
		return nil
	}
	b.closed = true
	close(b.stop)
	b.closeMu.Unlock()
	<-b.stopped
	return nil
}
