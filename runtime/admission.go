package runtime

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Admission: whether a request may wait, from the latency predicted for it (docs/batching.md).

// ErrQueueFull is returned at once when a version's queue is at its bound (in requests or
// in tokens): the caller should answer 429 and the client retry later. It comes wrapped in
// an *OverloadError that says when.
var ErrQueueFull = errors.New("runtime: queue full")

// ErrOverloaded is returned when a request is refused because the latency predicted for it
// would pass the SLO or its own deadline. It comes wrapped in an *OverloadError.
var ErrOverloaded = errors.New("runtime: overloaded")

// OverloadError is a refusal with the prediction behind it.
type OverloadError struct {
	Err        error         // ErrQueueFull or ErrOverloaded
	Reason     string        // "queue_full", "slo" or "deadline"
	Predicted  time.Duration // latency predicted for the request, from its arrival
	Budget     time.Duration // what it had to fit in (0 for queue_full)
	RetryAfter time.Duration // when the queue is predicted to have room
}

func (e *OverloadError) Error() string {
	switch e.Reason {
	case "queue_full":
		return fmt.Sprintf("%v (retry in %v)", e.Err, e.RetryAfter.Round(time.Millisecond))
	}
	return fmt.Sprintf("%v: predicted %v against a budget of %v (%s)", e.Err, e.Predicted.Round(time.Millisecond), e.Budget.Round(time.Millisecond), e.Reason)
}

func (e *OverloadError) Unwrap() error { return e.Err }

// queueFull is the refusal of a request past the queue's bounds, with the time the queue
// is predicted to take to drain by half.
func (b *Batcher) queueFull() error {
	b.obs.Refused("queue_full")
	per := math.Float64frombits(b.gauges.perRow.Load())
	wait := time.Duration(per * float64(b.gauges.requests.Load()) / 2 / float64(b.pool.Size()) * float64(time.Second))
	return &OverloadError{Err: ErrQueueFull, Reason: "queue_full", RetryAfter: wait}
}

// admit decides whether r may wait: when the latency predicted for it, from its arrival,
// fits the SLO controller's budget and its own deadline. A request is never refused when
// nothing is ahead of it.
func (l *loop) admit(r *request) {
	b := l.b
	now := time.Now()
	longest := 0
	for _, e := range r.encs {
		longest = max(longest, e.Len())
	}
	ahead := l.predictAhead(now, longest)
	// The request's own rows run on up to as many sessions as it has rows.
	own := l.discounted(l.price(r)) / time.Duration(min(len(r.encs), b.pool.Size()))
	predicted := now.Sub(r.arrived) + ahead + own
	r.reply.mu.Lock()
	r.reply.predicted = predicted
	r.reply.mu.Unlock()
	refuse := func(err error, reason string, budget time.Duration) {
		b.release(r)
		b.obs.Refused(reason)
		if b.ctl != nil {
			b.ctl.refusedOne()
		}
		// Retry when the queue is predicted to have drained by the excess, and not sooner
		// than half the wait that was ahead of the request.
		retry := max(predicted-budget, ahead/2)
		r.reply.refuse(&OverloadError{Err: err, Reason: reason, Predicted: predicted, Budget: budget, RetryAfter: retry})
	}
	if ahead > 0 {
		if dl, ok := r.ctx.Deadline(); ok && now.Add(ahead+own).After(dl) {
			refuse(ErrOverloaded, "deadline", dl.Sub(r.arrived))
			return
		}
		if b.ctl != nil {
			if budget, _ := b.ctl.budgets(); predicted > budget {
				refuse(ErrOverloaded, "slo", budget)
				return
			}
		}
	}
	if b.ctl != nil {
		b.ctl.admitted()
	}
	l.enqueue(r)
}

// price sets r's rows' batch-of-one costs, once, and returns their sum.
func (l *loop) price(r *request) time.Duration {
	var sum time.Duration
	if r.wait.single == nil {
		r.wait.single = make([]time.Duration, len(r.encs))
		for i, e := range r.encs {
			r.wait.single[i] = l.b.cost.Predict(1, e.Len())
		}
	}
	for _, d := range r.wait.single {
		sum += d
	}
	return sum
}

// discounted is batch-of-one time d as the session is predicted to spend it: scaled by the
// measured discount.
func (l *loop) discounted(d time.Duration) time.Duration {
	return time.Duration(float64(d) * l.discount)
}

// predictAhead is how long a request whose longest row has n tokens, arriving now, is
// predicted to wait for a session: the rest of the running batches and the queued rows
// served before it, spread over the sessions. Served shortest first, those are the rows of
// at most n tokens (rows that come due before it is served, and rows shorter than it that
// arrive after it, are not foreseen); in arrival order, the whole queue.
func (l *loop) predictAhead(now time.Time, n int) time.Duration {
	if l.free > 0 && l.q.len() == 0 {
		return 0 // a session is free: the request runs at once
	}
	queued := l.q.work.total
	if l.b.cfg.Order != OrderArrival {
		queued = l.q.work.upTo(n)
	}
	work := l.discounted(queued)
	for _, run := range l.runs {
		work += max(0, run.end.Sub(now))
	}
	return work / time.Duration(l.b.pool.Size())
}
