//go:build cgo && ort

package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/ortserve/ortserve/server/grpc/inferencepb"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// otlpReceiver is an OTLP collector's trace service on a real gRPC server: what serve's
// exporter sends, as a collector would receive it.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	attrs map[string]string // the resource's string attributes
}

func (o *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.GetResource().GetAttributes() {
			o.attrs[kv.Key] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// startReceiver serves an otlpReceiver on a free port until the test ends; it returns the
// receiver and its endpoint for --otlp-endpoint.
func startReceiver(t testing.TB) (*otlpReceiver, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &otlpReceiver{attrs: map[string]string{}}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, rcv)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return rcv, "grpc://" + ln.Addr().String()
}

// TestTracingOTLP sends one request with a traceparent to a server exporting to a real OTLP
// receiver, and finds the request's spans under the caller's trace once the server has shut
// down (which flushes them): the request's span a child of the caller's, decode, tokenize,
// queue and inference under it, and the batch that ran it, linked to it.
func TestTracingOTLP(t *testing.T) {
	rcv, endpoint := startReceiver(t)
	grpcAddr := freeAddr(t)
	url, stop, err := launch("--models", minilmOnly(t), "--otlp-endpoint", endpoint, "--grpc-addr", grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequest(http.MethodPost, url+"/embed", bytes.NewReader([]byte(`{"inputs":["a traced request"],"model":"minilm"}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// A gRPC ModelInfer with the trace in its metadata, under another trace.
	const grpcTraceID, grpcParentID = "5cf92f3577b34da6a3ce929d0e0e4737", "01f067aa0ba902b8"
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-"+grpcTraceID+"-"+grpcParentID+"-01")
	_, err = inferencepb.NewGRPCInferenceServiceClient(conn).ModelInfer(ctx, &inferencepb.ModelInferRequest{
		ModelName: "minilm",
		Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{{
			Name: "text", Datatype: "BYTES", Shape: []int64{1},
			Contents: &inferencepb.InferTensorContents{BytesContents: [][]byte{[]byte("a traced call")}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if got := rcv.attrs["service.name"]; got != "ortserve" {
		t.Errorf("service.name %q, want ortserve", got)
	}
	byName := map[string]*tracepb.Span{}
	for _, s := range rcv.spans {
		if hex.EncodeToString(s.TraceId) == traceID {
			byName[s.Name] = s
		}
	}
	root := byName["POST /embed"]
	if root == nil {
		t.Fatalf("no span POST /embed under trace %s; got %d spans: %v", traceID, len(rcv.spans), spanNames(rcv.spans))
	}
	if got := hex.EncodeToString(root.ParentSpanId); got != parentID {
		t.Errorf("request span's parent %s, want the traceparent's %s", got, parentID)
	}
	if root.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("request span kind %v, want server", root.Kind)
	}
	wantAttrs(t, root, map[string]string{"http.route": "/embed", "ortserve.model": "minilm", "ortserve.version": "fp32"})
	for _, name := range []string{"decode", "tokenize", "queue", "inference", "batch"} {
		s := byName[name]
		if s == nil {
			t.Errorf("no %s span under the trace; have %v", name, spanNames(rcv.spans))
			continue
		}
		if !bytes.Equal(s.ParentSpanId, root.SpanId) {
			t.Errorf("%s span's parent is not the request's span", name)
		}
	}
	var call *tracepb.Span
	var callChildren []string
	for _, s := range rcv.spans {
		if hex.EncodeToString(s.TraceId) == grpcTraceID && s.Name == "inference.GRPCInferenceService/ModelInfer" {
			call = s
		}
	}
	if call == nil || hex.EncodeToString(call.ParentSpanId) != grpcParentID || call.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("gRPC call: span %v; want inference.GRPCInferenceService/ModelInfer, a server span under the metadata's traceparent; spans %v", call, spanNames(rcv.spans))
	} else {
		for _, s := range rcv.spans {
			if bytes.Equal(s.ParentSpanId, call.SpanId) {
				callChildren = append(callChildren, s.Name)
			}
		}
		wantAttrs(t, call, map[string]string{"ortserve.model": "minilm", "rpc.method": "inference.GRPCInferenceService/ModelInfer"})
		for _, name := range []string{"tokenize", "queue", "inference"} {
			if !slices.Contains(callChildren, name) {
				t.Errorf("gRPC call: no %s span under it; its children %v", name, callChildren)
			}
		}
	}

	batch := byName["batch"]
	if batch == nil {
		return
	}
	if !slices.ContainsFunc(batch.Links, func(l *tracepb.Span_Link) bool { return bytes.Equal(l.SpanId, root.SpanId) }) {
		t.Errorf("the batch span does not link to the request's span: links %v", batch.Links)
	}
	wantAttrs(t, batch, map[string]string{"ortserve.model": "minilm", "ortserve.version": "fp32"})
	for _, k := range []string{"ortserve.batch.texts", "ortserve.batch.rows", "ortserve.batch.padded_tokens", "ortserve.batch.requests"} {
		if v := intAttr(batch, k); v < 1 {
			t.Errorf("batch span %s = %d, want ≥ 1", k, v)
		}
	}
}

func spanNames(spans []*tracepb.Span) []string {
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
	}
	return names
}

// wantAttrs checks that span has the string attributes want.
func wantAttrs(t *testing.T, span *tracepb.Span, want map[string]string) {
	t.Helper()
	for k, v := range want {
		i := slices.IndexFunc(span.Attributes, func(kv *commonpb.KeyValue) bool { return kv.Key == k })
		if i < 0 || span.Attributes[i].GetValue().GetStringValue() != v {
			t.Errorf("span %s: %s is not %q: %v", span.Name, k, v, span.Attributes)
		}
	}
}

// intAttr is span's integer attribute k, or -1.
func intAttr(span *tracepb.Span, k string) int64 {
	i := slices.IndexFunc(span.Attributes, func(kv *commonpb.KeyValue) bool { return kv.Key == k })
	if i < 0 {
		return -1
	}
	return span.Attributes[i].GetValue().GetIntValue()
}
