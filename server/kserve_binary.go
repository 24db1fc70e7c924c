package server

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// KServe's binary tensor data extension, as Triton defines it (docs/protocol/
// extension_binary_data.md in triton-inference-server/server) and as tritonclient.http uses it
// by default:
//
//   - A request may send an input's data as raw bytes after its JSON. The header
//     Inference-Header-Content-Length gives the JSON's length; each such input has the
//     parameter "binary_data_size" (its byte count) instead of "data"; their bytes follow the
//     JSON in the order of the inputs. tritonclient sends such a body with no Content-Type.
//   - A request asks for outputs as binary data with the request parameter
//     "binary_data_output" (every output) or the output parameter "binary_data" (that one,
//     overriding the first). The answer is then application/octet-stream: the JSON, in which
//     each binary output has "binary_data_size" and no "data", then the outputs' bytes in
//     output order; Inference-Header-Content-Length gives the JSON's length.
//
// Tensor bytes are little-endian and row-major: FP32 is four bytes a float; BYTES is, per
// element, a 4-byte little-endian length and then that many bytes.

// inferHeaderLength is the header that gives the length of the JSON before binary data.
const inferHeaderLength = "Inference-Header-Content-Length"

// readInferRequest reads an infer request, all JSON or JSON and binary tensor data; on
// failure it has answered: 400 for a body the extension cannot frame, 422 (400 for text that
// is not UTF-8) for JSON that does not decode, as decode answers.
func (s *Server) readInferRequest(w http.ResponseWriter, r *http.Request) (*InferRequest, bool) {
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		writeError(w, r, http.StatusUnsupportedMediaType, "Validation", fmt.Sprintf("Content-Encoding %q is not served: send the body uncompressed (tritonclient: leave request_compression_algorithm unset)", ce))
		return nil, false
	}
	body, ok := s.body(w, r)
	if !ok {
		return nil, false
	}
	header := r.Header.Get(inferHeaderLength)
	head, tail, err := splitInferBody(body, header)
	if err != nil {
		writeError(w, r, http.StatusBadRequest, "Validation", err.Error())
		return nil, false
	}
	var req InferRequest
	if err := decodeJSON(head, &req); err != nil {
		what := "bad JSON body: "
		if header != "" {
			what = fmt.Sprintf("bad JSON header (the body's first %d bytes, as %s says): ", len(head), inferHeaderLength)
		}
		badJSON(w, r, what, err)
		return nil, false
	}
	if err := req.attachBinary(tail, header != ""); err != nil {
		writeError(w, r, http.StatusBadRequest, "Validation", err.Error())
		return nil, false
	}
	return &req, true
}

// splitInferBody splits an infer body into its JSON and the binary data after it. header is
// the request's Inference-Header-Content-Length; without one the body is all JSON.
func splitInferBody(body []byte, header string) (head, tail []byte, err error) {
	if header == "" {
		return body, nil, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(header), 10, 64)
	switch {
	case err != nil || n < 0:
		return nil, nil, fmt.Errorf("%s %q is not a length: give the JSON's length in bytes", inferHeaderLength, header)
	case n == 0:
		return nil, nil, fmt.Errorf("%s 0: a body without a JSON header (Triton's raw binary request) is not served: send the JSON, then the inputs' bytes", inferHeaderLength)
	case n > int64(len(body)):
		return nil, nil, fmt.Errorf("%s %d is more than the body's %d bytes: give the length of the JSON alone", inferHeaderLength, n, len(body))
	}
	return body[:n], body[n:], nil
}

// attachBinary gives each input that has a "binary_data_size" parameter its bytes from tail,
// in input order; every byte of tail must go to one. framed says that the request had
// Inference-Header-Content-Length, without which it can carry no binary data.
func (req *InferRequest) attachBinary(tail []byte, framed bool) error {
	for i := range req.Inputs {
		in := &req.Inputs[i]
		v, ok := in.Parameters["binary_data_size"]
		if !ok {
			continue
		}
		size, isNumber := v.(float64)
		if !isNumber || size < 0 || size != math.Trunc(size) {
			return fmt.Errorf("input %q: binary_data_size must be a whole number of bytes", in.Name)
		}
		if d := bytes.TrimSpace(in.Data); len(d) > 0 && !bytes.Equal(d, []byte("null")) {
			return fmt.Errorf("input %q has both data and binary_data_size: send its data one way, in the JSON or after it", in.Name)
		}
		if !framed && size > 0 {
			return fmt.Errorf("input %q has binary_data_size %v but the request has no %s header: send it, giving the JSON's length, with the input's bytes after the JSON", in.Name, size, inferHeaderLength)
		}
		if size > float64(len(tail)) {
			return fmt.Errorf("input %q has binary_data_size %v, more than the %d bytes left after the JSON and the inputs before it", in.Name, size, len(tail))
		}
		n := int(size)
		in.binary, in.hasBinary = tail[:n:n], true
		tail = tail[n:]
	}
	if len(tail) > 0 {
		return fmt.Errorf("%d bytes after the JSON belong to no input: give each input sent as binary data its binary_data_size", len(tail))
	}
	return nil
}

// decodeBytesTensor reads a BYTES tensor's binary data: per element, a 4-byte little-endian
// length and then that many bytes. The elements must be UTF-8 text, as a JSON body's must.
// The strings are copies: they do not alias b.
func decodeBytesTensor(b []byte) ([]string, error) {
	var out []string
	for i := 0; len(b) > 0; i++ {
		if len(b) < 4 {
			return nil, fmt.Errorf("BYTES element %d is cut short: %d bytes left where its 4-byte length should be (each element is a 4-byte little-endian length, then its bytes)", i, len(b))
		}
		n := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint64(n) > uint64(len(b)) {
			return nil, fmt.Errorf("BYTES element %d is cut short: its length says %d bytes but %d are left", i, n, len(b))
		}
		if !utf8.Valid(b[:n]) {
			return nil, fmt.Errorf("BYTES element %d is not valid UTF-8: send text as UTF-8", i)
		}
		out = append(out, string(b[:n]))
		b = b[n:]
	}
	return out, nil
}

// appendBytesTensor appends ss as a BYTES tensor's binary data.
func appendBytesTensor(b []byte, ss []string) []byte {
	for _, s := range ss {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}

// appendFP32Tensor appends v as an FP32 tensor's binary data. A NaN or an infinity is
// json.Marshal's error, as in a JSON answer: the server hands out a broken model version's
// numbers in neither form.
func appendFP32Tensor(b []byte, v []float32) ([]byte, error) {
	for _, f := range v {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return b, unsupportedFloat(f)
		}
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b, nil
}

// binarySize is the length of an output's binary data, and whether it has a binary form.
func binarySize(data any) (int, bool) {
	switch d := data.(type) {
	case []float32:
		return 4 * len(d), true
	case []string:
		n := 4 * len(d)
		for _, s := range d {
			n += len(s)
		}
		return n, true
	}
	return 0, false
}

// binaryOutputs says, for each of outs, whether the request asked for it as binary data: the
// output's own "binary_data" when it has one, else the request's "binary_data_output"
// (texts has checked that both are bools).
func (req *InferRequest) binaryOutputs(outs []InferOutput) []bool {
	def := req.boolParam("binary_data_output", false)
	bin := make([]bool, len(outs))
	for i, o := range outs {
		bin[i] = def
		for _, want := range req.Outputs {
			if v, ok := want.Parameters["binary_data"].(bool); ok && want.Name == o.Name {
				bin[i] = v
			}
		}
	}
	return bin
}

// writeInferResponse answers an infer request: in JSON when no output is binary (binary[i]
// says whether outs[i] is), else with the binary tensor data extension. resp is not changed.
func writeInferResponse(w http.ResponseWriter, r *http.Request, resp *InferResponse, binary []bool) {
	if !slices.Contains(binary, true) {
		writeEncoded(w, r, http.StatusOK, resp, appendInferResponse)
		return
	}
	head := *resp
	head.Outputs = slices.Clone(resp.Outputs)
	for i, o := range head.Outputs {
		if n, ok := binarySize(o.Data); ok && binary[i] {
			head.Outputs[i].Parameters, head.Outputs[i].Data = &OutputParameters{BinaryDataSize: n}, nil
		}
	}
	bp := bufPool.Get().(*[]byte)
	b, err := appendInferResponse((*bp)[:0], &head)
	headLen := len(b)
	for i, o := range resp.Outputs {
		if err != nil || head.Outputs[i].Parameters == nil {
			continue
		}
		switch d := o.Data.(type) {
		case []float32:
			b, err = appendFP32Tensor(b, d)
		case []string:
			b = appendBytesTensor(b, d)
		}
	}
	if err == nil {
		w.Header().Set(inferHeaderLength, strconv.Itoa(headLen))
		writeBody(w, http.StatusOK, "application/octet-stream", b)
	}
	if cap(b) <= maxPooledBuf {
		*bp = b[:0]
		bufPool.Put(bp)
	}
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "Backend", "encoding the response: "+err.Error())
	}
}
