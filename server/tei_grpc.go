package server

// text-embeddings-inference's gRPC API (package tei.v1), as a client generated from TEI's
// proto speaks it, on the same gRPC server as KServe's: Info, Embed, Predict, Rerank and
// Tokenize. Each method does its HTTP route's work, through the same code (onModel and the
// *On functions), on the first model that does the route's task, as a TEI route without
// "model" does: TEI's gRPC names no model.
//
// proto3 cannot tell an unset bool from false, so the bools mean what TEI's gRPC makes
// them mean: truncate false is the server's auto_truncate; normalize, raw_scores,
// return_text, add_special_tokens and skip_special_tokens are as sent (a client that wants
// normalized vectors sets normalize, as TEI's own clients do).
//
// A stream answers its messages in order, each admitted as a call of its own (grpcInfer:
// the in-flight cap, a deadline, metrics and a span per message), so that a long stream
// holds no slot between its messages. Its first refused message ends it, with that
// message's status. RerankStream, whose answer is one, collects its texts and is then
// admitted once, as an HTTP body is read before it holds a slot.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/server/grpc/teipb"
)

// teiPackage is tei.v1's proto package: its methods' full names start "/tei.v1.".
const teiPackage = "tei.v1"

// drainKey's value in a TEI stream's context is a channel closed when the server shuts
// down: the stream then ends before its next message.
type drainKey struct{}

// registerTEI serves tei.v1's services on gs.
func registerTEI(gs *grpc.Server, s *Server) {
	teipb.RegisterInfoServer(gs, teiInfo{s: s})
	teipb.RegisterEmbedServer(gs, teiEmbed{s: s})
	teipb.RegisterPredictServer(gs, teiPredict{s: s})
	teipb.RegisterRerankServer(gs, teiRerank{s: s})
	teipb.RegisterTokenizeServer(gs, teiTokenize{s: s})
}

// teiStream answers a stream's messages in order, each as serve answers the unary method,
// admitted as a call of its own under method. It ends when the client closes its side, at
// the first error, or, between two messages, when the server shuts down.
func teiStream[Req, Resp any](s *Server, ss grpc.BidiStreamingServer[Req, Resp], method string, serve func(context.Context, *Req) (*Resp, error)) error {
	ctx := ss.Context()
	draining, _ := ctx.Value(drainKey{}).(<-chan struct{})
	type received struct {
		req *Req
		err error
	}
	next := make(chan received)
	done := make(chan struct{})
	defer close(done)
	go func() { // Recv blocks: read here, so that shutdown can end an idle stream.
		for {
			req, err := ss.Recv()
			select {
			case next <- received{req, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	handler := func(ctx context.Context, req any) (any, error) { return serve(ctx, req.(*Req)) }
	for {
		var m received
		select {
		case m = <-next:
		case <-draining:
			return s.grpcError(ctx, method, &requestError{code: http.StatusServiceUnavailable, kind: "Unhealthy", msg: "the server is shutting down: send the rest of the stream to another replica"})
		}
		if errors.Is(m.err, io.EOF) {
			return nil
		}
		if m.err != nil {
			return m.err
		}
		resp, err := s.grpcInfer(ctx, method, m.req, handler)
		if err != nil {
			return err
		}
		if err := ss.Send(resp.(*Resp)); err != nil {
			return err
		}
	}
}

// teiMetadata is TEI's Metadata of a request: the characters of its texts, the tokens it
// computed, and its times.
func teiMetadata(texts []string, st models.Stats, start time.Time) *teipb.Metadata {
	chars := 0
	for _, t := range texts {
		chars += utf8.RuneCountInString(t)
	}
	return &teipb.Metadata{
		ComputeChars:       uint32(chars),
		ComputeTokens:      uint32(st.Tokens),
		TotalTimeNs:        uint64(time.Since(start)),
		TokenizationTimeNs: uint64(st.Tokenize),
		QueueTimeNs:        uint64(st.Queue),
		InferenceTimeNs:    uint64(st.Inference),
	}
}

// teiTruncate is truncate as the server reads a request's: false (proto3's unset) is the
// server's auto_truncate.
func teiTruncate(truncate bool) *bool {
	if truncate {
		return &truncate
	}
	return nil
}

func teiLeft(d teipb.TruncationDirection) bool {
	return d == teipb.TruncationDirection_TRUNCATION_DIRECTION_LEFT
}

// teiTexts holds one message's texts to the limits, as checkInputs does; an empty text is
// refused, as TEI refuses it, for it is most likely a message whose inputs were not set.
func (s *Server) teiTexts(field string, texts []string, truncate bool) error {
	if err := teiNonEmpty(field, texts); err != nil {
		return err
	}
	return s.inputsError(texts, truncate)
}

// teiEmbedding is an embedding message's one text, held to the limits, and its options
// (embedOptionsOf).
func (s *Server) teiEmbedding(inputs string, truncate bool, normalize *bool, dir teipb.TruncationDirection, prompt string, dims *int) ([]string, models.EmbedOptions, error) {
	opts, err := s.embedOptionsOf(teiTruncate(truncate), normalize, teiLeft(dir), prompt, dims)
	if err != nil {
		return nil, opts, err
	}
	texts := []string{inputs}
	return texts, opts, s.teiTexts("inputs", texts, opts.Truncate)
}

// teiNonEmpty refuses an empty text.
func teiNonEmpty(field string, texts []string) error {
	if slices.Contains(texts, "") {
		return &requestError{code: http.StatusUnprocessableEntity, kind: "Empty", msg: field + " is empty: send the text"}
	}
	return nil
}

// teiModel names the task's model in the error of a server that serves none: tei.v1 has no
// model field, so asking is no mistake of a name but of the method, INVALID_ARGUMENT.
func teiModel(err error, task models.Task, method string) error {
	if errors.Is(err, models.ErrUnknownModel) {
		return &requestError{code: http.StatusBadRequest, kind: "Validation", msg: "this server serves no " + string(task) + " model, which " + method + " needs: see Info or /info for what it serves"}
	}
	return err
}

// teiInfo serves tei.v1.Info.
type teiInfo struct {
	teipb.UnimplementedInfoServer
	s *Server
}

// Info describes the model a TEI client is served: the first embedding model, else the
// first model (firstModel).
func (t teiInfo) Info(context.Context, *teipb.InfoRequest) (*teipb.InfoResponse, error) {
	out := &teipb.InfoResponse{
		Version:               t.s.cfg.Info.Version,
		ModelDtype:            "float32",
		MaxConcurrentRequests: uint32(cap(t.s.inFlight)),
		MaxClientBatchSize:    uint32(t.s.cfg.MaxInputs),
	}
	name := t.s.firstModel(models.TaskEmbed)
	if name == "" {
		return out, nil
	}
	mi, err := t.s.repo.Model(name)
	if err != nil {
		return nil, err
	}
	out.ModelId, out.MaxInputLength = mi.Name, uint32(mi.MaxLength)
	switch models.Task(mi.Task) {
	case models.TaskClassify:
		out.ModelType = teipb.ModelType_MODEL_TYPE_CLASSIFIER
	case models.TaskRerank:
		out.ModelType = teipb.ModelType_MODEL_TYPE_RERANKER
	}
	return out, nil
}

// teiEmbed serves tei.v1.Embed: /embed, /embed_sparse and /embed_all, a text a message.
type teiEmbed struct {
	teipb.UnimplementedEmbedServer
	s *Server
}

func (t teiEmbed) Embed(ctx context.Context, req *teipb.EmbedRequest) (*teipb.EmbedResponse, error) {
	start := time.Now()
	var dims *int
	if req.Dimensions != nil {
		d := int(req.GetDimensions())
		dims = &d
	}
	normalize := req.GetNormalize()
	texts, opts, err := t.s.teiEmbedding(req.GetInputs(), req.GetTruncate(), &normalize, req.GetTruncationDirection(), req.GetPromptName(), dims)
	if err != nil {
		return nil, err
	}
	vecs, _, st, err := onModel(ctx, t.s, "", models.TaskEmbed, func(ctx context.Context, p Pipeline) ([][]float32, models.Stats, error) {
		return p.Embed(ctx, "", texts, opts)
	})
	if err != nil {
		return nil, teiModel(err, models.TaskEmbed, "Embed")
	}
	return &teipb.EmbedResponse{Embeddings: vecs[0], Metadata: teiMetadata(texts, st, start)}, nil
}

func (t teiEmbed) EmbedStream(ss grpc.BidiStreamingServer[teipb.EmbedRequest, teipb.EmbedResponse]) error {
	return teiStream(t.s, ss, teipb.Embed_EmbedStream_FullMethodName, t.Embed)
}

func (t teiEmbed) EmbedSparse(ctx context.Context, req *teipb.EmbedSparseRequest) (*teipb.EmbedSparseResponse, error) {
	start := time.Now()
	texts, opts, err := t.s.teiEmbedding(req.GetInputs(), req.GetTruncate(), nil, req.GetTruncationDirection(), req.GetPromptName(), nil)
	if err != nil {
		return nil, err
	}
	vecs, _, st, err := t.s.sparseOn(ctx, "", "", texts, opts)
	if err != nil {
		return nil, err
	}
	out := &teipb.EmbedSparseResponse{Metadata: teiMetadata(texts, st, start)}
	for _, v := range vecs[0] {
		out.SparseEmbeddings = append(out.SparseEmbeddings, &teipb.SparseValue{Index: v.Index, Value: v.Value})
	}
	return out, nil
}

func (t teiEmbed) EmbedSparseStream(ss grpc.BidiStreamingServer[teipb.EmbedSparseRequest, teipb.EmbedSparseResponse]) error {
	return teiStream(t.s, ss, teipb.Embed_EmbedSparseStream_FullMethodName, t.EmbedSparse)
}

func (t teiEmbed) EmbedAll(ctx context.Context, req *teipb.EmbedAllRequest) (*teipb.EmbedAllResponse, error) {
	start := time.Now()
	texts, opts, err := t.s.teiEmbedding(req.GetInputs(), req.GetTruncate(), nil, req.GetTruncationDirection(), req.GetPromptName(), nil)
	if err != nil {
		return nil, err
	}
	vecs, _, st, err := onModel(ctx, t.s, "", models.TaskEmbed, func(ctx context.Context, p Pipeline) ([][][]float32, models.Stats, error) {
		return p.EmbedAll(ctx, "", texts, opts)
	})
	if err != nil {
		return nil, teiModel(err, models.TaskEmbed, "EmbedAll")
	}
	out := &teipb.EmbedAllResponse{Metadata: teiMetadata(texts, st, start)}
	for _, v := range vecs[0] {
		out.TokenEmbeddings = append(out.TokenEmbeddings, &teipb.TokenEmbedding{Embeddings: v})
	}
	return out, nil
}

func (t teiEmbed) EmbedAllStream(ss grpc.BidiStreamingServer[teipb.EmbedAllRequest, teipb.EmbedAllResponse]) error {
	return teiStream(t.s, ss, teipb.Embed_EmbedAllStream_FullMethodName, t.EmbedAll)
}

// teiPredict serves tei.v1.Predict: /predict, a text or a pair a message.
type teiPredict struct {
	teipb.UnimplementedPredictServer
	s *Server
}

func (t teiPredict) Predict(ctx context.Context, req *teipb.PredictRequest) (*teipb.PredictResponse, error) {
	return t.predict(ctx, []string{req.GetInputs()}, req.GetTruncate(), req.GetRawScores(), req.GetTruncationDirection())
}

func (t teiPredict) PredictPair(ctx context.Context, req *teipb.PredictPairRequest) (*teipb.PredictResponse, error) {
	if n := len(req.GetInputs()); n != 1 && n != 2 {
		return nil, &requestError{code: http.StatusUnprocessableEntity, kind: "Validation", msg: "inputs has " + strconv.Itoa(n) + " texts: send one text or a pair of two"}
	}
	return t.predict(ctx, req.GetInputs(), req.GetTruncate(), req.GetRawScores(), req.GetTruncationDirection())
}

// predict is /predict's work on one input: a text, or a pair of texts.
func (t teiPredict) predict(ctx context.Context, seq []string, truncate, raw bool, dir teipb.TruncationDirection) (*teipb.PredictResponse, error) {
	start := time.Now()
	trunc := t.s.truncate(teiTruncate(truncate))
	if err := teiNonEmpty("inputs", seq[:1]); err != nil {
		return nil, err
	}
	inputs, err := t.s.predictInputsOf(PredictInputs{Seqs: [][]string{seq}, Single: true}, trunc)
	if err != nil {
		return nil, err
	}
	rows, _, st, err := onModel(ctx, t.s, "", models.TaskClassify, predictOn("", inputs, models.ClassifyOptions{Truncate: trunc, Left: teiLeft(dir), Raw: raw}))
	if err != nil {
		return nil, teiModel(err, models.TaskClassify, "Predict")
	}
	out := &teipb.PredictResponse{Metadata: teiMetadata(seq, st, start)}
	for _, p := range rows[0] {
		out.Predictions = append(out.Predictions, &teipb.Prediction{Score: p.Score, Label: p.Label})
	}
	return out, nil
}

func (t teiPredict) PredictStream(ss grpc.BidiStreamingServer[teipb.PredictRequest, teipb.PredictResponse]) error {
	return teiStream(t.s, ss, teipb.Predict_PredictStream_FullMethodName, t.Predict)
}

func (t teiPredict) PredictPairStream(ss grpc.BidiStreamingServer[teipb.PredictPairRequest, teipb.PredictResponse]) error {
	return teiStream(t.s, ss, teipb.Predict_PredictPairStream_FullMethodName, t.PredictPair)
}

// teiRerank serves tei.v1.Rerank: /rerank.
type teiRerank struct {
	teipb.UnimplementedRerankServer
	s *Server
}

func (t teiRerank) Rerank(ctx context.Context, req *teipb.RerankRequest) (*teipb.RerankResponse, error) {
	start := time.Now()
	truncate := t.s.truncate(teiTruncate(req.GetTruncate()))
	query, texts, err := t.s.rerankInputs(req.GetQuery(), req.GetTexts(), "texts", truncate)
	if err != nil {
		return nil, err
	}
	opts := models.RerankOptions{Truncate: truncate, Left: teiLeft(req.GetTruncationDirection()), Raw: req.GetRawScores()}
	ranks, _, st, err := onModel(ctx, t.s, "", models.TaskRerank, rankOn("", query, texts, req.GetTexts(), req.GetReturnText(), opts))
	if err != nil {
		return nil, teiModel(err, models.TaskRerank, "Rerank")
	}
	return &teipb.RerankResponse{Ranks: teiRanks(ranks), Metadata: teiMetadata(append([]string{query}, texts...), st, start)}, nil
}

// RerankStream ranks the texts of its messages, a text a message, against their queries
// (each message's own; most streams send one), and answers once, when the client closes
// its side. raw_scores, return_text, truncate and truncation_direction are the first
// message's. Its texts are counted against max_client_batch_size as one request's.
func (t teiRerank) RerankStream(ss grpc.ClientStreamingServer[teipb.RerankStreamRequest, teipb.RerankResponse]) error {
	var msgs []*teipb.RerankStreamRequest
	for {
		m, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
	}
	ctx := ss.Context()
	resp, err := t.s.grpcInfer(ctx, teipb.Rerank_RerankStream_FullMethodName, msgs, func(ctx context.Context, _ any) (any, error) {
		return t.rerankStream(ctx, msgs)
	})
	if err != nil {
		return err
	}
	return ss.SendAndClose(resp.(*teipb.RerankResponse))
}

func (t teiRerank) rerankStream(ctx context.Context, msgs []*teipb.RerankStreamRequest) (*teipb.RerankResponse, error) {
	start := time.Now()
	first := &teipb.RerankStreamRequest{}
	if len(msgs) > 0 {
		first = msgs[0]
	}
	truncate := t.s.truncate(teiTruncate(first.GetTruncate()))
	opts := models.RerankOptions{Truncate: truncate, Left: teiLeft(first.GetTruncationDirection()), Raw: first.GetRawScores()}
	sent := make([]string, len(msgs))
	for i, m := range msgs {
		sent[i] = m.GetText()
	}
	if err := t.s.countError(len(sent), "texts"); err != nil {
		return nil, err
	}
	// The messages by query, in the order of each query's first message.
	var queries []string
	byQuery := map[string][]int{}
	for i, m := range msgs {
		q := m.GetQuery()
		if _, ok := byQuery[q]; !ok {
			queries = append(queries, q)
		}
		byQuery[q] = append(byQuery[q], i)
	}
	ranks, _, st, err := onModel(ctx, t.s, "", models.TaskRerank, func(ctx context.Context, p Pipeline) ([]Rank, models.Stats, error) {
		var all []Rank
		var total models.Stats
		for _, q := range queries {
			idx := byQuery[q]
			group := make([]string, len(idx))
			for j, i := range idx {
				group[j] = sent[i]
			}
			query, texts, err := t.s.rerankInputs(q, group, "texts", truncate)
			if err != nil {
				return nil, total, err
			}
			ranks, st, err := rankOn("", query, texts, group, first.GetReturnText(), opts)(ctx, p)
			if err != nil {
				return nil, total, err
			}
			for _, r := range ranks {
				r.Index = idx[r.Index]
				all = append(all, r)
			}
			total.Version, total.Tokens = st.Version, total.Tokens+st.Tokens
			total.Tokenize, total.Queue, total.Inference = total.Tokenize+st.Tokenize, total.Queue+st.Queue, total.Inference+st.Inference
		}
		slices.SortStableFunc(all, func(a, b Rank) int { return cmpDesc(a.Score, b.Score) })
		return all, total, nil
	})
	if err != nil {
		return nil, teiModel(err, models.TaskRerank, "RerankStream")
	}
	return &teipb.RerankResponse{Ranks: teiRanks(ranks), Metadata: teiMetadata(append(queries, sent...), st, start)}, nil
}

func teiRanks(ranks []Rank) []*teipb.Rank {
	out := make([]*teipb.Rank, len(ranks))
	for i, r := range ranks {
		out[i] = &teipb.Rank{Index: uint32(r.Index), Text: r.Text, Score: r.Score}
	}
	return out
}

// teiTokenize serves tei.v1.Tokenize: /tokenize and /decode.
type teiTokenize struct {
	teipb.UnimplementedTokenizeServer
	s *Server
}

func (t teiTokenize) Tokenize(ctx context.Context, req *teipb.EncodeRequest) (*teipb.EncodeResponse, error) {
	texts := []string{req.GetInputs()}
	// As /tokenize, it follows the server's auto_truncate.
	if err := t.s.teiTexts("inputs", texts, t.s.cfg.AutoTruncate); err != nil {
		return nil, err
	}
	toks, _, _, err := onModel(ctx, t.s, "", models.TaskEmbed, t.s.tokensOn(texts, req.GetAddSpecialTokens(), req.GetPromptName()))
	if err != nil {
		return nil, teiModel(err, models.TaskEmbed, "Tokenize")
	}
	out := &teipb.EncodeResponse{}
	for _, tok := range toks[0] {
		st := &teipb.SimpleToken{Id: uint32(tok.ID), Text: tok.Text, Special: tok.Special}
		if tok.Start != nil {
			start, stop := uint32(*tok.Start), uint32(*tok.Stop)
			st.Start, st.Stop = &start, &stop
		}
		out.Tokens = append(out.Tokens, st)
	}
	return out, nil
}

func (t teiTokenize) TokenizeStream(ss grpc.BidiStreamingServer[teipb.EncodeRequest, teipb.EncodeResponse]) error {
	return teiStream(t.s, ss, teipb.Tokenize_TokenizeStream_FullMethodName, t.Tokenize)
}

// Decode is /decode's work for one list of ids, on the first embedding model, else the
// first model.
func (t teiTokenize) Decode(ctx context.Context, req *teipb.DecodeRequest) (*teipb.DecodeResponse, error) {
	texts, _, _, err := onModel(ctx, t.s, t.s.firstModel(models.TaskEmbed), models.TaskEmbed, decodeOn([][]int64{widen(req.GetIds())}, req.GetSkipSpecialTokens()))
	if err != nil {
		return nil, teiModel(err, models.TaskEmbed, "Decode")
	}
	return &teipb.DecodeResponse{Text: texts[0]}, nil
}

func (t teiTokenize) DecodeStream(ss grpc.BidiStreamingServer[teipb.DecodeRequest, teipb.DecodeResponse]) error {
	return teiStream(t.s, ss, teipb.Tokenize_DecodeStream_FullMethodName, t.Decode)
}
