package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/ortserve/ortserve/tokenize"
)

// request is one Execute call. Its fields have three owners: what Execute sets before the
// loop receives it (read-only after), wait (the loop's alone), and reply (under its mutex,
// written by the loop and the batch goroutines, read by Execute).
type request struct {
	ctx      context.Context
	encs     []tokenize.Encoding
	tokens   int
	arrived  time.Time // at the server (WithArrival), for the SLO
	enqueued time.Time

	wait  waiting
	reply reply
}

// waiting is what the loop keeps of a request while its rows are queued.
type waiting struct {
	// single is each row's batch-of-one run time as predicted at admission: the queue's
	// work is kept as their running sum, so that admitting a request costs no walk of the
	// queue.
	single []time.Duration
	seq    uint64 // the seq of row 0; row i's is seq+i
	queued int    // rows still in the queue
}

// reply is a request's answer, filled in as its rows finish.
type reply struct {
	mu         sync.Mutex
	out        []Tensor
	left       int // rows not yet answered
	err        error
	dispatched time.Time // when the last row was dispatched
	batches    int
	predicted  time.Duration
	done       chan struct{} // closed once every row is answered, or one failed
}

func newReply(rows int) reply {
	return reply{out: make([]Tensor, rows), left: rows, done: make(chan struct{})}
}

// dispatch notes that some of the request's rows went into a batch at now.
func (p *reply) dispatch(now time.Time) {
	p.mu.Lock()
	p.dispatched = now
	p.batches++
	p.mu.Unlock()
}

// finish records the results of rows (or err for all of them); it reports whether the
// request is now complete.
func (p *reply) finish(rows []row, out []Tensor, err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.left == 0 {
		return false
	}
	if err != nil && p.err == nil {
		p.err = err
	}
	if err == nil {
		for k, w := range rows {
			p.out[w.i] = out[k]
		}
	}
	p.left -= len(rows)
	if p.left == 0 || p.err != nil {
		p.left = 0
		close(p.done)
		return true
	}
	return false
}

// refuse answers the request with an admission's refusal.
func (p *reply) refuse(err error) {
	p.mu.Lock()
	p.err = err
	p.left = 0
	close(p.done)
	p.mu.Unlock()
}

// result is the answer Execute returns once done is closed, for a request enqueued then.
func (p *reply) result(enqueued time.Time) ([]Tensor, ExecStats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dispatched.IsZero() { // refused at admission
		return nil, ExecStats{Predicted: p.predicted}, p.err
	}
	st := ExecStats{Queue: p.dispatched.Sub(enqueued), Inference: time.Since(p.dispatched), Batches: p.batches, Predicted: p.predicted}
	if p.err != nil {
		return nil, st, p.err
	}
	return p.out, st, nil
}

// deliver hands each request of a batch its rows' results, res (one per row), or err. The
// rows of one request are adjacent in a batch, so each request is locked once. A request
// completed without error is an SLO sample.
func deliver(batch []row, res []Tensor, err error, ctl *controller) {
	for i := 0; i < len(batch); {
		j := i + 1
		for j < len(batch) && batch[j].req == batch[i].req {
			j++
		}
		var out []Tensor
		if err == nil {
			out = res[i:j]
		}
		r := batch[i].req
		if r.reply.finish(batch[i:j], out, err) && err == nil && ctl != nil {
			ctl.record(time.Since(r.arrived))
		}
		i = j
	}
}

// ended is where Execute hands the loop the requests it stopped waiting for because their
// context ended, so that the loop drops their rows still queued. The loop learns of an ended
// context from the one goroutine that waits on it anyway, instead of asking every queued row's
// context on every turn, or starting a goroutine a request (context.AfterFunc).
type ended struct {
	mu   sync.Mutex
	reqs []*request
	wake chan struct{} // capacity 1: a pending wake-up stands for any number of posts
}

func newEnded() ended { return ended{wake: make(chan struct{}, 1)} }

func (e *ended) post(r *request) {
	e.mu.Lock()
	e.reqs = append(e.reqs, r)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// take moves the posted requests to buf and returns it.
func (e *ended) take(buf []*request) []*request {
	e.mu.Lock()
	defer e.mu.Unlock()
	buf = append(buf, e.reqs...)
	clear(e.reqs)
	e.reqs = e.reqs[:0]
	return buf
}
