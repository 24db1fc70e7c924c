package server

import (
	"context"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Tracing is what the server needs to trace requests: a tracer, and the propagator that
// reads a caller's trace (W3C traceparent) from the headers. Config.Tracing nil traces
// nothing, and then no span is started, looked up or attributed on any path.
type Tracing struct {
	Tracer     trace.Tracer
	Propagator propagation.TextMapPropagator
}

// startRequest starts the span of an inference request on route, a child of the trace its
// headers carry, under ctx (the request's), and returns ctx with it.
func (t *Tracing) startRequest(ctx context.Context, r *http.Request, route string) (context.Context, trace.Span) {
	ctx = t.Propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
	return t.Tracer.Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.HTTPRoute(route), semconv.URLPath(r.URL.Path)))
}

// endRequest ends a request's span with its status and what served it. Per HTTP's semantic
// conventions a server span is an error on 5xx only: a 4xx is the client's.
func endRequest(span trace.Span, code int, ri *reqInfo) {
	span.SetAttributes(semconv.HTTPResponseStatusCode(code))
	if ri.model != "" {
		span.SetAttributes(attribute.String("ortserve.model", ri.model), attribute.String("ortserve.version", ri.version),
			attribute.Int("ortserve.tokens", ri.stats.Tokens), attribute.Int("ortserve.batches", ri.stats.Batches))
		if ri.stats.CacheHits > 0 {
			span.SetAttributes(attribute.Int("ortserve.cache_hits", ri.stats.CacheHits))
		}
	}
	if code >= http.StatusInternalServerError {
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(code)))
		span.SetStatus(codes.Error, http.StatusText(code))
	}
	span.End()
}

// childSpan starts a span named name under ctx's, when ctx's span records; else it returns
// nil, having allocated nothing. End it with endSpan.
func childSpan(ctx context.Context, name string) trace.Span {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return nil
	}
	_, span := parent.TracerProvider().Tracer(instrumentation).Start(ctx, name)
	return span
}

// endSpan ends a span of childSpan's, if any.
func endSpan(span trace.Span) {
	if span != nil {
		span.End()
	}
}

// instrumentation names the tracer of the server's child spans, as the tracing package
// names serve's.
const instrumentation = "github.com/ortserve/ortserve"
