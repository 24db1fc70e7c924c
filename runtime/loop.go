package runtime

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ortserve/ortserve/tokenize"
)

// loop is a batcher's goroutine and what it alone owns: the queue, the sessions' state as it
// predicts it, and the measured discount. It waits for something to happen (a request to
// admit, a batch finished, the end of a batching window, the controller's tick, a request
// ended, the end) and dispatches batches while sessions are free. What goes in a batch is
// plan's to decide, and whether a request may wait admission's.
type loop struct {
	b   *Batcher
	q   queue
	lim limits // the config's; the batch budget is the controller's at each batch
	// free is the number of sessions not running a batch of this batcher's.
	free int
	runs []running
	// nextID numbers the batches, for finished to say which one ended.
	nextID uint64
	// discount is measured run time over the sum of the rows' predicted batch-of-one
	// times, faded: below 1 where batching amortizes, above where padding costs, and
	// whatever the device's load adds. Queued rows are predicted at their batch-of-one
	// time × discount.
	discount float64
	// regret checks the batches against batch 1, and stops the planner forming a class of
	// batch that loses.
	regret   regret
	lens     []int // the lengths of a finished batch's rows, reused
	finished chan finished
	ended    []*request // taken from b.ended, reused
}

// finished is what a batch goroutine tells the loop when its session is free again.
type finished struct {
	id     uint64
	took   time.Duration
	single time.Duration // Σ of the rows' predicted batch-of-one times
	ok     bool
	// For the check against batch 1: the batch's class and its predicted time.
	class     class
	predicted time.Duration
}

// running is a batch on a session, as the loop predicts it.
type running struct {
	id   uint64
	end  time.Time
	rows []row // shared with the batch's goroutine, read-only
}

func newLoop(b *Batcher) *loop {
	return &loop{
		b: b, q: newQueue(b.cfg.Order), free: b.pool.Size(), discount: 1,
		lim:      limits{rows: b.cfg.MaxBatchSize, tokens: b.cfg.MaxBatchTokens, packTokens: b.cfg.PackLimit()},
		finished: make(chan finished, b.pool.Size()),
	}
}

// run is the loop. A session free and rows queued make a batch at once, unless a batching
// window (MaxQueueDelay) still waits for company for the oldest row and the queue holds less
// than a full batch.
func (l *loop) run() {
	defer close(l.b.stopped)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var tick <-chan time.Time
	if l.b.ctl != nil {
		t := time.NewTicker(controlPeriod)
		defer t.Stop()
		tick = t.C
	}
	for {
		l.dropEnded()
		if l.free > 0 && l.q.len() > 0 {
			wait := l.b.cfg.MaxQueueDelay - time.Since(l.q.oldest())
			if wait <= 0 || l.lim.full(l.q.len(), l.q.tokens, l.q.longest(), l.b.pack) {
				l.next()
				l.report()
				continue
			}
			timer.Reset(wait)
		}
		select {
		case r := <-l.b.in:
			l.admit(r)
			l.report()
		case f := <-l.finished:
			l.done(f)
			l.report()
		case <-l.b.ended.wake: // dropped at the top
		case <-timer.C:
		case now := <-tick:
			if decided, _ := l.b.ctl.tick(now); decided {
				st := l.b.State()
				l.b.obs.Control(st, st.SLO.Decision != "hold")
			}
		case <-l.b.stop:
			l.wind()
			return
		}
		timer.Stop()
	}
}

// wind ends the loop. It takes in what admission let through, then serves the queue (after
// Close) or fails it with ErrClosed (after Abort, which may come while a Close serves), and
// waits for the batches running; when an Abort's cutoff ends, their runs are cancelled.
func (l *loop) wind() {
	defer l.b.cancelRuns()
	for {
		select {
		case r := <-l.b.in:
			l.enqueue(r)
			continue
		default:
		}
		break
	}
	abort := l.b.abort
	var cut <-chan struct{}
	for {
		select {
		case <-abort:
			l.failQueued(ErrClosed)
			abort, cut = nil, l.b.cutoff.Done()
		default:
		}
		l.dropEnded()
		if l.q.len() > 0 && l.free > 0 {
			l.next()
			l.report()
			continue
		}
		if l.q.len() == 0 && l.free == l.b.pool.Size() {
			return
		}
		select {
		case f := <-l.finished:
			l.done(f)
			l.report()
		case <-abort: // handled at the top
		case <-l.b.ended.wake: // dropped at the top
		case <-cut:
			l.b.abortErr = l.b.cutoff.Err()
			l.b.cancelRuns()
			cut = nil
		}
	}
}

// report tells the observer the requests waiting and the batches running.
func (l *loop) report() { l.b.obs.Queue(l.q.requests, l.b.pool.Size()-l.free) }

// enqueue puts an admitted request's rows in the queue. A request whose context has already
// ended is dropped at once: Execute may have posted it to ended before the loop received it.
func (l *loop) enqueue(r *request) {
	l.price(r)
	l.q.push(r)
	if r.ctx.Err() != nil {
		l.ended = append(l.ended[:0], r)
		l.drop()
	}
}

// dropEnded drops the queued rows of the requests posted to ended.
func (l *loop) dropEnded() {
	l.ended = l.b.ended.take(l.ended[:0])
	if len(l.ended) > 0 {
		l.drop()
		l.report()
	}
}

// drop takes the requests of l.ended out of the queue; a request that still had rows
// queued leaves the queue bounds, and counts as expired if its context ended.
func (l *loop) drop() {
	for _, r := range l.ended {
		if r.wait.queued == 0 {
			continue
		}
		l.b.release(r)
		if r.ctx.Err() != nil {
			l.b.obs.Expired()
		}
	}
	l.q.drop(l.ended)
	clear(l.ended)
}

// failQueued fails every request that still has rows in the queue with err, and empties
// the queue. A request with rows already running fails too: its answer would be partial.
func (l *loop) failQueued(err error) {
	l.q.empty(func(r *request) {
		l.b.release(r)
		r.reply.finish(nil, nil, err)
	})
	l.report()
}

// next plans a batch and dispatches it on a free session; a request leaves the queue
// bounds when its last row is dispatched.
func (l *loop) next() {
	lim := l.lim
	if l.b.ctl != nil {
		_, lim.runBudget = l.b.ctl.budgets()
	}
	lim.stopped = l.regret.stopped()
	if l.b.pool.Calibrating() {
		// The cost curve is being measured beside the batches served (CalibrateServing):
		// one row a batch until it is drawn.
		lim.rows = 1
	}
	p := planBatch(l.q.view(time.Now()), l.free, lim, l.b.pack, l.b.cost.Predict, l.b.cost.Observations() > 0)
	l.q.take(p.rows)
	for i, w := range p.rows {
		if (i == 0 || p.rows[i-1].req != w.req) && w.req.wait.queued == 0 {
			l.b.release(w.req)
		}
	}
	l.free--
	l.dispatch(p)
}

// dispatch runs a planned batch on the pool; a goroutine of its own hands each row its result
// and tells the loop when the session is free.
func (l *loop) dispatch(p plan) {
	batch := p.rows
	encs := make([]tokenize.Encoding, len(batch))
	realTokens, longest := 0, 0
	now := time.Now()
	var single time.Duration
	for i, w := range batch {
		encs[i] = w.req.encs[w.i]
		realTokens += encs[i].Len()
		longest = max(longest, encs[i].Len())
		single += l.b.cost.Predict(1, encs[i].Len())
		if i == 0 || batch[i-1].req != w.req { // rows of one request are adjacent: count the batch once
			w.req.reply.dispatch(now)
		}
	}
	in := layOut(encs, p.layout)
	predicted := l.b.cost.Predict(in.Rows, in.Cols)
	l.nextID++
	l.runs = append(l.runs, running{id: l.nextID, end: now.Add(predicted), rows: batch})
	end := l.b.obs.Trace(Dispatch{Texts: len(batch), Rows: in.Rows, PaddedTokens: in.Rows * in.Cols, RealTokens: realTokens, Packed: p.layout != nil, rows: batch})
	l.b.obs.Batch(len(batch), in.Rows*in.Cols, realTokens)
	c := classOf(len(batch), realTokens, longest, l.b.pack)
	l.regret.dispatched(c, len(batch))
	go l.b.runBatch(finished{id: l.nextID, single: single, class: c, predicted: predicted}, batch, in, now, l.finished, end)
}

// done takes in a finished batch: its session is free, and its run time teaches the
// discount and the check against batch 1. A batch that failed has failed its requests: their
// rows still queued would run for nobody, and are dropped.
func (l *loop) done(f finished) {
	l.free++
	k := slices.IndexFunc(l.runs, func(r running) bool { return r.id == f.id })
	run := l.runs[k]
	l.runs = slices.Delete(l.runs, k, k+1)
	if !f.ok {
		l.ended = l.ended[:0]
		for i, w := range run.rows {
			if i == 0 || run.rows[i-1].req != w.req {
				l.ended = append(l.ended, w.req)
			}
		}
		l.drop()
		return
	}
	l.lens = l.lens[:0]
	for _, w := range run.rows {
		l.lens = append(l.lens, w.len())
	}
	l.regret.observe(f.class, l.lens, f.took, f.predicted, l.b.cost.Predict)
	l.b.check.publish(&l.regret)
	if f.single <= 0 {
		return
	}
	const alpha = 0.05
	l.discount = (1-alpha)*l.discount + alpha*float64(f.took)/float64(f.single)
	l.b.gauges.discount.Store(math.Float64bits(l.discount))
}

// runBatch runs a batch's tensors in, dispatched at start, hands its rows their results and
// reports f on done. It runs on a goroutine of its own, and touches none of the loop's state.
// end, when not nil, is the observer's, told how the run went before the rows are answered.
func (b *Batcher) runBatch(f finished, batch []row, in tokenize.Batch, start time.Time, done chan<- finished, end func(error)) {
	defer func() { done <- f }()
	// The batch serves several requests: no one request's context may cancel it, only an
	// Abort past its cutoff.
	out, err := b.pool.Run(b.runCtx, in)
	if err != nil && b.runCtx.Err() != nil {
		err = fmt.Errorf("%w: the batch was cut short at shutdown", ErrClosed)
	}
	if end != nil {
		end(err)
	}
	f.took, f.ok = time.Since(start), err == nil
	var res []Tensor
	if f.ok {
		b.gauges.perRow.Store(math.Float64bits(f.took.Seconds() / float64(len(batch))))
		res = split(out, in)
	}
	deliver(batch, res, err, b.ctl)
}
