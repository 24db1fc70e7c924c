package runtime

import (
	"context"
	"iter"
)

// Observer receives what a Batcher does, for metrics and logs. Implementations must be cheap
// and safe for concurrent use.
type Observer interface {
	// Batch is called as a batch is dispatched.
	Batch(rows, paddedTokens, realTokens int)
	// Queue reports the requests waiting and the batches running after each change.
	Queue(requests, running int)
	// Expired is called for a request dropped before dispatch because its context ended.
	Expired()
	// Refused is called for a request refused at admission; reason is OverloadError's.
	Refused(reason string)
	// Control is called after each decision of the SLO controller, with the state that
	// /info shows; decided is false when the controller held.
	Control(s SchedulerState, changed bool)
	// Trace is called as a batch is dispatched, before Batch, for tracing: it may start a
	// span for the batch, linked to the requests it serves. The end it returns, when not
	// nil, is called with the run's error once the batch has run, on the batch's goroutine.
	// An observer that does not trace returns nil, and then tracing costs the batcher
	// nothing: d is passed by value, and nothing is gathered for it.
	Trace(d Dispatch) (end func(err error))
}

// Dispatch is a batch as it is dispatched, for Observer.Trace. The runtime knows nothing of
// tracing: the requests' contexts carry whatever spans the layers above put in them.
type Dispatch struct {
	Texts        int  // the texts (queue rows) in the batch
	Rows         int  // the rows of its input tensor: fewer than Texts when packed
	PaddedTokens int  // Rows × the tensor's width
	RealTokens   int  // the texts' own tokens
	Packed       bool // texts laid end to end in rows (tokenize.PackRows)
	rows         []row
}

// Requests yields the context of each request the batch serves, once each, in the batch's
// order. The contexts are the requests' own, as given to Execute.
func (d Dispatch) Requests() iter.Seq[context.Context] {
	return func(yield func(context.Context) bool) {
		for i, w := range d.rows {
			if (i == 0 || d.rows[i-1].req != w.req) && !yield(w.req.ctx) {
				return
			}
		}
	}
}

// RequestCount is the number of requests the batch serves.
func (d Dispatch) RequestCount() int {
	n := 0
	for i, w := range d.rows {
		if i == 0 || d.rows[i-1].req != w.req {
			n++
		}
	}
	return n
}

// NopObserver observes nothing; embed it to implement only some of Observer.
type NopObserver struct{}

// Batch does nothing.
func (NopObserver) Batch(int, int, int) {}

// Queue does nothing.
func (NopObserver) Queue(int, int) {}

// Expired does nothing.
func (NopObserver) Expired() {}

// Refused does nothing.
func (NopObserver) Refused(string) {}

// Control does nothing.
func (NopObserver) Control(SchedulerState, bool) {}

// Trace traces nothing.
func (NopObserver) Trace(Dispatch) func(error) { return nil }
