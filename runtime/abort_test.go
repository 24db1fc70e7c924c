package runtime_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// Abort answers what is queued at once with ErrClosed, lets the running batches finish until
// its deadline, and cancels them past it.
func TestBatcherAbort(t *testing.T) {
	for _, tt := range []struct {
		name     string
		sessions int
		requests int
		run      time.Duration // a batch's run time
		cutoff   time.Duration // Abort's deadline
		wantOK   int           // requests answered with results; the rest get ErrClosed
		wantTook time.Duration // from Abort to its return
		wantErr  error
	}{
		{"idle", 1, 0, 10 * time.Millisecond, time.Second, 0, 0, nil},
		{"queued fail at once, running finish", 1, 5, 10 * time.Millisecond, time.Second, 1, 10 * time.Millisecond, nil},
		{"every session finishes its batch", 2, 6, 10 * time.Millisecond, time.Second, 2, 10 * time.Millisecond, nil},
		{"runs past the deadline are cancelled", 1, 5, time.Hour, 50 * time.Millisecond, 0, 50 * time.Millisecond, context.DeadlineExceeded},
		{"deadline already passed", 2, 4, time.Hour, 0, 0, 0, context.DeadlineExceeded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, fs, _ := newBatcher(cfg(1, 0), tt.run, tt.sessions)
				var ok, closed atomic.Int32
				var wg sync.WaitGroup
				for i := range tt.requests {
					wg.Go(func() {
						_, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(int64(i), 2)})
						switch {
						case err == nil:
							ok.Add(1)
						case errors.Is(err, runtime.ErrClosed):
							closed.Add(1)
						default:
							t.Errorf("request %d: %v, want a result or ErrClosed", i, err)
						}
					})
				}
				synctest.Wait() // a batch runs on every session; the rest wait in the queue
				ctx, cancel := context.WithTimeout(t.Context(), tt.cutoff)
				defer cancel()
				start := time.Now()
				err := b.Abort(ctx)
				if took := time.Since(start); took != tt.wantTook || !errors.Is(err, tt.wantErr) {
					t.Errorf("Abort took %v and said %v, want %v and %v", took, err, tt.wantTook, tt.wantErr)
				}
				wg.Wait()
				if int(ok.Load()) != tt.wantOK || int(closed.Load()) != tt.requests-tt.wantOK {
					t.Errorf("%d answered, %d closed; want %d answered, the other %d closed", ok.Load(), closed.Load(), tt.wantOK, tt.requests-tt.wantOK)
				}
				runs := 0
				for _, f := range fs {
					runs += f.runs
				}
				if want := min(tt.requests, tt.sessions); runs != want {
					t.Errorf("%d batches ran, want %d: queued rows must not run after Abort", runs, want)
				}
				if _, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(1, 2)}); !errors.Is(err, runtime.ErrClosed) {
					t.Errorf("Execute after Abort: %v", err)
				}
				if err := b.Close(); err != nil {
					t.Errorf("Close after Abort: %v", err)
				}
			})
		})
	}
}

// An Abort cuts a Close's drain short: what Close would still have served fails at once.
func TestBatcherAbortInterruptsClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, _ := newBatcher(cfg(1, 0), 100*time.Millisecond, 1)
		errs := make(chan error, 5)
		for i := range 5 {
			go func() {
				_, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(int64(i), 2)})
				errs <- err
			}()
		}
		synctest.Wait()
		closed := make(chan struct{})
		go func() { b.Close(); close(closed) }()
		time.Sleep(150 * time.Millisecond) // Close has served one, the second is running
		if err := b.Abort(t.Context()); err != nil {
			t.Errorf("Abort: %v", err)
		}
		<-closed
		ok := 0
		for range 5 {
			if err := <-errs; err == nil {
				ok++
			} else if !errors.Is(err, runtime.ErrClosed) {
				t.Errorf("got %v, want ErrClosed", err)
			}
		}
		if ok != 2 {
			t.Errorf("%d served, want 2: one by Close, the one running at Abort", ok)
		}
	})
}

// A request split over several batches fails whole when Abort finds some of its rows still
// queued: a partial answer is no answer.
func TestBatcherAbortFailsPartlyRunRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, _ := newBatcher(cfg(2, 0), 10*time.Millisecond, 1)
		done := make(chan error, 1)
		go func() {
			_, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(1, 2), enc(2, 2), enc(3, 2), enc(4, 2)})
			done <- err
		}()
		synctest.Wait() // rows 1-2 run, rows 3-4 wait
		if err := b.Abort(t.Context()); err != nil {
			t.Errorf("Abort: %v", err)
		}
		if err := <-done; !errors.Is(err, runtime.ErrClosed) {
			t.Errorf("got %v, want ErrClosed", err)
		}
	})
}
