//go:build !linux

package bench

import "time"

// preciseClock is only a timer where there is no per-thread nanosleep to use: arrivals may
// go out up to the timer's granularity late.
func preciseClock() (sleep func(time.Duration), undo func()) {
	return time.Sleep, func() {}
}
