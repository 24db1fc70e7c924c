package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ortserve/ortserve/models"
)

// sameAsMarshal checks that got and gotErr are what json.Marshal(v) gives: the same bytes, or
// an error with the same message.
func sameAsMarshal(t *testing.T, what string, v any, got []byte, gotErr error) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	switch {
	case wantErr != nil || gotErr != nil:
		if wantErr == nil || gotErr == nil || gotErr.Error() != wantErr.Error() {
			t.Errorf("%s: error %v, json.Marshal's %v", what, gotErr, wantErr)
		}
	case !bytes.Equal(got, want):
		t.Errorf("%s:\n got  %s\n want %s", what, got, want)
	}
}

func checkFloat32(t *testing.T, f float32) {
	t.Helper()
	got, err := appendFloat32([]byte("x"), f) // appends: the prefix stays
	if err == nil {
		if got[0] != 'x' {
			t.Fatalf("%#x: prefix lost", math.Float32bits(f))
		}
		got = got[1:]
	}
	sameAsMarshal(t, fmt.Sprintf("float32 bits %#08x", math.Float32bits(f)), f, got, err)
}

func TestAppendFloat32(t *testing.T) {
	next := func(f float32, dir float64) float32 { return math.Nextafter32(f, float32(dir)) }
	for _, f := range []float32{
		0, float32(math.Copysign(0, -1)), 1, -1, 0.1, -0.1, 1.0 / 3, 0.5, 100, 123456789, 1e20, -1e20,
		1e-6, next(1e-6, 0), next(1e-6, 1), -1e-6, next(-1e-6, 0), // the small cutoff, both sides
		1e21, next(1e21, 0), next(1e21, math.Inf(1)), -1e21, // the large cutoff
		1e-7, 1.5e-9, 1e-10, 1e-45, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32,
		math.MaxFloat32, -math.MaxFloat32, 1e38, 3.4e38, 16777216, 16777217, 0.000123,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0x7fc00001), math.Float32frombits(0xffc00000), math.Float32frombits(0x7f800001), // NaNs
	} {
		checkFloat32(t, f)
	}
	// encoding/json refuses NaN and the infinities; so must the appender, in the same words.
	for _, f := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		if _, err := appendFloat32(nil, f); err == nil || !strings.HasPrefix(err.Error(), "json: unsupported value: ") {
			t.Errorf("%v: error %v", f, err)
		}
	}
}

// TestAppendFloat32Sampled compares with json.Marshal on bit patterns spread evenly over all
// 2^32 (every sign, exponent and many mantissas), plus every pattern near the exponent
// boundaries' edges in the mantissa.
func TestAppendFloat32Sampled(t *testing.T) {
	stride := uint32(16411) // prime: the low mantissa bits vary too
	if testing.Short() {
		stride = 1<<20 + 7
	}
	n := 0
	for bits := uint64(0); bits < 1<<32; bits += uint64(stride) {
		checkFloat32(t, math.Float32frombits(uint32(bits)))
		n++
	}
	for exp := range uint32(256) {
		for _, mant := range []uint32{0, 1, 2, 1<<23 - 2, 1<<23 - 1} {
			checkFloat32(t, math.Float32frombits(exp<<23|mant))
			checkFloat32(t, math.Float32frombits(1<<31|exp<<23|mant))
			n += 2
		}
	}
	t.Logf("%d bit patterns", n)
}

// TestPow10Sig recomputes ftoa.go's table of powers of ten exactly.
func TestPow10Sig(t *testing.T) {
	for i, got := range pow10Sig {
		e := i - 31
		ten := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(max(e, -e))), nil)
		x := new(big.Rat).SetInt(ten)
		if e < 0 {
			x.Inv(x)
		}
		shift := 63 - (e*1741647)>>19 // 63 − ⌊log2 10^e⌋
		two := new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), uint(max(shift, -shift))))
		if shift >= 0 {
			x.Mul(x, two)
		} else {
			x.Quo(x, two)
		}
		want := new(big.Int).Quo(x.Num(), x.Denom())
		want.Add(want, big.NewInt(1))
		if !want.IsUint64() || want.Uint64() != got || got < 1<<63 {
			t.Errorf("1e%d: %#x, want %#x", e, got, want)
		}
	}
}

// jsonFloat32 is encoding/json's float32 encoder (floatEncoder in encode.go of Go 1.26) for
// values it accepts: json.Marshal without the reflection, fast enough to run 2^32 times.
func jsonFloat32(b []byte, f float32) []byte {
	format := byte('f')
	if abs := float32(math.Abs(float64(f))); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, float64(f), format, -1, 32)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1]
		b = b[:n-1]
	}
	return b
}

// TestAppendFloat32All compares appendFloat32 with encoding/json's float32 encoding on every
// one of the 2^32 bit patterns (NaNs and infinities must fail). It takes about 10 CPU minutes,
// so it runs only when asked: ORTSERVE_FLOAT32_ALL=1 go test -run Float32All ./server
func TestAppendFloat32All(t *testing.T) {
	if os.Getenv("ORTSERVE_FLOAT32_ALL") == "" {
		t.Skip("set ORTSERVE_FLOAT32_ALL=1 to check all 2^32 float32 bit patterns")
	}
	var wg sync.WaitGroup
	var bad atomic.Int64
	workers := runtime.GOMAXPROCS(0)
	for w := range workers {
		wg.Go(func() {
			var want, got []byte
			for hi := uint32(w); hi < 1<<16; hi += uint32(workers) {
				for lo := range uint32(1 << 16) {
					f := math.Float32frombits(hi<<16 | lo)
					var err error
					got, err = appendFloat32(got[:0], f)
					if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
						if err == nil {
							t.Errorf("%#08x: no error", hi<<16|lo)
							bad.Add(1)
						}
						continue
					}
					if want = jsonFloat32(want[:0], f); err != nil || !bytes.Equal(got, want) {
						if bad.Add(1) <= 20 {
							t.Errorf("%#08x: got %s (%v), want %s", hi<<16|lo, got, err, want)
						}
					}
				}
			}
		})
	}
	wg.Wait()
	t.Logf("all 2^32 bit patterns, %d differ", bad.Load())
}

func FuzzAppendFloat32(f *testing.F) {
	for _, bits := range []uint32{0, 0x80000000, 0x3f800000, 0x358637bd, 0x7f7fffff, 0x7f800000, 0x7fc00000, 1} {
		f.Add(bits)
	}
	f.Fuzz(func(t *testing.T, bits uint32) {
		checkFloat32(t, math.Float32frombits(bits))
	})
}

// floatsFrom reads data as little-endian float32s.
func floatsFrom(data []byte) []float32 {
	v := make([]float32, len(data)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return v
}

// FuzzAppendEmbeddings holds /embed's and /v1/embeddings' bodies to json.Marshal's for any
// floats, split into rows of any width.
func FuzzAppendEmbeddings(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x3f, 0xbd, 0x37, 0x86, 0x35}, uint8(1))
	f.Add([]byte{0, 0, 0xc0, 0x7f}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, width uint8) {
		v := floatsFrom(data)
		var rows [][]float32
		for w := max(1, int(width)); len(v) > 0; v = v[min(w, len(v)):] {
			rows = append(rows, v[:min(w, len(v))])
		}
		got, err := appendEmbeddings(nil, rows)
		sameAsMarshal(t, "embeddings", rows, got, err)
		resp := OpenAIEmbeddingResponse{Object: "list", Model: "m/v"}
		for i, r := range rows {
			resp.Data = append(resp.Data, OpenAIEmbedding{Object: "embedding", Index: i, Embedding: r})
		}
		got, err = appendOpenAIResponse(nil, &resp)
		sameAsMarshal(t, "openai", resp, got, err)
	})
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "positive", `a"b\c`, "<&>", "\x00\x1f\x7f", "é", "\u2028\u2029", "\xff\xfe", "a\tb\nc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := appendString([]byte("x"), s)
		if err == nil {
			got = got[1:]
		}
		sameAsMarshal(t, fmt.Sprintf("string %q", s), s, got, err)
	})
}

// oldBase64 is how /v1/embeddings encoded base64 vectors before appendBase64Floats: the whole
// vector's bytes at once.
func oldBase64(v []float32) string {
	buf := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(buf)
}

func TestAppendBase64Floats(t *testing.T) {
	// Every length up to past three 12-float chunks: each chunk boundary and padding case.
	for n := range 40 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(i)*0.37 - 3
		}
		want, _ := json.Marshal(oldBase64(v))
		if got := appendBase64Floats([]byte("x"), v); string(got) != "x"+string(want) {
			t.Errorf("%d floats:\n got  %s\n want x%s", n, got, want)
		}
		got, err := json.Marshal(base64Floats(v))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%d floats: MarshalJSON %s, %v", n, got, err)
		}
	}
}

// TestAppendResponses holds every response appender to json.Marshal on the same value,
// including the shapes the handlers never make (nil slices, fields of other types) and strings
// that need escaping.
func TestAppendResponses(t *testing.T) {
	nan := float32(math.NaN())
	odd := "tab\there <b>&amp;</b> \"quoted\" \\ é \u2028 \xff"
	vec := []float32{0.1, -0.25, 1e-7, 3e21, 0, float32(math.Copysign(0, -1)), 1.0 / 3}
	embeds := []struct {
		name string
		v    [][]float32
	}{
		{"nil", nil},
		{"empty", [][]float32{}},
		{"one", [][]float32{vec}},
		{"rows", [][]float32{vec, {}, nil, {42}}},
		{"NaN", [][]float32{vec, {1, nan}}},
		{"Inf", [][]float32{{float32(math.Inf(-1))}}},
	}
	for _, tt := range embeds {
		got, err := appendEmbeddings(nil, tt.v)
		sameAsMarshal(t, "embeddings "+tt.name, tt.v, got, err)
	}

	preds := [][]Prediction{
		{{Score: 0.75, Label: "positive"}, {Score: 0.25, Label: "negative"}},
		{{Score: 1e-9, Label: odd}},
		{},
		nil,
		{{Score: nan, Label: "x"}},
	}
	for i, ps := range preds {
		got, err := appendPredictions(nil, ps)
		sameAsMarshal(t, fmt.Sprintf("predictions %d", i), ps, got, err)
	}
	for _, rows := range [][][]Prediction{nil, {}, preds[:3], preds} {
		got, err := appendPredictionRows(nil, rows)
		sameAsMarshal(t, fmt.Sprintf("prediction rows %d", len(rows)), rows, got, err)
	}

	openai := []OpenAIEmbeddingResponse{
		{Object: "list", Data: []OpenAIEmbedding{{Object: "embedding", Index: 0, Embedding: vec}, {Object: "embedding", Index: 1, Embedding: []float32{1}}},
			Model: "minilm/fp32", Usage: OpenAIUsage{PromptTokens: 12, TotalTokens: 12}},
		{Object: "list", Data: []OpenAIEmbedding{{Object: "embedding", Index: 0, Embedding: base64Floats(vec)}}, Model: odd},
		{Object: "list", Data: []OpenAIEmbedding{{Object: odd, Index: -3, Embedding: nil}, {Embedding: []float32(nil)}, {Embedding: "a string"}, {Embedding: map[string]int{"b": 2, "a": 1}}}},
		{Object: "list", Data: []OpenAIEmbedding{{Embedding: []float32{nan}}}},
		{Object: "list", Data: []OpenAIEmbedding{{Embedding: []any{math.Inf(1)}}}},
		{},
	}
	for i, r := range openai {
		got, err := appendOpenAIResponse(nil, &r)
		sameAsMarshal(t, fmt.Sprintf("openai %d", i), r, got, err)
	}

	infer := []InferResponse{
		{ModelName: "minilm", ModelVersion: "fp32", Outputs: []InferOutput{{Name: "embedding", Shape: []int64{2, 3}, Datatype: "FP32", Data: []float32{1, 2, 3, 0.4, 0.5, 0.6}}}},
		{ModelName: "sentiment", ModelVersion: "int8", ID: "req-7", Outputs: []InferOutput{
			{Name: "probabilities", Shape: []int64{1, 2}, Datatype: "FP32", Data: []float32{0.25, 0.75}},
			{Name: "label", Shape: []int64{1}, Datatype: "BYTES", Data: []string{"positive"}},
		}},
		{ModelName: odd, ModelVersion: odd, ID: odd, Outputs: []InferOutput{{Name: odd, Datatype: odd, Data: []string{odd, ""}}}},
		{Outputs: []InferOutput{{Data: nil}, {Data: []string(nil)}, {Data: []float32(nil)}, {Data: []int{1, 2}}, {Shape: []int64{}}}},
		{Outputs: []InferOutput{{Data: []float32{float32(math.Inf(1))}}}},
		{Outputs: []InferOutput{}},
		{ModelName: "minilm", ModelVersion: "fp32", Outputs: []InferOutput{ // binary data: kserve_binary.go
			{Name: "probabilities", Shape: []int64{1, 2}, Datatype: "FP32", Parameters: &OutputParameters{BinaryDataSize: 8}},
			{Name: "label", Shape: []int64{1}, Datatype: "BYTES", Parameters: &OutputParameters{}, Data: []string{"x"}},
		}},
		{},
	}
	for i, r := range infer {
		got, err := appendInferResponse(nil, &r)
		sameAsMarshal(t, fmt.Sprintf("infer %d", i), r, got, err)
	}
}

// nanModel embeds and classifies every text to NaNs, as a broken model version would.
type nanModel struct{ *fakeModel }

func (nanModel) Embed(context.Context, string, []string, models.EmbedOptions) ([][]float32, models.Stats, error) {
	return [][]float32{{0.5, float32(math.NaN())}}, models.Stats{Version: "v1"}, nil
}

func (nanModel) Classify(context.Context, string, []string, models.ClassifyOptions) ([][]float32, models.Stats, error) {
	return [][]float32{{float32(math.NaN()), 1}}, models.Stats{Version: "v1", Labels: []string{"negative", "positive"}}, nil
}

func (n nanModel) ClassifyPairs(ctx context.Context, version string, _ []models.Input, o models.ClassifyOptions) ([][]float32, models.Stats, error) {
	return n.Classify(ctx, version, nil, o)
}

func (nanModel) Rerank(context.Context, string, string, []string, models.RerankOptions) ([]float32, models.Stats, error) {
	return []float32{0.5, float32(math.NaN())}, models.Stats{Version: "v1"}, nil
}

type nanRepo struct{ fakeRepo }

func (nanRepo) Acquire(string, models.Task) (Pipeline, string, func(), error) {
	return nanModel{&fakeModel{}}, "emb", func() {}, nil
}

// TestNaNResponses: an output that JSON cannot carry is the 500 it was with encoding/json,
// in each API's error shape, with no part of a success body before it.
func TestNaNResponses(t *testing.T) {
	s := New(DefaultConfig(), nanRepo{}, slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	h := s.Handler()
	const msg = "encoding the response: json: unsupported value: NaN"
	for _, tt := range []struct{ path, body, want string }{
		{"/embed", `{"inputs":"a"}`, `{"error":"` + msg + `","error_type":"Backend"}`},
		{"/predict", `{"inputs":"a"}`, `{"error":"` + msg + `","error_type":"Backend"}`},
		{"/predict", `{"inputs":[["a"]]}`, `{"error":"` + msg + `","error_type":"Backend"}`},
		{"/v1/embeddings", `{"input":"a"}`, `{"error":{"message":"` + msg + `","type":"server_error","param":null,"code":null}}`},
		{"/v1/embeddings", `{"input":"a","encoding_format":"base64"}`, ""}, // base64 carries NaN's bits
		{"/v2/models/emb/infer", `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}]}`, `{"error":"` + msg + `"}`},
		{"/rerank", `{"query":"q","texts":["a","b"]}`, `{"error":"inference failed: the score of text 1 is NaN","error_type":"Backend"}`},
		{"/v1/rerank", `{"query":"q","documents":["a","b"]}`, `{"error":{"message":"inference failed: the score of text 1 is NaN","type":"server_error","param":null,"code":null}}`},
	} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(tt.body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(w, req)
		if tt.want == "" {
			if w.Code != http.StatusOK {
				t.Errorf("%s %s: %d %s", tt.path, tt.body, w.Code, w.Body)
			}
			continue
		}
		if w.Code != http.StatusInternalServerError || w.Body.String() != tt.want+"\n" || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d %q\nwant 500 %q", tt.path, tt.body, w.Code, w.Body, tt.want)
		}
	}
}

// TestPooledBuffersNotShared: answers written one after another from the pool each carry
// their own body, large ones (not pooled) included.
func TestPooledBuffersNotShared(t *testing.T) {
	for _, n := range []int{1, 3, 100000, 2} {
		v := make([][]float32, 1)
		v[0] = make([]float32, n)
		for i := range v[0] {
			v[0][i] = float32(n)
		}
		w := httptest.NewRecorder()
		writeEncoded(w, nil, http.StatusOK, v, appendEmbeddings)
		want, _ := json.Marshal(v)
		if w.Body.String() != string(want)+"\n" {
			t.Errorf("%d floats: body differs (%d bytes, want %d)", n, w.Body.Len(), len(want)+1)
		}
	}
}

func benchVectors(rows int) [][]float32 {
	v := make([][]float32, rows)
	for i := range v {
		v[i] = make([]float32, 384)
		for j := range v[i] {
			v[i][j] = float32((i*384+j)%997)/997 - 0.5
		}
		models.Normalize(v[i])
	}
	return v
}

// BenchmarkEncodeEmbeddings is /embed's body for MiniLM vectors: encoding/json against the
// appender.
func BenchmarkEncodeEmbeddings(b *testing.B) {
	for _, rows := range []int{1, 32} {
		v := benchVectors(rows)
		b.Run(fmt.Sprintf("enc=json/rows=%d", rows), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := json.Marshal(v); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("enc=append/rows=%d", rows), func(b *testing.B) {
			b.ReportAllocs()
			w := httptest.NewRecorder()
			for b.Loop() {
				w.Body.Reset()
				writeEncoded(w, nil, http.StatusOK, v, appendEmbeddings)
			}
		})
	}
}
