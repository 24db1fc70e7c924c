package models

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ortserve/ortserve/runtime"
)

// instrumentation names the tracer of a request's model spans, as serve names its own.
const instrumentation = "github.com/ortserve/ortserve"

// tracer is the tracer of ctx's span when that span records, else nil: a request that is not
// traced costs the model nothing.
func tracer(ctx context.Context) trace.Tracer {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return nil
	}
	return parent.TracerProvider().Tracer(instrumentation)
}

// traceTokenize records a request's tokenization, from start to now, on tr (nil: none).
func traceTokenize(ctx context.Context, tr trace.Tracer, start time.Time, texts int, st Stats, err error) {
	if tr == nil {
		return
	}
	_, span := tr.Start(ctx, "tokenize", trace.WithTimestamp(start),
		trace.WithAttributes(attribute.Int("ortserve.texts", texts), attribute.Int("ortserve.tokens", st.Tokens), attribute.Int("ortserve.truncated", st.Truncated)))
	if err != nil {
		span.RecordError(err)
	}
	span.End()
}

// traceExecute records a request's time in the executor, from sent to now, as es splits it:
// "queue", waiting to be batched and for a session, then "inference", from the dispatch of
// its last row to its result. The batch spans (tracing's batch observer) link to the
// request's span.
func traceExecute(ctx context.Context, tr trace.Tracer, sent time.Time, es runtime.ExecStats, err error) {
	if tr == nil {
		return
	}
	dispatched := sent.Add(es.Queue)
	_, q := tr.Start(ctx, "queue", trace.WithTimestamp(sent))
	if es.Batches == 0 { // never dispatched: refused, expired or cancelled
		if err != nil {
			q.RecordError(err)
		}
		q.End()
		return
	}
	q.End(trace.WithTimestamp(dispatched))
	_, inf := tr.Start(ctx, "inference", trace.WithTimestamp(dispatched), trace.WithAttributes(attribute.Int("ortserve.batches", es.Batches)))
	if err != nil {
		inf.RecordError(err)
	}
	inf.End()
}
