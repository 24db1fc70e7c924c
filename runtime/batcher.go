package runtime

import (
	"cmp"
	"context"
	"fmt"
	"math"
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
// or rows of one length) it grows. While serving, the batcher measures its batches against
// batch 1 and stops forming the kinds that lose, whatever the model predicts (regret.go).
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

// Batcher forms batches from the rows of concurrent requests for one model version and runs
// them on a Pool, one batch per free session. One goroutine (loop) owns the queue, the
// admission decisions and the controller's ticks; Execute only hands it requests, and reads
// what it needs without the loop from gauges.
type Batcher struct {
	cfg  BatchConfig
	pool *Pool
	cost *CostModel
	obs  Observer
	ctl  *controller // nil without an SLO
	pack bool        // batches are packed: cfg.Packing and a pool that packs

	in     chan *request
	ended  ended
	gauges gauges
	check  checkView // the loop's check against batch 1, as it last published it

	stop    chan struct{} // closed by Close or Abort: admission ends, the loop winds down
	stopped chan struct{} // closed when the loop has returned and no batch runs
	// closeMu orders admission against Close and Abort: no request enters in after the
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
}

// gauges are what Execute and State read without asking the loop: the queue's bounds, which
// Execute counts and the loop releases, and what the loop and the batches have measured.
type gauges struct {
	requests atomic.Int64
	tokens   atomic.Int64
	// perRow is the measured seconds of session time per row (float64 bits), for the
	// Retry-After of a full queue.
	perRow atomic.Uint64
	// discount publishes the loop's discount (float64 bits) for State.
	discount atomic.Uint64
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
		pack:    cfg.Packing && pool.Packs(),
		in:      make(chan *request, cfg.MaxQueueRequests),
		ended:   newEnded(),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
		abort:   make(chan struct{}),
	}
	b.gauges.discount.Store(math.Float64bits(1))
	// Batches run under a context of their own, not a request's (a batch serves several),
	// that only an Abort past its deadline cancels.
	b.runCtx, b.cancelRuns = context.WithCancel(context.Background())
	if cfg.SLO > 0 {
		b.ctl = newController(cfg.SLO, time.Now())
	}
	go newLoop(b).run()
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
	if n := b.gauges.requests.Add(1); n > int64(b.cfg.MaxQueueRequests) {
		b.gauges.requests.Add(-1)
		return nil, ExecStats{}, b.queueFull()
	}
	if n := b.gauges.tokens.Add(int64(tokens)); n > int64(b.cfg.MaxQueueTokens) && n != int64(tokens) {
		// A single request larger than the token bound still gets in when the queue is empty.
		b.gauges.tokens.Add(-int64(tokens))
		b.gauges.requests.Add(-1)
		return nil, ExecStats{}, b.queueFull()
	}
	now := time.Now()
	r := &request{ctx: ctx, encs: encs, tokens: tokens, arrived: arrival(ctx, now), enqueued: now, reply: newReply(len(encs))}
	b.closeMu.RLock()
	if b.closed {
		b.closeMu.RUnlock()
		b.release(r)
		return nil, ExecStats{}, ErrClosed
	}
	b.in <- r // never blocks: admission bounds the requests in the channel
	b.closeMu.RUnlock()
	select {
	case <-r.reply.done:
	case <-ctx.Done():
		b.ended.post(r)
		return nil, ExecStats{}, ctx.Err()
	}
	return r.reply.result(r.enqueued)
}

// release takes a request's share out of the queue bounds.
func (b *Batcher) release(r *request) {
	b.gauges.requests.Add(-1)
	b.gauges.tokens.Add(-int64(r.tokens))
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
