package server

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"sync"
)

// The inference responses are mostly float32s: 384 of them per MiniLM vector. Written by
// encoding/json they are a large share of the serving path's CPU besides inference
// (docs/performance.md, "Per-request overhead"); the appenders below write the same bytes
// straight into a pooled buffer, the floats with appendFloat32 (ftoa.go). Each appender is a
// transcription of what encoding/json does for its type, and encode_test.go holds them to json.Marshal byte for
// byte, errors included. Anything they do not know (a value of another type in an `any`
// field) goes through json.Marshal.

// bufPool holds response buffers. Buffers grown past maxPooledBuf by a large request are
// dropped rather than kept, so the pool never pins more than a few of those.
var bufPool = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledBuf = 256 << 10

// writeBody answers code with body, whole, of contentType. It says the body's length: a
// body past net/http's 2 KiB buffer (one MiniLM vector is 4.7 KB of JSON) would otherwise go
// chunked, without a Content-Length for clients and proxies to size it by.
func writeBody(w http.ResponseWriter, code int, contentType string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	w.Write(body)
}

// writeEncoded answers code with the JSON body that appendJSON appends for v, and a newline,
// as writeJSON does; when appendJSON fails (a NaN or an infinity in the output), it answers
// writeJSON's 500. The body goes through a pooled buffer: http.ResponseWriter's Write does
// not keep it.
func writeEncoded[T any](w http.ResponseWriter, r *http.Request, code int, v T, appendJSON func([]byte, T) ([]byte, error)) {
	bp := bufPool.Get().(*[]byte)
	b, err := appendJSON((*bp)[:0], v)
	if err == nil {
		b = append(b, '\n')
		writeBody(w, code, "application/json", b)
	}
	if cap(b) <= maxPooledBuf {
		*bp = b[:0]
		bufPool.Put(bp)
	}
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "Backend", "encoding the response: "+err.Error())
	}
}

// unsupportedFloat is json.Marshal's error for a NaN or an infinity.
func unsupportedFloat(f float32) error {
	return &json.UnsupportedValueError{Value: reflect.ValueOf(f), Str: strconv.FormatFloat(float64(f), 'g', -1, 32)}
}

// appendFloat32s appends v as a JSON array; nil is null, as json.Marshal writes it.
func appendFloat32s(b []byte, v []float32) ([]byte, error) {
	if v == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	for i, f := range v {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendFloat32(b, f); err != nil {
			return b, err
		}
	}
	return append(b, ']'), nil
}

// appendList appends xs as a JSON array, each element by elem; a nil slice is null, as
// encoding/json writes it. (appendFloat32s keeps its own loop: it is the inner one.)
func appendList[T any](b []byte, xs []T, elem func([]byte, T) ([]byte, error)) ([]byte, error) {
	if xs == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = elem(b, x); err != nil {
			return b, err
		}
	}
	return append(b, ']'), nil
}

// appendEmbeddings appends /embed's body: one array per text.
func appendEmbeddings(b []byte, vecs [][]float32) ([]byte, error) {
	return appendList(b, vecs, appendFloat32s)
}

// appendPredictions appends one text's /predict answer: [{"score":…,"label":…},…].
func appendPredictions(b []byte, ps []Prediction) ([]byte, error) {
	return appendList(b, ps, appendPrediction)
}

func appendPrediction(b []byte, p Prediction) ([]byte, error) {
	b = append(b, `{"score":`...)
	var err error
	if b, err = appendFloat32(b, p.Score); err != nil {
		return b, err
	}
	b = append(b, `,"label":`...)
	if b, err = appendString(b, p.Label); err != nil {
		return b, err
	}
	return append(b, '}'), nil
}

// appendPredictionRows appends a batch's /predict answer: one list of predictions per text.
func appendPredictionRows(b []byte, rows [][]Prediction) ([]byte, error) {
	return appendList(b, rows, appendPredictions)
}

// appendOpenAIResponse appends a /v1/embeddings body.
func appendOpenAIResponse(b []byte, r *OpenAIEmbeddingResponse) ([]byte, error) {
	var err error
	b = append(b, `{"object":`...)
	if b, err = appendString(b, r.Object); err != nil {
		return b, err
	}
	b = append(b, `,"data":`...)
	if b, err = appendList(b, r.Data, appendOpenAIEmbedding); err != nil {
		return b, err
	}
	b = append(b, `,"model":`...)
	if b, err = appendString(b, r.Model); err != nil {
		return b, err
	}
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(r.Usage.PromptTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(r.Usage.TotalTokens), 10)
	return append(b, "}}"...), nil
}

func appendOpenAIEmbedding(b []byte, d OpenAIEmbedding) ([]byte, error) {
	var err error
	b = append(b, `{"object":`...)
	if b, err = appendString(b, d.Object); err != nil {
		return b, err
	}
	b = append(b, `,"index":`...)
	b = strconv.AppendInt(b, int64(d.Index), 10)
	b = append(b, `,"embedding":`...)
	switch e := d.Embedding.(type) {
	case []float32:
		b, err = appendFloat32s(b, e)
	case base64Floats:
		b = appendBase64Floats(b, e)
	default:
		b, err = appendMarshal(b, e)
	}
	if err != nil {
		return b, err
	}
	return append(b, '}'), nil
}

// base64Floats is an embedding in OpenAI's base64 format: its little-endian float32 bytes,
// base64-encoded, as numpy.frombuffer(base64.b64decode(s), dtype="float32") reads them.
type base64Floats []float32

// MarshalJSON writes the JSON string appendOpenAIResponse writes.
func (v base64Floats) MarshalJSON() ([]byte, error) { return appendBase64Floats(nil, v), nil }

// appendBase64Floats appends v as a base64 JSON string (no escaping needed: the standard
// alphabet is plain ASCII without '"', '\\' or HTML's specials). It encodes 12 floats at a
// time from a stack buffer: 48 bytes are a whole number of 3-byte groups, so the chunks'
// encodings join into the encoding of the whole.
func appendBase64Floats(b []byte, v []float32) []byte {
	var chunk [48]byte
	b = append(b, '"')
	for len(v) > 0 {
		n := min(len(v), len(chunk)/4)
		for i, f := range v[:n] {
			binary.LittleEndian.PutUint32(chunk[4*i:], math.Float32bits(f))
		}
		b = base64.StdEncoding.AppendEncode(b, chunk[:4*n])
		v = v[n:]
	}
	return append(b, '"')
}

// appendInferResponse appends a KServe v2 infer body.
func appendInferResponse(b []byte, r *InferResponse) ([]byte, error) {
	var err error
	b = append(b, `{"model_name":`...)
	if b, err = appendString(b, r.ModelName); err != nil {
		return b, err
	}
	b = append(b, `,"model_version":`...)
	if b, err = appendString(b, r.ModelVersion); err != nil {
		return b, err
	}
	if r.ID != "" {
		b = append(b, `,"id":`...)
		if b, err = appendString(b, r.ID); err != nil {
			return b, err
		}
	}
	b = append(b, `,"outputs":`...)
	if b, err = appendList(b, r.Outputs, appendInferOutput); err != nil {
		return b, err
	}
	return append(b, '}'), nil
}

func appendInferOutput(b []byte, o InferOutput) ([]byte, error) {
	var err error
	b = append(b, `{"name":`...)
	if b, err = appendString(b, o.Name); err != nil {
		return b, err
	}
	b = append(b, `,"shape":`...)
	b, _ = appendList(b, o.Shape, func(b []byte, d int64) ([]byte, error) { return strconv.AppendInt(b, d, 10), nil })
	b = append(b, `,"datatype":`...)
	if b, err = appendString(b, o.Datatype); err != nil {
		return b, err
	}
	if o.Parameters != nil { // binary data: its size here, its bytes after the JSON
		b = append(b, `,"parameters":{"binary_data_size":`...)
		b = strconv.AppendInt(b, int64(o.Parameters.BinaryDataSize), 10)
		b = append(b, '}')
	}
	if o.Data == nil {
		return append(b, '}'), nil
	}
	b = append(b, `,"data":`...)
	switch d := o.Data.(type) {
	case []float32:
		b, err = appendFloat32s(b, d)
	case []string:
		b, err = appendList(b, d, appendString)
	default:
		b, err = appendMarshal(b, d)
	}
	if err != nil {
		return b, err
	}
	return append(b, '}'), nil
}

// appendString appends s as a JSON string. Strings of printable ASCII with nothing to escape
// (names, labels, versions) are copied as they are; any other goes through json.Marshal, whose
// rules (HTML-safe escapes, invalid UTF-8 → U+FFFD, U+2028 and U+2029 escaped) stay its own.
func appendString(b []byte, s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return appendMarshal(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), nil
}

// appendMarshal appends json.Marshal's encoding of v.
func appendMarshal(b []byte, v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, data...), nil
}
