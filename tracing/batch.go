package tracing

import (
	"cmp"
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ortserve/ortserve/runtime"
)

// Observer wraps obs, a model version's batch observer, so that each batch the version
// runs is a span: "batch", a child of the span of the first sampled request it serves (by
// that span's tracer provider), with a link to each sampled request's span and from each to
// it, so that every request's trace leads to the batch that served it and the batch to all
// of them. A batch that serves no sampled request makes no span.
func Observer(obs runtime.Observer, model, version string) runtime.Observer {
	return batchObserver{Observer: obs, attrs: []attribute.KeyValue{
		attribute.String("ortserve.model", model), attribute.String("ortserve.version", version),
	}}
}

type batchObserver struct {
	runtime.Observer
	attrs []attribute.KeyValue // the version's
}

func (o batchObserver) Trace(d runtime.Dispatch) func(error) {
	inner := o.Observer.Trace(d)
	var parent context.Context
	var links []trace.Link
	for ctx := range d.Requests() {
		if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
			parent = cmp.Or(parent, ctx)
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	if parent == nil {
		return inner
	}
	attrs := append(o.attrs[:len(o.attrs):len(o.attrs)],
		attribute.Int("ortserve.batch.texts", d.Texts),
		attribute.Int("ortserve.batch.rows", d.Rows),
		attribute.Int("ortserve.batch.padded_tokens", d.PaddedTokens),
		attribute.Int("ortserve.batch.tokens", d.RealTokens),
		attribute.Int("ortserve.batch.requests", d.RequestCount()),
		attribute.Bool("ortserve.batch.packed", d.Packed),
	)
	tracer := trace.SpanFromContext(parent).TracerProvider().Tracer(Instrumentation)
	_, span := tracer.Start(parent, "batch", trace.WithLinks(links...), trace.WithAttributes(attrs...))
	// The other requests' spans link back to the batch. A span already ended (its client
	// left) takes no link: the SDK ignores changes to an ended span.
	back := trace.Link{SpanContext: span.SpanContext()}
	for ctx := range d.Requests() {
		if ctx != parent {
			if s := trace.SpanFromContext(ctx); s.SpanContext().IsSampled() {
				s.AddLink(back)
			}
		}
	}
	return func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		if inner != nil {
			inner(err)
		}
	}
}
