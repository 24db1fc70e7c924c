package server

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/server/grpc/teipb"
)

// teiRepo serves a model of each task.
func teiRepo() fakeRepo {
	return fakeRepo{"emb": {task: models.TaskEmbed}, "cls": {task: models.TaskClassify}, "rr": {task: models.TaskRerank}, "spl": {task: models.TaskSparse}}
}

// teiClients are tei.v1's clients over one connection.
type teiClients struct {
	info     teipb.InfoClient
	embed    teipb.EmbedClient
	predict  teipb.PredictClient
	rerank   teipb.RerankClient
	tokenize teipb.TokenizeClient
}

func newTEIClients(conn *grpc.ClientConn) teiClients {
	return teiClients{teipb.NewInfoClient(conn), teipb.NewEmbedClient(conn), teipb.NewPredictClient(conn), teipb.NewRerankClient(conn), teipb.NewTokenizeClient(conn)}
}

func testTEIServer(t *testing.T, cfg Config, repo Repository, reg *prometheus.Registry) (*Server, teiClients) {
	t.Helper()
	s, _, conn := testGRPCServer(t, cfg, repo, reg)
	return s, newTEIClients(conn)
}

// Each method answers as its HTTP route does, with TEI's metadata.
func TestTEIGRPC(t *testing.T) {
	s, c := testTEIServer(t, grpcTestConfig(), teiRepo(), prometheus.NewRegistry())
	ctx := t.Context()
	ts := newHTTPServerOf(t, s)

	info, err := c.info.Info(ctx, &teipb.InfoRequest{})
	if err != nil || info.ModelId != "emb" || info.ModelType != teipb.ModelType_MODEL_TYPE_EMBEDDING || info.MaxClientBatchSize != 4 || info.MaxConcurrentRequests != 512 {
		t.Errorf("Info: %v %v", info, err)
	}

	emb, err := c.embed.Embed(ctx, &teipb.EmbedRequest{Inputs: "héllo", Normalize: true})
	if err != nil {
		t.Fatal(err)
	}
	var rest [][]float32
	_, body := post(t, ts+"/embed", `{"inputs":"héllo"}`)
	if err := json.Unmarshal([]byte(body), &rest); err != nil || !slices.Equal(emb.Embeddings, rest[0]) {
		t.Errorf("Embed %v, /embed %s (%v)", emb.Embeddings, body, err)
	}
	if md := emb.Metadata; md.ComputeChars != 5 || md.ComputeTokens != 1 || md.TotalTimeNs == 0 {
		t.Errorf("Embed metadata %v", md)
	}
	dims := uint32(2)
	if r, err := c.embed.Embed(ctx, &teipb.EmbedRequest{Inputs: "abc", Dimensions: &dims}); err != nil || !slices.Equal(r.Embeddings, []float32{3, 1}) {
		t.Errorf("Embed with dimensions 2, not normalized: %v %v", r, err)
	}

	sp, err := c.embed.EmbedSparse(ctx, &teipb.EmbedSparseRequest{Inputs: "abc"})
	if err != nil || len(sp.SparseEmbeddings) != 2 || sp.SparseEmbeddings[0].Index != 2 || sp.SparseEmbeddings[1].Value != 1.5 {
		t.Errorf("EmbedSparse: %v %v", sp, err)
	}
	all, err := c.embed.EmbedAll(ctx, &teipb.EmbedAllRequest{Inputs: "ab"})
	if err != nil || len(all.TokenEmbeddings) != 2 || !slices.Equal(all.TokenEmbeddings[1].Embeddings, []float32{'b', 1}) {
		t.Errorf("EmbedAll: %v %v", all, err)
	}

	pred, err := c.predict.Predict(ctx, &teipb.PredictRequest{Inputs: "abc", RawScores: true})
	if err != nil || len(pred.Predictions) != 2 || pred.Predictions[0].Label != "positive" || pred.Predictions[0].Score != 3 {
		t.Errorf("Predict: %v %v", pred, err)
	}
	pair, err := c.predict.PredictPair(ctx, &teipb.PredictPairRequest{Inputs: []string{"ab", "cde"}, RawScores: true})
	if err != nil || pair.Predictions[0].Score != 5 {
		t.Errorf("PredictPair: %v %v", pair, err)
	}

	rr, err := c.rerank.Rerank(ctx, &teipb.RerankRequest{Query: "a", Texts: []string{"bbb", "xa"}, RawScores: true, ReturnText: true})
	if err != nil || len(rr.Ranks) != 2 || rr.Ranks[0].Index != 1 || rr.Ranks[0].GetText() != "xa" || rr.Ranks[0].Score != 2 || rr.Ranks[1].Score != -3 {
		t.Errorf("Rerank: %v %v", rr, err)
	}
	if rr.GetMetadata().GetComputeTokens() != 7 || rr.GetMetadata().GetComputeChars() != 6 {
		t.Errorf("Rerank metadata %v", rr.GetMetadata())
	}

	tok, err := c.tokenize.Tokenize(ctx, &teipb.EncodeRequest{Inputs: "Hello world", AddSpecialTokens: true})
	if err != nil || len(tok.Tokens) != 4 || tok.Tokens[0].Id != 101 || tok.Tokens[0].Start != nil ||
		tok.Tokens[2].Text != "world" || tok.Tokens[2].GetStart() != 6 || tok.Tokens[2].GetStop() != 11 {
		t.Errorf("Tokenize: %v %v", tok, err)
	}
	if tok, err := c.tokenize.Tokenize(ctx, &teipb.EncodeRequest{Inputs: "Hello"}); err != nil || len(tok.Tokens) != 1 {
		t.Errorf("Tokenize without special tokens: %v %v", tok, err)
	}
	dec, err := c.tokenize.Decode(ctx, &teipb.DecodeRequest{Ids: []uint32{'h', 'i'}})
	if err != nil || dec.Text != "hi" {
		t.Errorf("Decode: %v %v", dec, err)
	}
}

// newHTTPServerOf serves s's HTTP face, for comparisons, and returns its URL.
func newHTTPServerOf(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	front := NewFront(ln, s.Handler(), DefaultConn(), slog.New(slog.DiscardHandler))
	t.Cleanup(func() { front.Close() })
	return "http://" + ln.Addr().String()
}

// A stream answers each message in order, each admitted and counted as a request of its
// own under the stream's method; a bad message ends it with its error, after the answers
// to those before it.
func TestTEIGRPCStreams(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, c := testTEIServer(t, grpcTestConfig(), teiRepo(), reg)
	ctx := t.Context()

	st, err := c.embed.EmbedStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"a", "bbb", "cc", ""}
	for _, text := range texts {
		if err := st.Send(&teipb.EmbedRequest{Inputs: text}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for _, text := range texts[:3] {
		r, err := st.Recv()
		if err != nil || r.Embeddings[0] != float32(len(text)) {
			t.Fatalf("EmbedStream %q: %v %v", text, r, err)
		}
	}
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("EmbedStream's empty message: %v, want INVALID_ARGUMENT", err)
	}
	method := teipb.Embed_EmbedStream_FullMethodName
	if got := testutil.ToFloat64(s.metrics.requests.WithLabelValues("emb", "v1", method, "200")); got != 3 {
		t.Errorf("%s: %v requests counted with 200, want 3", method, got)
	}

	dst, err := c.tokenize.DecodeStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ids := range [][]uint32{{'h', 'i'}, {'y', 'o'}} {
		if err := dst.Send(&teipb.DecodeRequest{Ids: ids}); err != nil {
			t.Fatal(err)
		}
		if r, err := dst.Recv(); err != nil || r.Text != string(rune(ids[0]))+string(rune(ids[1])) {
			t.Errorf("DecodeStream %v: %v %v", ids, r, err)
		}
	}
	if err := dst.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("DecodeStream after CloseSend: %v, want EOF", err)
	}

	rst, err := c.rerank.RerankStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*teipb.RerankStreamRequest{{Query: "a", Text: "xa", RawScores: true}, {Query: "a", Text: "bbb"}, {Query: "b", Text: "bbb"}} {
		if err := rst.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	rr, err := rst.CloseAndRecv()
	var order []uint32
	for _, r := range rr.GetRanks() {
		order = append(order, r.Index)
	}
	if err != nil || !slices.Equal(order, []uint32{2, 0, 1}) || rr.Ranks[0].Score != 3 {
		t.Errorf("RerankStream: %v %v, order %v, want [2 0 1]", rr, err, order)
	}

	for name, run := range map[string]func() error{
		"PredictStream": func() error {
			ps, err := c.predict.PredictStream(ctx)
			if err != nil {
				return err
			}
			for _, text := range []string{"a", "bb"} {
				if err := ps.Send(&teipb.PredictRequest{Inputs: text}); err != nil {
					return err
				}
				if _, err := ps.Recv(); err != nil {
					return err
				}
			}
			return ps.CloseSend()
		},
		"TokenizeStream": func() error {
			ts, err := c.tokenize.TokenizeStream(ctx)
			if err != nil {
				return err
			}
			if err := ts.Send(&teipb.EncodeRequest{Inputs: "a b"}); err != nil {
				return err
			}
			if r, err := ts.Recv(); err != nil || len(r.Tokens) != 2 {
				return status.Errorf(codes.Unknown, "tokens %v, err %v", r, err)
			}
			return ts.CloseSend()
		},
	} {
		if err := run(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A message the server cannot serve is INVALID_ARGUMENT, never OK or INTERNAL: empty
// inputs, bad options, past the limits, and a method for a task no model here does (tei.v1
// names no model).
func TestTEIGRPCBadMessages(t *testing.T) {
	_, c := testTEIServer(t, grpcTestConfig(), teiRepo(), prometheus.NewRegistry())
	_, embOnly := testTEIServer(t, grpcTestConfig(), fakeRepo{"emb": {task: models.TaskEmbed}}, prometheus.NewRegistry())
	ctx := t.Context()
	zero, four := uint32(0), uint32(4)
	for name, call := range map[string]func() error{
		"Embed empty": func() error { _, err := c.embed.Embed(ctx, &teipb.EmbedRequest{}); return err },
		"Embed dimensions 0": func() error {
			_, err := c.embed.Embed(ctx, &teipb.EmbedRequest{Inputs: "a", Dimensions: &zero})
			return err
		},
		"Embed dimensions over": func() error {
			_, err := c.embed.Embed(ctx, &teipb.EmbedRequest{Inputs: "a", Dimensions: &four})
			return err
		},
		"Embed unknown prompt": func() error {
			p := "nope"
			_, err := c.embed.Embed(ctx, &teipb.EmbedRequest{Inputs: "a", PromptName: &p})
			return err
		},
		"EmbedAll empty": func() error { _, err := c.embed.EmbedAll(ctx, &teipb.EmbedAllRequest{}); return err },
		"Predict empty":  func() error { _, err := c.predict.Predict(ctx, &teipb.PredictRequest{}); return err },
		"PredictPair three": func() error {
			_, err := c.predict.PredictPair(ctx, &teipb.PredictPairRequest{Inputs: []string{"a", "b", "c"}})
			return err
		},
		"Rerank no texts": func() error { _, err := c.rerank.Rerank(ctx, &teipb.RerankRequest{Query: "a"}); return err },
		"Rerank past the limit": func() error {
			_, err := c.rerank.Rerank(ctx, &teipb.RerankRequest{Query: "a", Texts: []string{"1", "2", "3", "4", "5"}})
			return err
		},
		"Tokenize empty":    func() error { _, err := c.tokenize.Tokenize(ctx, &teipb.EncodeRequest{}); return err },
		"Decode unknown id": func() error { _, err := c.tokenize.Decode(ctx, &teipb.DecodeRequest{Ids: []uint32{300}}); return err },
		"Predict without a classifier": func() error {
			_, err := embOnly.predict.Predict(ctx, &teipb.PredictRequest{Inputs: "a"})
			return err
		},
		"Rerank without a reranker": func() error {
			_, err := embOnly.rerank.Rerank(ctx, &teipb.RerankRequest{Query: "a", Texts: []string{"b"}})
			return err
		},
		"EmbedSparse without SPLADE": func() error {
			_, err := embOnly.embed.EmbedSparse(ctx, &teipb.EmbedSparseRequest{Inputs: "a"})
			return err
		},
		"RerankStream with no message": func() error {
			st, err := c.rerank.RerankStream(ctx)
			if err != nil {
				return err
			}
			_, err = st.CloseAndRecv()
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
}

// The streams are guarded by the API key as the unary methods are.
func TestTEIGRPCAuth(t *testing.T) {
	cfg := grpcTestConfig()
	cfg.APIKeys = []string{"sesame"}
	_, c := testTEIServer(t, cfg, teiRepo(), prometheus.NewRegistry())
	if _, err := c.embed.Embed(t.Context(), &teipb.EmbedRequest{Inputs: "a"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Embed without a key: %v", err)
	}
	st, err := c.embed.EmbedStream(t.Context())
	if err == nil {
		_ = st.Send(&teipb.EmbedRequest{Inputs: "a"}) // may fail once the server has ended the stream
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("EmbedStream without a key: %v", err)
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer sesame")
	st, err = c.embed.EmbedStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&teipb.EmbedRequest{Inputs: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Errorf("EmbedStream with the key: %v", err)
	}
}

// GracefulStop ends an idle TEI stream (UNAVAILABLE) rather than wait for its client, but
// not the message in progress.
func TestTEIGRPCStreamDrains(t *testing.T) {
	s := New(grpcTestConfig(), teiRepo(), slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	gs, conn := grpcServe(t, s)
	st, err := teipb.NewEmbedClient(conn).EmbedStream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&teipb.EmbedRequest{Inputs: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("an idle stream at shutdown: %v, want UNAVAILABLE", err)
	}
	<-stopped
}

// The generated code is that of tei.proto as checked in: a message's descriptor names
// TEI's package, and a field keeps TEI's number.
func TestTEIProtoNames(t *testing.T) {
	d := (&teipb.EmbedRequest{}).ProtoReflect().Descriptor()
	if d.FullName() != "tei.v1.EmbedRequest" || d.Fields().ByName("prompt_name").Number() != 5 || d.Fields().ByName("truncation_direction").Number() != 4 {
		t.Errorf("EmbedRequest: %v", d.FullName())
	}
	b, err := proto.Marshal(&teipb.RerankRequest{ReturnText: true})
	if err != nil || !slices.Equal(b, []byte{5 << 3, 1}) {
		t.Errorf("return_text on the wire: %x %v, want field 5", b, err)
	}
}
