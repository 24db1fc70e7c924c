package server

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
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

// startGRPC starts the span of a gRPC inference call to method, a child of the trace its
// metadata carries.
func (t *Tracing) startGRPC(ctx context.Context, method string) (context.Context, trace.Span) {
	md, _ := metadata.FromIncomingContext(ctx)
	ctx = t.Propagator.Extract(ctx, mdCarrier(md))
	return t.Tracer.Start(ctx, strings.TrimPrefix(method, "/"), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(semconv.RPCSystemNameKey.String("grpc"), semconv.RPCMethod(strings.TrimPrefix(method, "/"))))
}

// mdCarrier reads a trace from gRPC metadata, whose keys are lower-case: propagation's
// HeaderCarrier would look them up in HTTP's canonical case ("Traceparent") and miss.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string { return slices.Collect(maps.Keys(c)) }

// endGRPC ends a gRPC call's span as endRequest ends an HTTP request's, with the gRPC code
// the call answered.
func endGRPC(span trace.Span, code int, ri *reqInfo) {
	span.SetAttributes(semconv.RPCResponseStatusCodeKey.String(grpcCode(code).String()))
	endServed(span, code, ri)
}

// endRequest ends a request's span with its status and what served it. Per HTTP's semantic
// conventions a server span is an error on 5xx only: a 4xx is the client's.
func endRequest(span trace.Span, code int, ri *reqInfo) {
	span.SetAttributes(semconv.HTTPResponseStatusCode(code))
	endServed(span, code, ri)
}

// endServed sets on a request's span what served it, marks a 5xx an error, and ends it.
func endServed(span trace.Span, code int, ri *reqInfo) {
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
