package bench

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// preciseClock makes the calling goroutine's thread a precise sleeper: it locks the
// goroutine to its thread and sets the thread's timer slack to 1 µs (Linux adds 50 µs by
// default). It returns the sleep for the last stretch before an arrival and a function that
// undoes it.
//
// Why: Go's timers wake a goroutine through the network poller, whose wait has millisecond
// granularity, so an open-loop arrival scheduled by a timer alone goes out up to a
// millisecond late (BenchmarkPacing; docs/performance.md, "Figures behind constants").
// Open-loop latency runs from the intended send time, so that lag would be charged to the
// server. A nanosleep on a thread of its own wakes within microseconds, and releases the
// CPU while it waits, where a spin would hold the generator's processor and delay the
// reading of responses.
func preciseClock() (sleep func(time.Duration), undo func()) {
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0) // nanoseconds; best effort: the default slack only blurs the pacing
	sleep = func(d time.Duration) {
		ts := unix.NsecToTimespec(int64(d))
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
	}
	// The thread is left to exit with the goroutine: its timer slack is not restored.
	return sleep, func() {}
}
