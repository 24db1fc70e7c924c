package server

// serve's gRPC face: KServe v2's inference service (kserve_grpc.go) and grpc.health.v1, on
// the same serving path as HTTP: the API keys, the in-flight cap, deadlines, the request
// metrics and classify's error mapping.

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ortserve/ortserve/runtime"
	pb "github.com/ortserve/ortserve/server/grpc/inferencepb"
	"github.com/ortserve/ortserve/server/grpc/teipb"
)

// grpcAdmitted are the unary methods that run a model: admitted, deadlined and counted in
// the request metrics (route label: the method's full name) as HTTP's inference routes
// are. A stream's messages are admitted one by one, under the stream's method (teiStream).
var grpcAdmitted = map[string]bool{
	pb.GRPCInferenceService_ModelInfer_FullMethodName: true,
	teipb.Embed_Embed_FullMethodName:                  true,
	teipb.Embed_EmbedSparse_FullMethodName:            true,
	teipb.Embed_EmbedAll_FullMethodName:               true,
	teipb.Predict_Predict_FullMethodName:              true,
	teipb.Predict_PredictPair_FullMethodName:          true,
	teipb.Rerank_Rerank_FullMethodName:                true,
	teipb.Tokenize_Tokenize_FullMethodName:            true,
	teipb.Tokenize_Decode_FullMethodName:              true,
}

// grpcAuthExempt are the methods --auth-exempt opens, by the name the flag takes, as
// authExempt does HTTP's routes.
var grpcAuthExempt = map[string][]string{
	"health": {
		healthpb.Health_Check_FullMethodName, healthpb.Health_Watch_FullMethodName, healthpb.Health_List_FullMethodName,
		pb.GRPCInferenceService_ServerLive_FullMethodName, pb.GRPCInferenceService_ServerReady_FullMethodName,
	},
}

// newHealth is grpc.health.v1's state, not serving until SetReady(true).
func newHealth() *health.Server {
	h := health.NewServer()
	setHealth(h, false)
	return h
}

// setHealth says, for the server ("") and each inference service, whether they serve.
func setHealth(h *health.Server, ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range []string{"", pb.GRPCInferenceService_ServiceDesc.ServiceName, teipb.Info_ServiceDesc.ServiceName,
		teipb.Embed_ServiceDesc.ServiceName, teipb.Predict_ServiceDesc.ServiceName, teipb.Rerank_ServiceDesc.ServiceName, teipb.Tokenize_ServiceDesc.ServiceName} {
		h.SetServingStatus(name, st)
	}
}

// GRPCServer is the server's gRPC face: a grpc.Server whose GracefulStop first ends the
// streams that would never end by themselves (grpc.health.v1's Watch), so that it waits for
// the requests in flight only.
type GRPCServer struct {
	*grpc.Server
	endStreams context.CancelFunc
	streams    context.Context
}

// GracefulStop ends the streams, then stops as grpc.Server's does. A watcher has been told
// NOT_SERVING by then: readiness goes first (Front.Shutdown).
func (g *GRPCServer) GracefulStop() {
	g.endStreams()
	g.Server.GracefulStop()
}

// GRPC is the server's gRPC face, to Serve on a listener: KServe v2's inference service,
// TEI's tei.v1 services (tei_grpc.go) and grpc.health.v1. A message is bounded by MaxBodyBytes, as a body is (past it, gRPC's own
// RESOURCE_EXHAUSTED).
func (s *Server) GRPC() *GRPCServer {
	g := &GRPCServer{}
	g.streams, g.endStreams = context.WithCancel(context.Background())
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(s.grpcUnary), grpc.ChainStreamInterceptor(s.grpcStream(g.streams))}
	if s.cfg.MaxBodyBytes > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(int(min(s.cfg.MaxBodyBytes, 1<<31-1))))
	}
	g.Server = grpc.NewServer(opts...)
	pb.RegisterGRPCInferenceServiceServer(g.Server, kserveGRPC{s: s})
	registerTEI(g.Server, s)
	healthpb.RegisterHealthServer(g.Server, s.grpcHealth)
	return g
}

// grpcUnary is admit and authorize for gRPC: the API key; then, for the methods that run a
// model (grpcAdmitted), grpcInfer. Every error a method returns leaves through grpcError.
func (s *Server) grpcUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.grpcAuthorize(ctx, info.FullMethod); err != nil {
		return nil, s.grpcError(ctx, info.FullMethod, err)
	}
	if grpcAdmitted[info.FullMethod] {
		return s.grpcInfer(ctx, info.FullMethod, req, handler)
	}
	resp, err := handler(ctx, req)
	if err != nil {
		return nil, s.grpcError(ctx, info.FullMethod, err)
	}
	return resp, nil
}

// grpcInfer serves one inference request, a unary call or one message of a stream, as
// admit does an HTTP one: its metrics and span (under method), the in-flight cap
// (RESOURCE_EXHAUSTED at once past it), and its deadline: the client's (grpc-timeout),
// else --request-timeout. A request whose deadline has passed by the time it holds a slot
// is not run. Its error is a gRPC status.
func (s *Server) grpcInfer(ctx context.Context, method string, req any, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	ri := &reqInfo{}
	code := http.StatusOK
	defer func() { s.metrics.observe(method, ri.model, ri.version, code, ri.stats, time.Since(start)) }()
	if t := s.cfg.Tracing; t != nil {
		var span trace.Span
		ctx, span = t.startGRPC(ctx, method)
		defer func() { endGRPC(span, code, ri) }()
	}
	resp, err := s.grpcAdmit(ctx, ri, req, handler)
	if err != nil {
		p := s.grpcProblem(ctx, method, err)
		code = p.code
		return nil, grpcStatus(p)
	}
	return resp, nil
}

func (s *Server) grpcAdmit(ctx context.Context, ri *reqInfo, req any, handler grpc.UnaryHandler) (any, error) {
	select {
	case s.inFlight <- struct{}{}:
		defer func() { <-s.inFlight }()
	default:
		return nil, &requestError{code: http.StatusTooManyRequests, kind: "Overloaded", retry: time.Second, msg: overloadedMessage(cap(s.inFlight))}
	}
	s.metrics.inFlight.Inc()
	defer s.metrics.inFlight.Dec()
	ctx = runtime.WithArrival(context.WithValue(ctx, infoKey{}, ri), time.Now())
	if _, ok := ctx.Deadline(); !ok && s.cfg.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.RequestTimeout)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// grpcStream guards the streaming methods (grpc.health.v1's Watch, tei.v1's streams) with
// the API key, and ends them when streams ends.
//
//nolint:contextcheck // a stream's context is its ServerStream's: gRPC passes no other
func (s *Server) grpcStream(streams context.Context) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := s.grpcAuthorize(ss.Context(), info.FullMethod); err != nil {
			return s.grpcError(ss.Context(), info.FullMethod, err)
		}
		if strings.HasPrefix(info.FullMethod, "/"+teiPackage+".") {
			// A TEI stream carries requests: shutdown ends it between two of them
			// (teiStream), never during one.
			return handler(srv, endingStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), drainKey{}, streams.Done())})
		}
		ctx, cancel := context.WithCancel(ss.Context())
		defer cancel()
		defer context.AfterFunc(streams, cancel)()
		return handler(srv, endingStream{ServerStream: ss, ctx: ctx})
	}
}

// endingStream is a stream with a context of its own.
type endingStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (e endingStream) Context() context.Context { return e.ctx }

// grpcAuthorize is authorize for gRPC: the key comes in the metadata "authorization: Bearer
// KEY" (or "api-key: KEY"), checked against the same keys.
func (s *Server) grpcAuthorize(ctx context.Context, method string) error {
	if len(s.keys) == 0 {
		return nil
	}
	for _, name := range s.cfg.AuthExempt {
		if slices.Contains(grpcAuthExempt[name], method) {
			return nil
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(key string) string {
		if v := md.Get(key); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	key := bearerOf(first("authorization"), first("api-key"))
	if s.keys.allows(key) {
		return nil
	}
	msg := "missing API key: send the metadata authorization: Bearer KEY"
	if key != "" {
		msg = "invalid API key: send one of the server's --api-key keys as the metadata authorization: Bearer KEY"
	}
	return &requestError{code: http.StatusUnauthorized, kind: "Unauthorized", msg: msg}
}

// grpcError is fail for gRPC: err as classify maps it, with the gRPC code of its status.
func (s *Server) grpcError(ctx context.Context, method string, err error) error {
	return grpcStatus(s.grpcProblem(ctx, method, err))
}

// grpcProblem classifies err, logs what the client cannot act on, and tells a refused
// client when to retry, in the trailer retry-after-ms.
func (s *Server) grpcProblem(ctx context.Context, method string, err error) problem {
	p := classify(ctx, http.StatusUnprocessableEntity, err)
	if p.code == http.StatusInternalServerError {
		s.log.ErrorContext(ctx, "request failed", "method", method, "err", err)
	}
	if p.retry > 0 {
		// Fails only when the stream is gone, and then nobody reads the trailer.
		_ = grpc.SetTrailer(ctx, metadata.Pairs("retry-after-ms", strconv.FormatInt(int64((p.retry+time.Millisecond-1)/time.Millisecond), 10)))
	}
	return p
}

// grpcStatus is a problem as a gRPC status: the code that matches its HTTP status, and its
// message.
func grpcStatus(p problem) error {
	return status.Error(grpcCode(p.code), p.msg)
}

// grpcCode maps classify's HTTP status to gRPC's code: every refusal of a request's content
// (400, 413, 415, 422, 424) is INVALID_ARGUMENT, overload RESOURCE_EXHAUSTED, a passed
// deadline DEADLINE_EXCEEDED, shutting down or a failed load UNAVAILABLE; only a failure
// of the server's own is INTERNAL.
func grpcCode(httpCode int) codes.Code {
	switch httpCode {
	case http.StatusOK:
		return codes.OK
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType,
		http.StatusUnprocessableEntity, http.StatusFailedDependency:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case statusClientGone:
		return codes.Canceled
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	}
	return codes.Internal
}

// overloadedMessage is the refusal past the in-flight cap.
func overloadedMessage(limit int) string {
	return "the server is at its limit of " + strconv.Itoa(limit) + " requests in flight: retry after a second"
}

// bearerOf is the key in an Authorization value ("Bearer KEY", the scheme in any case), else
// the api-key value.
func bearerOf(authorization, apiKey string) string {
	if len(authorization) > 7 && strings.EqualFold(authorization[:7], "bearer ") {
		return strings.TrimSpace(authorization[7:])
	}
	return apiKey
}
