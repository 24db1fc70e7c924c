package tracing_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
	"github.com/ortserve/ortserve/tracing"
)

func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		c    tracing.Config
		want string // in the error; "": none
	}{
		{tracing.Config{}, ""},
		{tracing.Config{Endpoint: "grpc://localhost:4317"}, ""},
		{tracing.Config{Endpoint: "http://collector:4318", Protocol: tracing.ProtocolHTTP}, ""},
		{tracing.Config{Endpoint: "https://collector:4317", Protocol: tracing.ProtocolGRPC}, ""},
		{tracing.Config{Endpoint: "localhost:4317"}, "--otlp-endpoint"},
		{tracing.Config{Endpoint: "ftp://localhost:4317"}, "--otlp-endpoint"},
		{tracing.Config{Protocol: "thrift"}, "--otlp-protocol"},
		{tracing.Config{Endpoint: "grpc://localhost:4317", Protocol: tracing.ProtocolHTTP}, "is gRPC"},
	} {
		err := tt.c.Validate()
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: %v, want an error with %q", tt.c, err, tt.want)
		}
	}
}

// TestNewOff: without an endpoint, or with the SDK disabled, nothing is built.
func TestNewOff(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4317"},
		{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4317"},
	} {
		tr, err := tracing.New(t.Context(), tracing.Config{}, "test", func(k string) string { return env[k] })
		if err != nil || tr != nil {
			t.Errorf("env %v: got %v, %v; want tracing off", env, tr, err)
		}
	}
	tr, err := tracing.New(t.Context(), tracing.Config{}, "test", func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4317"}[k]
	})
	if err != nil || tr == nil {
		t.Fatalf("OTEL_EXPORTER_OTLP_ENDPOINT alone: got %v, %v; want tracing on", tr, err)
	}
	tr.Shutdown(t.Context())
}

// gate is a session that says when a run starts, and holds it until it is told to go on.
type gate struct{ started, next chan struct{} }

func (g gate) Run(_ context.Context, b tokenize.Batch) (runtime.Tensor, error) {
	g.started <- struct{}{}
	<-g.next
	return runtime.Tensor{Shape: []int64{int64(b.Rows), int64(b.Cols), 1}, Data: make([]float32, b.Rows*b.Cols)}, nil
}

func (gate) Close() error { return nil }

// queued tells when the batcher's queue holds n requests.
type queued struct {
	runtime.Observer
	n    int
	full chan struct{}
}

func (q queued) Queue(requests, _ int) {
	if requests == q.n {
		select {
		case q.full <- struct{}{}:
		default:
		}
	}
}

// TestBatchSpans runs a batch of one sampled request, then one of two sampled requests and
// one that is not: each batch is a span under its first sampled request's, linked to every
// sampled request's span and they to it; the unsampled request gets no link.
func TestBatchSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := tp.Tracer("test")
	g := gate{started: make(chan struct{}), next: make(chan struct{})}
	obs := queued{Observer: runtime.NopObserver{}, n: 3, full: make(chan struct{}, 1)}
	traced := tracing.Observer(obs, "m", "v1")
	cfg := runtime.DefaultBatchConfig()
	cfg.Packing = false
	b := runtime.NewBatcher(cfg, runtime.NewPool([]runtime.Session{g}), traced)
	defer b.Close()

	enc := tokenize.Encoding{IDs: []int64{1, 2, 3}, TypeIDs: make([]int64, 3)}
	execute := func(ctx context.Context, done chan<- error) {
		_, _, err := b.Execute(ctx, []tokenize.Encoding{enc})
		done <- err
	}
	done := make(chan error, 4)
	ctxA, a := tr.Start(t.Context(), "A")
	go execute(ctxA, done)
	<-g.started // A runs alone, held by the gate
	ctxB, sb := tr.Start(t.Context(), "B")
	ctxC, sc := tr.Start(t.Context(), "C")
	unsampled := trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: [16]byte{1}, SpanID: [8]byte{1}}))
	go execute(ctxB, done)
	go execute(ctxC, done)
	go execute(unsampled, done)
	<-obs.full // B, C and the unsampled request wait behind A's batch
	g.next <- struct{}{}
	<-g.started
	g.next <- struct{}{}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []trace.Span{a, sb, sc} {
		s.End()
	}

	var batches []sdktrace.ReadOnlySpan
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.Name() == "batch" {
			batches = append(batches, s)
		}
		spans[s.Name()] = s
	}
	if len(batches) != 2 {
		t.Fatalf("%d batch spans, want 2 (A alone, then B, C and the unsampled request)", len(batches))
	}
	second := batches[1]
	if second.Parent().SpanID() != spans["B"].SpanContext().SpanID() && second.Parent().SpanID() != spans["C"].SpanContext().SpanID() {
		t.Errorf("the second batch's parent %v is neither B %v nor C %v (A %v)", second.Parent().SpanID(), spans["B"].SpanContext().SpanID(), spans["C"].SpanContext().SpanID(), spans["A"].SpanContext().SpanID())
	}
	if n := len(second.Links()); n != 2 {
		t.Errorf("the second batch has %d links, want 2 (B and C)", n)
	}
	backLinks := len(spans["B"].Links()) + len(spans["C"].Links())
	if backLinks != 1 { // the one that is not the batch's parent links to it
		t.Errorf("B and C have %d links to their batch, want 1", backLinks)
	}
	attrs := map[string]int64{}
	for _, kv := range second.Attributes() {
		attrs[string(kv.Key)] = kv.Value.AsInt64()
	}
	if attrs["ortserve.batch.texts"] != 3 || attrs["ortserve.batch.requests"] != 3 || attrs["ortserve.batch.tokens"] != 9 {
		t.Errorf("second batch's attributes %v: want 3 texts of 3 requests, 9 tokens", second.Attributes())
	}
}

func TestLogHandler(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(t.Context(), "request")
	defer span.End()
	var buf bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewTextHandler(&buf, nil))).With("k", "v")
	log.InfoContext(ctx, "traced")
	log.InfoContext(t.Context(), "not traced")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if want := "trace_id=" + span.SpanContext().TraceID().String(); !strings.Contains(lines[0], want) || !strings.Contains(lines[0], "span_id=") {
		t.Errorf("traced line %q: want %s and a span_id", lines[0], want)
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("line without a span %q has a trace_id", lines[1])
	}
}
