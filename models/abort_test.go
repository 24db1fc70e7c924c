package models_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ortserve/ortserve/runtime"
)

// Abort reaches the requests waiting on the model serving and on the generation a reload
// retired: each fails with runtime.ErrClosed, so that Close, which waits for them, returns
// at once with every generation closed.
func TestRepositoryAbort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		dir := writeModel(t, root, "emb", embedYAML)
		hb := newHeldBackend()
		r := openRepo(t, root, hb)

		// A request waits on the first generation; a reload retires it, and a request
		// waits on the second.
		first := holdRequest(t.Context(), r, hb, "emb")
		change(t, dir, embedYAML, "pooling: mean", "pooling: cls")
		if err := r.Reload(); err != nil {
			t.Fatal(err)
		}
		second := holdRequest(t.Context(), r, hb, "emb")

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := r.Abort(ctx); err != nil {
			t.Errorf("Abort: %v", err)
		}
		for _, held := range []<-chan error{first, second} {
			if err := <-held; !errors.Is(err, runtime.ErrClosed) {
				t.Errorf("a waiting request got %v, want runtime.ErrClosed", err)
			}
		}
		closeAll(t, r, hb.fakeBackend, 2)
	})
}

// An Abort reaches a generation retired after it, even one swapped in after it: the
// request waiting there fails with runtime.ErrClosed, and Close returns.
func TestAbortReachesLaterRetirement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		dir := writeModel(t, root, "emb", embedYAML)
		hb := newHeldBackend()
		r := openRepo(t, root, hb)
		if err := r.Abort(t.Context()); err != nil {
			t.Fatal(err)
		}
		// A generation swapped in after the Abort serves, and a request waits on it...
		change(t, dir, embedYAML, "pooling: mean", "pooling: cls")
		if err := r.Reload(); err != nil {
			t.Fatal(err)
		}
		held := holdRequest(t.Context(), r, hb, "emb")
		// ...until a reload retires it: its retirement aborts it.
		change(t, dir, embedYAML, "pooling: cls", "pooling: max")
		if err := r.Reload(); err != nil {
			t.Fatal(err)
		}
		if err := <-held; !errors.Is(err, runtime.ErrClosed) {
			t.Errorf("the request on the retired generation got %v, want runtime.ErrClosed", err)
		}
		closeAll(t, r, hb.fakeBackend, 3)
	})
}
