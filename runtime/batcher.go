package runtime

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ortserve/ortserve/tokenize"
)

// BatchConfig tunes a Batcher.
//
// The batcher is work-conserving: whenever a session is free and rows are queued, it
// dispatches a batch at once, formed from what queued while the sessions were busy
// (continuous batching). Which rows go together is decided by the pool's CostModel: the
// batch with the best predicted speed-up over running its rows alone, within MaxBatchSize,
// MaxBatchTokens and, under an SLO, the controller's batch budget. On a CPU where batching
// mixed lengths costs more per text, that settles near one row; where batching pays (a GPU,
// or rows of one length) it grows.
type BatchConfig struct {
	MaxBatchSize   int // rows per batch
	MaxBatchTokens int // padded tokens per batch (rows × longest row); 0: no budget
	// MaxQueueDelay, when > 0, makes a lone row wait up to this long for company while a
	// session is free (a fixed batching window; opt-in, since it delays every request at low
	// load). 0: dispatch as soon as a session is free.
	MaxQueueDelay time.Duration
	// Bounds on what may wait, beyond which Execute fails with ErrQueueFull.
	MaxQueueRequests int
	MaxQueueTokens   int
	// Packing runs batches packed (tokenize.PackRows: the texts end to end in rows, each row
	// as wide as the cost model finds cheapest) when every session of the pool can (Packer).
	// A packed run costs about what its tokens cost, so batching pays on mixed lengths too.
	// false: padded batches always.
	Packing bool
	// Order is the order in which queued rows are served: OrderShortest ("" too) or
	// OrderArrival.
	Order Order
	// SLO, when > 0, is the p95 latency (from a request's arrival, see WithArrival, to its
	// result) that the batcher's controller holds the version to by refusing requests whose
	// predicted latency would not fit and by capping batch run time. 0: no controller;
	// requests are still refused when their predicted wait would pass their own deadline.
	SLO time.Duration
}

// DefaultBatchConfig is what `server serve` starts from: work-conserving, cost-aware batches
// of up to 32 rows, shortest rows first, packed where the graph allows, no SLO.
func DefaultBatchConfig() BatchConfig {
	return BatchConfig{MaxBatchSize: 32, MaxBatchTokens: 16384, MaxQueueDelay: 0, MaxQueueRequests: 1024, MaxQueueTokens: 1 << 20, Order: OrderShortest, Packing: true}
}

// Validate says what is wrong with a config.
func (c BatchConfig) Validate() error {
	if c.MaxBatchSize < 1 || c.MaxBatchTokens < 0 || c.MaxQueueDelay < 0 || c.MaxQueueRequests < 1 || c.MaxQueueTokens < 1 || c.SLO < 0 {
		return fmt.Errorf("runtime: batching: max_batch_size, max_queue_requests and max_queue_tokens must be ≥ 1, max_batch_tokens, max_queue_delay and slo ≥ 0 (got %+v)", c)
	}
	if c.Order != "" && c.Order != OrderShortest && c.Order != OrderArrival {
		return fmt.Errorf("runtime: batching: order %q: want %s or %s", c.Order, OrderShortest, OrderArrival)
	}
	return nil
}

// ExecStats is how one request fared in an executor.
type ExecStats struct {
	Queue     time.Duration // from Execute to the dispatch of the request's last row
	Inference time.Duration // from that dispatch to the last result
	Batches   int           // batches the request's rows went into
	// Predicted is the latency the admission check predicted for the request, from its
	// arrival to its result.
	Predicted time.Duration
}

// request is one Execute call: its rows, and where their results go.
type request struct {
	ctx      context.Context
	encs     []tokenize.Encoding
	tokens   int
	arrived  time.Time // at the server (WithArrival), for the SLO
	enqueued time.Time
	whole    bool // WithWholeBatch
	// single is each row's batch-of-one run time as predicted at admission: the queue's
	// work is kept as their running sum, so that admitting a request costs no walk of the
	// queue.
	single []time.Duration

	// Written by the loop and batch goroutines, read by Execute after done is closed.
	mu         sync.Mutex
	out        []Tensor
	left       int // rows not yet answered
	err        error
	dispatched time.Time // when the last row was dispatched
	batches    int
	predicted  time.Duration
	done       chan struct{}
}

// finish records the results of rows (or err for all of them); it reports whether the
// request is now complete.
func (r *request) finish(rows []int, out []Tensor, err error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.left == 0 {
		return false
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
		return true
	}
	return false
}

// row is one input of a request, waiting in the queue.
type row struct {
	req *request
	i   int
}

func (w row) len() int { return w.req.encs[w.i].Len() }

// single is the row's predicted run time in a batch of its own.
func (w row) single() time.Duration { return w.req.single[w.i] }

// finished is what a batch goroutine tells the loop when its session is free again.
type finished struct {
	id     uint64
	took   time.Duration
	single time.Duration // Σ of the rows' predicted batch-of-one times
	ok     bool
}

// running is a batch on a session, as the loop predicts it.
type running struct {
	id  uint64
	end time.Time
}

// Batcher forms batches from the rows of concurrent requests for one model version and runs
// them on a Pool, one batch per free session. One goroutine, loop, owns the queue, the
// admission decisions and the controller's ticks; Execute only hands it requests.
type Batcher struct {
	cfg  BatchConfig
	pool *Pool
	cost *CostModel
	obs  Observer
	ctl  *controller // nil without an SLO

	in       chan *request
	finished chan finished
	stop     chan struct{} // closed by Close or Abort: admission ends, the loop winds down
	stopped  chan struct{} // closed when the loop has returned and no batch runs
	// closeMu orders admission against Close and Abort: no request enters b.in after the
	// loop has taken in what was there.
	closeMu sync.RWMutex
	closed  bool
	// abort is closed by Abort, after cutoff is set: the queue fails with ErrClosed, and
	// when cutoff ends, runs (which run under runCtx) are cancelled. abortErr is the loop's
	// verdict, read by Abort once stopped is closed.
	abort      chan struct{}
	abortOnce  sync.Once
	cutoff     context.Context
	abortErr   error
	runCtx     context.Context
	cancelRuns context.CancelFunc

	queuedReqs   atomic.Int64
	queuedTokens atomic.Int64
	// perRow is the measured seconds of session time per queued row (float64 bits), for
	// the Retry-After of a full queue, which Execute answers without asking the loop.
	perRow atomic.Uint64
	// discountBits publishes the loop's discount (float64 bits) for State.
	discountBits atomic.Uint64

	// Owned by loop.
	queue []row // in arrival order
	// queued is Σ single() over the queue, its work in batch-of-one time, in all and by
	// row length.
	queued  queueWork
	waiting map[*request]int
	free    int
	pack    bool // batches are packed: cfg.Packing and a pool that packs
	runs    []running
	nextID  uint64
	// discount is measured run time over the sum of the rows' predicted batch-of-one
	// times, faded: below 1 where batching amortizes, above where padding costs, and
	// whatever the device's load adds. Queued rows are predicted at their batch-of-one
	// time × discount.
	discount float64
}

// NewBatcher starts a batcher over pool; obs may be nil. Close stops it.
func NewBatcher(cfg BatchConfig, pool *Pool, obs Observer) *Batcher {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if obs == nil {
		obs = NopObserver{}
	}
	cfg.Order = cmp.Or(cfg.Order, OrderShortest)
	b := &Batcher{
		cfg: cfg, pool: pool, cost: pool.Cost(), obs: obs,
		in:       make(chan *request, cfg.MaxQueueRequests),
		finished: make(chan finished, pool.Size()),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
		abort:    make(chan struct{}),
		waiting:  map[*request]int{},
		free:     pool.Size(),
		pack:     cfg.Packing && pool.Packs(),
		discount: 1,
	}
	b.discountBits.Store(math.Float64bits(1))
	// Batches run under a context of their own, not a request's (a batch serves several),
	// that only an Abort past its deadline cancels.
	b.runCtx, b.cancelRuns = context.WithCancel(context.Background())
	if cfg.SLO > 0 {
		b.ctl = newController(cfg.SLO, time.Now())
	}
	go b.loop()
	return b
}

// Execute queues encs and waits for their results: one tensor per encoding, in order. It
// fails with an *OverloadError when the queue is at its bound or the latency predicted for
// the request would pass the SLO or ctx's deadline, and returns ctx's error as soon as ctx
// ends (rows not yet dispatched are then dropped).
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
		return nil, ExecStats{}, b.queueFull()
	}
	if n := b.queuedTokens.Add(int64(tokens)); n > int64(b.cfg.MaxQueueTokens) && n != int64(tokens) {
		// A single request larger than the token bound still gets in when the queue is empty.
		b.queuedTokens.Add(-int64(tokens))
		b.queuedReqs.Add(-1)
		return nil, ExecStats{}, b.queueFull()
	}
	now := time.Now()
	r := &request{ctx: ctx, encs: encs, tokens: tokens, arrived: arrival(ctx, now), enqueued: now, whole: wholeBatch(ctx), out: make([]Tensor, len(encs)), left: len(encs), done: make(chan struct{})}
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
	if r.dispatched.IsZero() { // refused at admission
		return nil, ExecStats{Predicted: r.predicted}, r.err
	}
	st := ExecStats{Queue: r.dispatched.Sub(r.enqueued), Inference: time.Since(r.dispatched), Batches: r.batches, Predicted: r.predicted}
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

// loop owns the queue: it admits requests, forms batches when a session is free,
// dispatches them, and runs the SLO controller.
func (b *Batcher) loop() {
	defer close(b.stopped)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var tick <-chan time.Time
	if b.ctl != nil {
		t := time.NewTicker(controlPeriod)
		defer t.Stop()
		tick = t.C
	}
	for {
		b.dropExpired()
		if b.free > 0 && len(b.queue) > 0 {
			wait := b.cfg.MaxQueueDelay - time.Since(b.queue[0].req.enqueued)
			if wait <= 0 || b.full() {
				b.next()
				b.obs.Queue(len(b.waiting), b.pool.Size()-b.free)
				continue
			}
			timer.Reset(wait)
		}
		select {
		case r := <-b.in:
			b.admit(r)
			b.obs.Queue(len(b.waiting), b.pool.Size()-b.free)
		case f := <-b.finished:
			b.done(f)
			b.obs.Queue(len(b.waiting), b.pool.Size()-b.free)
		case <-timer.C:
		case now := <-tick:
			if decided, _ := b.ctl.tick(now); decided {
				st := b.State()
				b.obs.Control(st, st.SLO.Decision != "hold")
			}
		case <-b.stop:
			b.wind()
			return
		}
		timer.Stop()
	}
}

// wind ends the loop. It takes in what admission let through, then serves the queue (after
// Close) or fails it with ErrClosed (after Abort, which may come while a Close serves), and
// waits for the batches running; when an Abort's cutoff ends, their runs are cancelled.
func (b *Batcher) wind() {
	defer b.cancelRuns()
	for {
		select {
		case r := <-b.in:
			b.enqueue(r)
			continue
		default:
		}
		break
	}
	abort := b.abort
	var cut <-chan struct{}
	for {
		select {
		case <-abort:
			b.failQueued(ErrClosed)
			abort, cut = nil, b.cutoff.Done()
		default:
		}
		b.dropExpired()
		if len(b.queue) > 0 && b.free > 0 {
			b.next()
			b.obs.Queue(len(b.waiting), b.pool.Size()-b.free)
			continue
		}
		if len(b.queue) == 0 && b.free == b.pool.Size() {
			return
		}
		select {
		case f := <-b.finished:
			b.done(f)
			b.obs.Queue(len(b.waiting), b.pool.Size()-b.free)
		case <-abort: // handled at the top
		case <-cut:
			b.abortErr = b.cutoff.Err()
			b.cancelRuns()
			cut = nil
		}
	}
}

// failQueued fails every request that still has rows in the queue with err, and empties
// the queue. A request with rows already running fails too: its answer would be partial.
func (b *Batcher) failQueued(err error) {
	for r := range b.waiting {
		delete(b.waiting, r)
		b.release(r)
		r.finish(nil, nil, err)
	}
	b.queue = nil
	b.queued.reset()
	b.obs.Queue(0, b.pool.Size()-b.free)
}

// dropExpired drops the rows of requests whose context ended: nobody waits for them.
func (b *Batcher) dropExpired() {
	if len(b.queue) == 0 {
		return
	}
	b.queue = slices.DeleteFunc(b.queue, func(w row) bool {
		if w.req.ctx.Err() == nil {
			return false
		}
		b.queued.add(w.len(), -w.single())
		if _, ok := b.waiting[w.req]; ok {
			delete(b.waiting, w.req)
			b.release(w.req)
			b.obs.Expired()
		}
		return true
	})
}

// enqueue puts an admitted request's rows in the queue.
func (b *Batcher) enqueue(r *request) {
	b.price(r)
	for i := range r.encs {
		w := row{r, i}
		b.queue = append(b.queue, w)
		b.queued.add(w.len(), w.single())
	}
	b.waiting[r] = len(r.encs)
}

// done takes in a finished batch: its session is free, and its run time teaches the
// discount and the per-row service time.
func (b *Batcher) done(f finished) {
	b.free++
	b.runs = slices.DeleteFunc(b.runs, func(r running) bool { return r.id == f.id })
	if !f.ok || f.single <= 0 {
		return
	}
	const alpha = 0.05
	b.discount = (1-alpha)*b.discount + alpha*float64(f.took)/float64(f.single)
	b.discountBits.Store(math.Float64bits(b.discount))
}

// full says whether the queue already holds a full batch.
func (b *Batcher) full() bool {
	if len(b.queue) >= b.cfg.MaxBatchSize {
		return true
	}
	if b.pack {
		tokens := 0
		for _, w := range b.queue {
			tokens += w.len()
		}
		return tokens >= b.packLimit()
	}
	if b.cfg.MaxBatchTokens == 0 {
		return false
	}
	longest := 0
	for _, w := range b.queue {
		longest = max(longest, w.len())
	}
	return (len(b.queue)+1)*longest > b.cfg.MaxBatchTokens
}

// next forms a batch and dispatches it on a free session; a request leaves the queue
// bounds when its last row is dispatched.
func (b *Batcher) next() {
	batch := b.form()
	for _, w := range batch {
		b.queued.add(w.len(), -w.single())
		if b.waiting[w.req]--; b.waiting[w.req] == 0 {
			delete(b.waiting, w.req)
			b.release(w.req)
		}
	}
	b.free--
	b.dispatch(batch)
}

// dispatch runs a batch on the pool and hands each row its result.
func (b *Batcher) dispatch(batch []row) {
	encs := make([]tokenize.Encoding, len(batch))
	realTokens := 0
	now := time.Now()
	var single time.Duration
	for i, w := range batch {
		encs[i] = w.req.encs[w.i]
		realTokens += encs[i].Len()
		single += b.cost.Predict(1, encs[i].Len())
		if i > 0 && batch[i-1].req == w.req {
			continue // rows of one request are adjacent: count the batch once
		}
		w.req.mu.Lock()
		w.req.dispatched = now
		w.req.batches++
		w.req.mu.Unlock()
	}
	var padded tokenize.Batch
	if b.pack {
		lens := make([]int, len(encs))
		for i, e := range encs {
			lens[i] = e.Len()
		}
		layout, _, _ := packRows(lens, b.cost.Predict)
		padded = tokenize.PackRows(encs, layout)
	} else {
		padded = tokenize.Pad(encs)
	}
	predicted := b.cost.Predict(padded.Rows, padded.Cols)
	b.nextID++
	b.runs = append(b.runs, running{id: b.nextID, end: now.Add(predicted)})
	b.obs.Batch(len(batch), padded.Rows*padded.Cols, realTokens)
	go func(id uint64) {
		f := finished{id: id, single: single}
		defer func() { b.finished <- f }()
		// The batch serves several requests: no one request's context may cancel it, only
		// an Abort past its cutoff.
		out, err := b.pool.Run(b.runCtx, padded)
		if err != nil && b.runCtx.Err() != nil {
			err = fmt.Errorf("%w: the batch was cut short at shutdown", ErrClosed)
		}
		f.took, f.ok = time.Since(now), err == nil
		if f.ok {
			b.perRow.Store(math.Float64bits(f.took.Seconds() / float64(len(batch))))
		}
		var rows []Tensor
		switch {
		case err == nil && padded.Packed:
			rows = out.Segments(padded.Starts, padded.Lengths)
		case err == nil:
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
			r := batch[i].req
			if r.finish(idx, res, err) && err == nil && b.ctl != nil {
				b.ctl.record(time.Since(r.arrived))
			}
			i = j
		}
	}(b.nextID)
}

// Close serves every admitted request, then stops the batcher; Execute fails with ErrClosed
// from its start. It does not close the pool. An Abort cuts a Close short.
func (b *Batcher) Close() error {
	b.shut()
	<-b.stopped
	return nil
}

// Abort stops the batcher within ctx, for a shutdown whose grace is over: admission ends,
// every request still queued fails at once with ErrClosed, and the batches already running
// may finish until ctx ends. Then their runs are cancelled and their requests fail with
// ErrClosed. Abort returns once no batch runs, every session back in the pool, so that the
// pool may be closed: soon after ctx ends, since a Runner honours cancellation. The error is
// ctx's when runs had to be cancelled. Abort may follow or interrupt Close; only the first
// Abort's ctx counts. It does not close the pool.
func (b *Batcher) Abort(ctx context.Context) error {
	b.abortOnce.Do(func() {
		b.cutoff = ctx
		close(b.abort)
	})
	b.shut()
	<-b.stopped
	return b.abortErr
}

// shut ends admission and tells the loop to wind down, once.
func (b *Batcher) shut() {
	b.closeMu.Lock()
	defer b.closeMu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.stop)
	}
}
