//go:build cgo && ort

package main

import (
	"errors"
	"io"
	"math"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ortserve/ortserve/server/grpc/teipb"
)

// A client generated from tei.proto, against `server serve --grpc-addr` on the real
// minilm, sentiment and reranker: Embed, EmbedStream, Predict, Rerank and Tokenize answer
// what /embed, /predict, /rerank and /tokenize answer.
func TestTEIGRPCClient(t *testing.T) {
	root := rerankerAndSentiment(t)
	if err := writeVersionRepo(root, "minilm", "fp32"); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	url := startServer(t, "--models", root, "--grpc-addr", addr)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := t.Context()
	texts := []string{"The quick brown fox.", "I loved this film!", "Paris is the capital of France."}

	t.Run("Embed and EmbedStream", func(t *testing.T) {
		var rest [][]float32
		if resp := postJSON(t, url+"/embed", map[string]any{"inputs": texts}, &rest); resp.StatusCode != 200 || len(rest) != len(texts) {
			t.Fatalf("/embed: %d, %d vectors", resp.StatusCode, len(rest))
		}
		c := teipb.NewEmbedClient(conn)
		one, err := c.Embed(ctx, &teipb.EmbedRequest{Inputs: texts[0], Normalize: true})
		if err != nil {
			t.Fatal(err)
		}
		if cos := cosine(one.Embeddings, rest[0]); len(one.Embeddings) != 384 || cos < 0.9999 {
			t.Errorf("Embed: %d dims, cosine %.7f with /embed", len(one.Embeddings), cos)
		}
		if md := one.Metadata; md.ComputeChars != uint32(len(texts[0])) || md.ComputeTokens == 0 || md.InferenceTimeNs == 0 || md.TotalTimeNs < md.InferenceTimeNs {
			t.Errorf("Embed metadata %v", md)
		}
		st, err := c.EmbedStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range texts {
			if err := st.Send(&teipb.EmbedRequest{Inputs: text, Normalize: true}); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		for i := range texts {
			r, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if cos := cosine(r.Embeddings, rest[i]); cos < 0.9999 {
				t.Errorf("EmbedStream message %d: cosine %.7f with /embed", i, cos)
			}
		}
		if _, err := st.Recv(); !errors.Is(err, io.EOF) {
			t.Errorf("EmbedStream's end: %v", err)
		}
	})

	t.Run("Predict", func(t *testing.T) {
		var rest []struct {
			Score float32 `json:"score"`
			Label string  `json:"label"`
		}
		if resp := postJSON(t, url+"/predict", map[string]any{"inputs": texts[1]}, &rest); resp.StatusCode != 200 {
			t.Fatalf("/predict: %d", resp.StatusCode)
		}
		r, err := teipb.NewPredictClient(conn).Predict(ctx, &teipb.PredictRequest{Inputs: texts[1]})
		if err != nil || len(r.Predictions) != len(rest) {
			t.Fatalf("Predict: %v %v, /predict %+v", r, err, rest)
		}
		for i, p := range r.Predictions {
			if p.Label != rest[i].Label || math.Abs(float64(p.Score-rest[i].Score)) > 1e-5 {
				t.Errorf("Predict %d: %v, /predict %+v", i, p, rest[i])
			}
		}
	})

	t.Run("Rerank", func(t *testing.T) {
		const query = "What is the capital of France?"
		var rest []rank
		if resp := postJSON(t, url+"/rerank", map[string]any{"query": query, "texts": texts}, &rest); resp.StatusCode != 200 {
			t.Fatalf("/rerank: %d", resp.StatusCode)
		}
		r, err := teipb.NewRerankClient(conn).Rerank(ctx, &teipb.RerankRequest{Query: query, Texts: texts, ReturnText: true})
		if err != nil || len(r.Ranks) != len(rest) {
			t.Fatalf("Rerank: %v %v, /rerank %+v", r, err, rest)
		}
		for i, rk := range r.Ranks {
			if int(rk.Index) != rest[i].Index || rk.GetText() != texts[rk.Index] || math.Abs(float64(rk.Score)-rest[i].Score) > 1e-5 {
				t.Errorf("Rerank %d: %v, /rerank %+v", i, rk, rest[i])
			}
		}
		if r.Ranks[0].Index != 2 {
			t.Errorf("Rerank: text %d first, want 2 (Paris)", r.Ranks[0].Index)
		}
	})

	t.Run("Tokenize", func(t *testing.T) {
		var rest [][]struct {
			ID      uint32 `json:"id"`
			Text    string `json:"text"`
			Special bool   `json:"special"`
			Start   *int   `json:"start"`
			Stop    *int   `json:"stop"`
		}
		if resp := postJSON(t, url+"/tokenize", map[string]any{"inputs": texts[0]}, &rest); resp.StatusCode != 200 || len(rest) != 1 {
			t.Fatalf("/tokenize: %d", resp.StatusCode)
		}
		r, err := teipb.NewTokenizeClient(conn).Tokenize(ctx, &teipb.EncodeRequest{Inputs: texts[0], AddSpecialTokens: true})
		if err != nil || len(r.Tokens) != len(rest[0]) {
			t.Fatalf("Tokenize: %v %v, /tokenize %+v", r, err, rest)
		}
		offset := func(p *int) *uint32 {
			if p == nil {
				return nil
			}
			v := uint32(*p)
			return &v
		}
		for i, tok := range r.Tokens {
			want := rest[0][i]
			if tok.Id != want.ID || tok.Text != want.Text || tok.Special != want.Special ||
				!slices.Equal(optional(tok.Start), optional(offset(want.Start))) || !slices.Equal(optional(tok.Stop), optional(offset(want.Stop))) {
				t.Errorf("token %d: %v, /tokenize %+v", i, tok, want)
			}
		}
	})
}

// optional is an optional field as a slice, empty when unset, for comparison.
func optional(p *uint32) []uint32 {
	if p == nil {
		return nil
	}
	return []uint32{*p}
}

// TestTEIGRPCPythonClient drives tei.v1 with a Python client generated from the proto
// (scripts/clients/tei_grpc.py, grpcio in the clients venv): Embed, EmbedStream, Predict,
// Rerank and Tokenize answer as /embed, /predict, /rerank and /tokenize do.
func TestTEIGRPCPythonClient(t *testing.T) {
	root := rerankerAndSentiment(t)
	if err := writeVersionRepo(root, "minilm", "fp32"); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	url := startServer(t, "--models", root, "--grpc-addr", addr)
	texts := []string{"The quick brown fox.", "I loved this film!", "Paris is the capital of France.", "What is the capital of France?"}
	var got struct {
		Embed   []float32   `json:"embed"`
		Stream  [][]float32 `json:"stream"`
		Predict []prediction
		Rerank  []struct {
			Index int     `json:"index"`
			Score float64 `json:"score"`
			Text  string  `json:"text"`
		} `json:"rerank"`
		Tokens []struct {
			ID      int64  `json:"id"`
			Text    string `json:"text"`
			Special bool   `json:"special"`
		} `json:"tokens"`
	}
	runClient(t, "tei_grpc.py", texts, &got, addr)

	var emb [][]float32
	postJSON(t, url+"/embed", map[string]any{"inputs": texts}, &emb)
	if len(got.Stream) != len(texts) || cosine(got.Embed, emb[0]) < 0.9999 {
		t.Fatalf("Embed: cosine %.7f with /embed; EmbedStream: %d answers for %d texts", cosine(got.Embed, emb[0]), len(got.Stream), len(texts))
	}
	for i, v := range got.Stream {
		if c := cosine(v, emb[i]); c < 0.9999 {
			t.Errorf("EmbedStream message %d: cosine %.7f with /embed", i, c)
		}
	}
	preds := predictRows(t, url, texts[1:2], false)[0]
	if len(got.Predict) != len(preds) {
		t.Fatalf("Predict: %+v, /predict %+v", got.Predict, preds)
	}
	for i, p := range got.Predict {
		if p.Label != preds[i].Label || math.Abs(float64(p.Score-preds[i].Score)) > 1e-5 {
			t.Errorf("Predict %d: %+v, /predict %+v", i, p, preds[i])
		}
	}
	var ranks []rank
	postJSON(t, url+"/rerank", map[string]any{"query": texts[3], "texts": texts}, &ranks)
	if len(got.Rerank) != len(ranks) {
		t.Fatalf("Rerank: %+v, /rerank %+v", got.Rerank, ranks)
	}
	for i, r := range got.Rerank {
		if r.Index != ranks[i].Index || r.Text != texts[r.Index] || math.Abs(r.Score-ranks[i].Score) > 1e-5 {
			t.Errorf("Rerank %d: %+v, /rerank %+v", i, r, ranks[i])
		}
	}
	var toks [][]struct {
		ID      int64  `json:"id"`
		Text    string `json:"text"`
		Special bool   `json:"special"`
	}
	postJSON(t, url+"/tokenize", map[string]any{"inputs": texts[0]}, &toks)
	if len(toks) != 1 || len(got.Tokens) != len(toks[0]) {
		t.Fatalf("Tokenize: %+v, /tokenize %+v", got.Tokens, toks)
	}
	for i, tok := range got.Tokens {
		if tok != toks[0][i] {
			t.Errorf("Tokenize %d: %+v, /tokenize %+v", i, tok, toks[0][i])
		}
	}
}
