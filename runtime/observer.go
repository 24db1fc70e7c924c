package runtime

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
