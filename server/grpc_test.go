package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	pb "github.com/ortserve/ortserve/server/grpc/inferencepb"
	"github.com/ortserve/ortserve/tokenize"
)

// grpcConn serves s's gRPC face in process, over an in-memory connection.
func grpcConn(t testing.TB, s *Server) *grpc.ClientConn {
	t.Helper()
	_, conn := grpcServe(t, s)
	return conn
}

// grpcServe is grpcConn, with the gRPC server, for a test that stops it.
func grpcServe(t testing.TB, s *Server) (*GRPCServer, *grpc.ClientConn) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := s.GRPC()
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///ortserve",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return gs, conn
}

// testGRPCServer is newTestServer's server, with its gRPC face.
func testGRPCServer(t testing.TB, cfg Config, repo Repository, reg *prometheus.Registry) (*Server, pb.GRPCInferenceServiceClient, *grpc.ClientConn) {
	t.Helper()
	s := New(cfg, repo, slog.New(slog.DiscardHandler), NewMetrics(reg))
	s.SetReady(true)
	conn := grpcConn(t, s)
	return s, pb.NewGRPCInferenceServiceClient(conn), conn
}

func grpcTestConfig() Config {
	cfg := DefaultConfig()
	cfg.MaxInputs = 4
	cfg.MaxBodyBytes = 1 << 10
	return cfg
}

// textsRequest is an infer request of texts as tritonclient.grpc sends it: the BYTES tensor in
// raw_input_contents.
func textsRequest(model string, texts ...string) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{
		ModelName:        model,
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "text", Datatype: "BYTES", Shape: []int64{int64(len(texts))}}},
		RawInputContents: [][]byte{appendBytesTensor(nil, texts)},
	}
}

// The KServe service answers as the REST routes do: the same metadata and the same vectors
// for the same texts, whether they came in raw_input_contents or in bytes_contents.
func TestGRPCKServe(t *testing.T) {
	repo := fakeRepo{"emb": {task: models.TaskEmbed}}
	s, c, conn := testGRPCServer(t, grpcTestConfig(), repo, prometheus.NewRegistry())
	ctx := t.Context()

	if r, err := c.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !r.Live {
		t.Errorf("ServerLive: %v %v", r, err)
	}
	if r, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "emb"}); err != nil || !r.Ready {
		t.Errorf("ModelReady: %v %v", r, err)
	}
	md, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "emb"})
	if err != nil || md.Platform != "onnxruntime_onnx" || md.Inputs[0].Name != "text" || md.Inputs[0].Datatype != "BYTES" || md.Outputs[0].Name != "embedding" {
		t.Errorf("ModelMetadata: %v %v", md, err)
	}
	cfg, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "emb"})
	if err != nil || cfg.Config.MaxBatchSize != 4 || cfg.Config.Input[0].DataType != pb.DataType_TYPE_STRING || !slices.Equal(cfg.Config.Input[0].Dims, []int64{1}) ||
		cfg.Config.Output[0].DataType != pb.DataType_TYPE_FP32 {
		t.Errorf("ModelConfig: %v %v", cfg, err)
	}

	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	_, body := post(t, ts.URL+"/v2/models/emb/infer", `{"id":"7","inputs":[{"name":"text","shape":[2],"datatype":"BYTES","data":["héllo","a"]}]}`)
	var rest struct {
		Outputs []struct {
			Shape []int64   `json:"shape"`
			Data  []float32 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(body), &rest); err != nil || len(rest.Outputs) != 1 {
		t.Fatalf("REST infer: %v %s", err, body)
	}

	raw := textsRequest("emb", "héllo", "a")
	raw.Id = "7"
	asContents := textsRequest("emb")
	asContents.RawInputContents = nil
	asContents.Inputs[0].Shape = []int64{2, 1}
	asContents.Inputs[0].Contents = &pb.InferTensorContents{BytesContents: [][]byte{[]byte("héllo"), []byte("a")}}
	for name, req := range map[string]*pb.ModelInferRequest{"raw": raw, "bytes_contents": asContents} {
		r, err := c.ModelInfer(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.ModelName != "emb" || r.ModelVersion != "v1" || len(r.Outputs) != 1 || r.Outputs[0].Name != "embedding" || r.Outputs[0].Datatype != "FP32" ||
			!slices.Equal(r.Outputs[0].Shape, rest.Outputs[0].Shape) || len(r.RawOutputContents) != 1 {
			t.Fatalf("%s: %v", name, r)
		}
		if got := floatsFrom(r.RawOutputContents[0]); !slices.Equal(got, rest.Outputs[0].Data) {
			t.Errorf("%s: %v, REST gave %v", name, got, rest.Outputs[0].Data)
		}
	}

	health := healthpb.NewHealthClient(conn)
	for _, ready := range []bool{true, false} {
		s.SetReady(ready)
		want := map[bool]healthpb.HealthCheckResponse_ServingStatus{true: healthpb.HealthCheckResponse_SERVING, false: healthpb.HealthCheckResponse_NOT_SERVING}[ready]
		for _, service := range []string{"", "inference.GRPCInferenceService"} {
			if r, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service}); err != nil || r.Status != want {
				t.Errorf("ready %v: health of %q: %v %v", ready, service, r, err)
			}
		}
		if r, err := c.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || r.Ready != ready {
			t.Errorf("ServerReady: %v %v, want %v", r, err, ready)
		}
	}
}

// A request gRPC carries that the REST routes would refuse is refused with INVALID_ARGUMENT
// or NOT_FOUND: never served, never INTERNAL.
func TestGRPCBadRequests(t *testing.T) {
	_, c, _ := testGRPCServer(t, grpcTestConfig(), fakeRepo{"emb": {task: models.TaskEmbed}}, prometheus.NewRegistry())
	edit := func(f func(*pb.ModelInferRequest)) *pb.ModelInferRequest {
		r := textsRequest("emb", "a", "b")
		f(r)
		return r
	}
	for _, tc := range []struct {
		name string
		req  *pb.ModelInferRequest
		want codes.Code
	}{
		{"wrong datatype", edit(func(r *pb.ModelInferRequest) { r.Inputs[0].Datatype = "FP32" }), codes.InvalidArgument},
		{"no input", edit(func(r *pb.ModelInferRequest) { r.Inputs, r.RawInputContents = nil, nil }), codes.InvalidArgument},
		{"unknown input", edit(func(r *pb.ModelInferRequest) { r.Inputs[0].Name = "input_ids" }), codes.InvalidArgument},
		{"shape says three", edit(func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = []int64{3} }), codes.InvalidArgument},
		{"negative shape", edit(func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = []int64{-2} }), codes.InvalidArgument},
		{"no data", edit(func(r *pb.ModelInferRequest) { r.RawInputContents = nil }), codes.InvalidArgument},
		{"raw cut short", edit(func(r *pb.ModelInferRequest) { r.RawInputContents[0] = r.RawInputContents[0][:6] }), codes.InvalidArgument},
		{"raw and contents", edit(func(r *pb.ModelInferRequest) { r.Inputs[0].Contents = &pb.InferTensorContents{} }), codes.InvalidArgument},
		{"two raws for one input", edit(func(r *pb.ModelInferRequest) { r.RawInputContents = append(r.RawInputContents, nil) }), codes.InvalidArgument},
		{"not UTF-8", edit(func(r *pb.ModelInferRequest) { r.RawInputContents[0] = appendBytesTensor(nil, []string{"a", "\xff"}) }), codes.InvalidArgument},
		{"over max inputs", textsRequest("emb", "a", "b", "c", "d", "e"), codes.InvalidArgument},
		{"unknown output", edit(func(r *pb.ModelInferRequest) {
			r.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "label"}}
		}), codes.InvalidArgument},
		{"truncate not a bool", edit(func(r *pb.ModelInferRequest) {
			r.Parameters = map[string]*pb.InferParameter{"truncate": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "yes"}}}
		}), codes.InvalidArgument},
		{"unknown model", edit(func(r *pb.ModelInferRequest) { r.ModelName = "nope" }), codes.NotFound},
		{"no model", edit(func(r *pb.ModelInferRequest) { r.ModelName = "" }), codes.NotFound},
		{"unknown version", edit(func(r *pb.ModelInferRequest) { r.ModelVersion = "v9" }), codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.ModelInfer(t.Context(), tc.req)
			if got := status.Code(err); got != tc.want {
				t.Errorf("got %v (%v), want %v", got, err, tc.want)
			}
		})
	}
	if _, err := c.ModelMetadata(t.Context(), &pb.ModelMetadataRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("metadata of an unknown model: %v", err)
	}
}

// What the models and batchers fail with maps to the gRPC code of classify's status.
func TestGRPCErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{&tokenize.TooLongError{Index: 1, Tokens: 300, Max: 256}, codes.InvalidArgument},
		{&models.UnknownError{Kind: models.ErrUnknownVersion, Name: "emb/int4"}, codes.NotFound},
		{fmt.Errorf("batcher: %w", runtime.ErrQueueFull), codes.ResourceExhausted},
		{&runtime.OverloadError{Err: runtime.ErrOverloaded, Reason: "slo", RetryAfter: 40 * time.Millisecond}, codes.ResourceExhausted},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{runtime.ErrClosed, codes.Unavailable},
		{&models.LoadError{Model: "emb", Version: "fp32", Err: errors.New("out of memory")}, codes.Unavailable},
		{&models.OptionError{Field: "dimensions", Msg: "too many"}, codes.InvalidArgument},
		{errors.New("boom"), codes.Internal},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			_, c, _ := testGRPCServer(t, grpcTestConfig(), fakeRepo{"emb": {task: models.TaskEmbed, err: tc.err}}, prometheus.NewRegistry())
			var trailer metadata.MD
			_, err := c.ModelInfer(t.Context(), textsRequest("emb", "a"), grpc.Trailer(&trailer))
			if got := status.Code(err); got != tc.want {
				t.Errorf("got %v (%v), want %v", got, err, tc.want)
			}
			if tc.want == codes.ResourceExhausted && len(trailer.Get("retry-after-ms")) == 0 {
				t.Errorf("no retry-after-ms in the trailer: %v", trailer)
			}
		})
	}
}

// The API keys guard gRPC as HTTP: from the metadata authorization: Bearer KEY, with health
// open when --auth-exempt says so.
func TestGRPCAuth(t *testing.T) {
	for _, exempt := range []bool{false, true} {
		cfg := grpcTestConfig()
		cfg.APIKeys = []string{"sesame"}
		if exempt {
			cfg.AuthExempt = []string{"health"}
		}
		_, c, conn := testGRPCServer(t, cfg, fakeRepo{"emb": {task: models.TaskEmbed}}, prometheus.NewRegistry())
		with := func(key string) context.Context {
			if key == "" {
				return t.Context()
			}
			return metadata.AppendToOutgoingContext(t.Context(), "authorization", key)
		}
		for key, want := range map[string]codes.Code{"": codes.Unauthenticated, "Bearer wrong": codes.Unauthenticated, "sesame": codes.Unauthenticated, "Bearer sesame": codes.OK, "bearer sesame": codes.OK} {
			_, err := c.ModelInfer(with(key), textsRequest("emb", "a"))
			if got := status.Code(err); got != want {
				t.Errorf("exempt %v, authorization %q: infer %v (%v), want %v", exempt, key, got, err, want)
			}
		}
		open := codes.Unauthenticated
		if exempt {
			open = codes.OK
		}
		_, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
		if got := status.Code(err); got != open {
			t.Errorf("exempt %v: health without a key: %v, want %v", exempt, got, open)
		}
		if _, err := c.ServerLive(t.Context(), &pb.ServerLiveRequest{}); status.Code(err) != open {
			t.Errorf("exempt %v: ServerLive without a key: %v, want %v", exempt, err, open)
		}
		if _, err := c.ModelMetadata(t.Context(), &pb.ModelMetadataRequest{Name: "emb"}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("exempt %v: metadata without a key: %v", exempt, err)
		}
	}
}

// embRepo serves p as the embed model "emb".
type embRepo struct{ p Pipeline }

func (r embRepo) Acquire(string, models.Task) (Pipeline, string, func(), error) {
	return r.p, "emb", func() {}, nil
}
func (r embRepo) Describe() []ModelInfo                { return fakeRepo{}.Describe() }
func (r embRepo) Model(name string) (ModelInfo, error) { return modelIn(r.Describe(), name) }

// gRPC's infer takes one of the MaxInFlight slots, as HTTP's do: past them, RESOURCE_EXHAUSTED
// at once, counted in the request metrics under the method's name.
func TestGRPCInFlightCap(t *testing.T) {
	cfg := grpcTestConfig()
	cfg.MaxInFlight = 1
	reg := prometheus.NewRegistry()
	m := &blockingModel{fakeModel: fakeModel{task: models.TaskEmbed}, started: make(chan struct{}, 2), release: make(chan struct{})}
	s, c, _ := testGRPCServer(t, cfg, embRepo{m}, reg)
	done := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(t.Context(), textsRequest("emb", "a"))
		done <- err
	}()
	<-m.started
	var trailer metadata.MD
	_, err := c.ModelInfer(t.Context(), textsRequest("emb", "a"), grpc.Trailer(&trailer))
	if status.Code(err) != codes.ResourceExhausted || len(trailer.Get("retry-after-ms")) == 0 {
		t.Errorf("over the cap: %v, trailer %v", err, trailer)
	}
	close(m.release)
	if err := <-done; err != nil {
		t.Errorf("the admitted request: %v", err)
	}
	for _, labels := range [][]string{{"", "", pb.GRPCInferenceService_ModelInfer_FullMethodName, "429"}, {"emb", "v1", pb.GRPCInferenceService_ModelInfer_FullMethodName, "200"}} {
		if got := testutil.ToFloat64(s.metrics.requests.WithLabelValues(labels...)); got != 1 {
			t.Errorf("requests_total%v = %v, want 1", labels, got)
		}
	}
}

// A request whose deadline has passed when it is admitted is answered DEADLINE_EXCEEDED and
// never run; one whose deadline passes while it runs is answered DEADLINE_EXCEEDED too.
func TestGRPCDeadline(t *testing.T) {
	m := &blockingModel{fakeModel: fakeModel{task: models.TaskEmbed}, started: make(chan struct{}, 2), release: make(chan struct{})}
	s, c, _ := testGRPCServer(t, grpcTestConfig(), embRepo{m}, prometheus.NewRegistry())

	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Millisecond))
	defer cancel()
	ran := false
	_, err := s.grpcUnary(ctx, textsRequest("emb", "a"), &grpc.UnaryServerInfo{FullMethod: pb.GRPCInferenceService_ModelInfer_FullMethodName}, func(context.Context, any) (any, error) {
		ran = true
		return nil, nil
	})
	if status.Code(err) != codes.DeadlineExceeded || ran {
		t.Errorf("expired on arrival: %v, ran %v", err, ran)
	}
	if got := testutil.ToFloat64(s.metrics.requests.WithLabelValues("", "", pb.GRPCInferenceService_ModelInfer_FullMethodName, "504")); got != 1 {
		t.Errorf("requests_total{code=504} = %v", got)
	}

	ctx, cancel = context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	go func() { <-m.started }()
	if _, err := c.ModelInfer(ctx, textsRequest("emb", "a")); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("expired while running: %v", err)
	}
}

// Shutdown stops the gRPC server beside the HTTP one: a request in flight when it starts is
// answered, and once it returns the gRPC server takes no more.
func TestGRPCGracefulStop(t *testing.T) {
	m := &blockingModel{fakeModel: fakeModel{task: models.TaskEmbed}, started: make(chan struct{}, 2), release: make(chan struct{})}
	s := New(grpcTestConfig(), embRepo{m}, slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	gs, conn := grpcServe(t, s)
	c := pb.NewGRPCInferenceServiceClient(conn)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	front := NewFront(ln, s.Handler(), DefaultConn(), slog.New(slog.DiscardHandler))

	answered := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(t.Context(), textsRequest("emb", "a"))
		answered <- err
	}()
	<-m.started
	watch, err := healthpb.NewHealthClient(conn).Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	shut := make(chan error, 1)
	go func() {
		shut <- front.Shutdown(ShutdownPlan{Grace: 10 * time.Second, SetReady: s.SetReady, Abort: func(context.Context) error { return nil }, GRPC: gs})
	}()
	for { // released once shutdown has begun: readiness goes first
		r, err := watch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == healthpb.HealthCheckResponse_NOT_SERVING {
			break
		}
	}
	close(m.release)
	if err := <-answered; err != nil {
		t.Errorf("the request in flight: %v", err)
	}
	if err := <-shut; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if _, err := c.ServerLive(t.Context(), &pb.ServerLiveRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("after shutdown: %v, want UNAVAILABLE", err)
	}
}

// FuzzGRPCModelInfer sends whatever a fuzzed wire message decodes to as a ModelInfer request:
// the server answers OK only for a request it could serve and never fails with INTERNAL or
// UNKNOWN, whatever the message. The seeds are the bad messages of TestGRPCBadRequests'
// shapes and a good one; `go test` runs them, `go test -fuzz FuzzGRPCModelInfer` explores.
func FuzzGRPCModelInfer(f *testing.F) {
	good := textsRequest("emb", "a", "bb")
	for _, r := range []*pb.ModelInferRequest{
		good,
		{ModelName: "emb", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "text", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("a")}}}}},
		{ModelName: "emb", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "text", Datatype: "FP32", Shape: []int64{2}}}, RawInputContents: [][]byte{{1, 0, 0}}},
		{ModelName: "emb", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "text", Datatype: "BYTES", Shape: []int64{-1, 3}}}},
		{ModelName: "emb", Parameters: map[string]*pb.InferParameter{"truncate": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 3}}}},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	_, c, _ := testGRPCServer(f, grpcTestConfig(), fakeRepo{"emb": {task: models.TaskEmbed}}, prometheus.NewRegistry())
	f.Fuzz(func(t *testing.T, wire []byte) {
		var req pb.ModelInferRequest
		if proto.Unmarshal(wire, &req) != nil {
			return
		}
		resp, err := c.ModelInfer(t.Context(), &req)
		switch code := status.Code(err); code {
		case codes.OK:
			if len(resp.GetOutputs()) == 0 {
				t.Errorf("OK with no outputs for %v", &req)
			}
		case codes.InvalidArgument, codes.NotFound, codes.ResourceExhausted:
		default:
			t.Errorf("%v (%v) for %v; want OK, INVALID_ARGUMENT or NOT_FOUND", code, err, &req)
		}
	})
}
