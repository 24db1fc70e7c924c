package server

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ortserve/ortserve/models"
)

// bytesTensor is a BYTES tensor's binary data, as tritonclient serializes it.
func bytesTensor(ss ...string) []byte { return appendBytesTensor(nil, ss) }

// tritonBody is an infer body as tritonclient sends it: the JSON, then the tensors' bytes;
// and the Inference-Header-Content-Length that goes with it.
func tritonBody(head string, tensors ...[]byte) ([]byte, string) {
	return slices.Concat(append([][]byte{[]byte(head)}, tensors...)...), strconv.Itoa(len(head))
}

// inferAnswer is an infer answer's JSON with each binary output's bytes beside it.
type inferAnswer struct {
	Outputs []answerOutput `json:"outputs"`
}

type answerOutput struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Parameters map[string]int  `json:"parameters"`
	Data       json.RawMessage `json:"data"`
	binary     []byte          // after the JSON, when Parameters has binary_data_size
}

// readAnswer splits an infer answer by its Inference-Header-Content-Length, as tritonclient
// does, and checks the headers that go with either form.
func readAnswer(t *testing.T, resp *http.Response, body []byte) inferAnswer {
	t.Helper()
	head, tail := body, []byte(nil)
	if h := resp.Header.Get(inferHeaderLength); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n > len(body) {
			t.Fatalf("%s %q for a body of %d bytes", inferHeaderLength, h, len(body))
		}
		head, tail = body[:n], body[n:]
		if ct := resp.Header.Get("Content-Type"); ct != "application/octet-stream" {
			t.Errorf("binary answer with Content-Type %q", ct)
		}
		if cl := resp.Header.Get("Content-Length"); cl != strconv.Itoa(len(body)) {
			t.Errorf("Content-Length %q for %d bytes", cl, len(body))
		}
	} else if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("JSON answer with Content-Type %q", ct)
	}
	var a inferAnswer
	if err := json.Unmarshal(head, &a); err != nil {
		t.Fatalf("answer's JSON: %v: %q", err, head)
	}
	for i, o := range a.Outputs {
		size, ok := o.Parameters["binary_data_size"]
		if !ok {
			continue
		}
		if o.Data != nil {
			t.Errorf("output %q has data and binary_data_size", o.Name)
		}
		if size > len(tail) {
			t.Fatalf("output %q: binary_data_size %d, %d bytes left", o.Name, size, len(tail))
		}
		a.Outputs[i].binary, tail = tail[:size], tail[size:]
	}
	if len(tail) > 0 {
		t.Errorf("%d bytes after the outputs", len(tail))
	}
	return a
}

// floats is an output's FP32 data, from JSON or binary.
func (a inferAnswer) floats(t *testing.T, name string) []float32 {
	t.Helper()
	for _, o := range a.Outputs {
		if o.Name != name {
			continue
		}
		if o.binary == nil {
			var v []float32
			if err := json.Unmarshal(o.Data, &v); err != nil {
				t.Fatalf("output %q: %v", name, err)
			}
			return v
		}
		if len(o.binary)%4 != 0 {
			t.Fatalf("output %q: %d bytes of FP32", name, len(o.binary))
		}
		v := make([]float32, len(o.binary)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(o.binary[4*i:]))
		}
		return v
	}
	t.Fatalf("no output %q", name)
	return nil
}

// strings is an output's BYTES data, from JSON or binary.
func (a inferAnswer) strings(t *testing.T, name string) []string {
	t.Helper()
	for _, o := range a.Outputs {
		if o.Name != name {
			continue
		}
		if o.binary == nil {
			var v []string
			if err := json.Unmarshal(o.Data, &v); err != nil {
				t.Fatalf("output %q: %v", name, err)
			}
			return v
		}
		v, err := decodeBytesTensor(o.binary)
		if err != nil {
			t.Fatalf("output %q: %v", name, err)
		}
		return v
	}
	t.Fatalf("no output %q", name)
	return nil
}

// binaryNames are the outputs that came as binary data.
func (a inferAnswer) binaryNames() []string {
	var names []string
	for _, o := range a.Outputs {
		if o.binary != nil {
			names = append(names, o.Name)
		}
	}
	return names
}

func postInfer(t *testing.T, url string, body []byte, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	for k, v := range header {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

func TestKServeBinaryTensors(t *testing.T) {
	repo := fakeRepo{"emb": {task: models.TaskEmbed}, "cls": {task: models.TaskClassify}}
	ts, _ := newCompatServer(t, repo)
	const octet = "application/octet-stream"

	// The reference: the same texts in plain JSON.
	ref := func(model string) inferAnswer {
		body := `{"inputs":[{"name":"text","shape":[2],"datatype":"BYTES","data":["abc","h\u00e9"]}]}`
		resp, data := postInfer(t, ts.URL+"/v2/models/"+model+"/infer", []byte(body), map[string]string{"Content-Type": "application/json"})
		if resp.StatusCode != 200 {
			t.Fatalf("JSON infer: %d %s", resp.StatusCode, data)
		}
		return readAnswer(t, resp, data)
	}
	embRef, clsRef := ref("emb"), ref("cls")
	texts := bytesTensor("abc", "hé")
	binIn := `{"name":"text","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":` + strconv.Itoa(len(texts)) + `}}`
	jsonIn := `{"name":"text","shape":[2],"datatype":"BYTES","data":["abc","hé"]}`

	tests := []struct {
		name, model string
		head        string   // the JSON
		tensors     [][]byte // after it
		header      *string  // Inference-Header-Content-Length; nil: the JSON's length when tensors are sent
		contentType string
		code        int
		want        string   // for a failure, a substring of the error
		binary      []string // for a success, the outputs that must come as binary data
	}{
		{"tritonclient's default: all binary", "emb", `{"inputs":[` + binIn + `],"parameters":{"binary_data_output":true}}`, [][]byte{texts}, nil, octet, 200, "", []string{"embedding"}},
		{"no Content-Type, as tritonclient sends", "emb", `{"inputs":[` + binIn + `],"parameters":{"binary_data_output":true}}`, [][]byte{texts}, nil, "", 200, "", []string{"embedding"}},
		{"binary in, JSON out", "emb", `{"inputs":[` + binIn + `]}`, [][]byte{texts}, nil, octet, 200, "", nil},
		{"JSON in, one output binary", "emb", `{"inputs":[` + jsonIn + `],"outputs":[{"name":"embedding","parameters":{"binary_data":true}}]}`, nil, nil, "application/json", 200, "", []string{"embedding"}},
		{"an output's binary_data overrides the request's", "emb", `{"inputs":[` + jsonIn + `],"outputs":[{"name":"embedding","parameters":{"binary_data":false}}],"parameters":{"binary_data_output":true}}`, nil, nil, "application/json", 200, "", nil},
		{"classifier, all binary", "cls", `{"inputs":[` + binIn + `],"parameters":{"binary_data_output":true}}`, [][]byte{texts}, nil, octet, 200, "", []string{"probabilities", "label"}},
		{"classifier, label binary", "cls", `{"inputs":[` + binIn + `],"outputs":[{"name":"label"},{"name":"probabilities","parameters":{"binary_data":false}}],"parameters":{"binary_data_output":true}}`, [][]byte{texts}, nil, octet, 200, "", []string{"label"}},
		{"header equal to the body", "emb", `{"inputs":[` + jsonIn + `]}`, nil, ptr(strconv.Itoa(len(`{"inputs":[` + jsonIn + `]}`))), "application/json", 200, "", nil},
		{"tritonclient's other parameters", "emb", `{"id":"7","inputs":[` + binIn + `],"parameters":{"binary_data_output":true,"priority":1,"timeout":100,"sequence_id":0}}`, [][]byte{texts}, nil, octet, 200, "", []string{"embedding"}},

		{"header not a number", "emb", `{"inputs":[` + binIn + `]}`, [][]byte{texts}, ptr("twelve"), octet, 400, `"twelve" is not a length`, nil},
		{"header zero", "emb", `{"inputs":[` + binIn + `]}`, [][]byte{texts}, ptr("0"), octet, 400, `without a JSON header`, nil},
		{"header past the body", "emb", `{"inputs":[` + binIn + `]}`, [][]byte{texts}, ptr("9999"), octet, 400, `more than the body's`, nil},
		{"header too short", "emb", `{"inputs":[` + binIn + `]}`, [][]byte{texts}, ptr("20"), octet, 422, `bad JSON header (the body's first 20 bytes`, nil},
		{"binary data without the header", "emb", `{"inputs":[` + binIn + `]}`, nil, nil, "application/json", 400, `has no Inference-Header-Content-Length header`, nil},
		{"binary_data_size past the data", "emb", `{"inputs":[` + binIn + `]}`, [][]byte{texts[:5]}, nil, octet, 400, `more than the 5 bytes left`, nil},
		{"bytes left over", "emb", `{"inputs":[` + binIn + `]}`, [][]byte{texts, {0}}, nil, octet, 400, `1 bytes after the JSON belong to no input`, nil},
		{"data and binary_data_size", "emb", `{"inputs":[{"name":"text","shape":[2],"datatype":"BYTES","data":["a","b"],"parameters":{"binary_data_size":` + strconv.Itoa(len(texts)) + `}}]}`, [][]byte{texts}, nil, octet, 400, `both data and binary_data_size`, nil},
		{"fractional binary_data_size", "emb", `{"inputs":[{"name":"text","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":1.5}}]}`, [][]byte{texts}, nil, octet, 400, `whole number of bytes`, nil},
		{"negative binary_data_size", "emb", `{"inputs":[{"name":"text","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":-1}}]}`, [][]byte{texts}, nil, octet, 400, `whole number of bytes`, nil},
		{"element cut short", "emb", `{"inputs":[{"name":"text","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":9}}]}`, [][]byte{{3, 0, 0, 0, 'a', 'b', 'c', 9, 0}}, nil, octet, 400, `BYTES element 1 is cut short`, nil},
		{"element past the end", "emb", `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":5}}]}`, [][]byte{{9, 0, 0, 0, 'a'}}, nil, octet, 400, `its length says 9 bytes but 1 are left`, nil},
		{"not UTF-8", "emb", `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":6}}]}`, [][]byte{{2, 0, 0, 0, 0xff, 0xfe}}, nil, octet, 400, `not valid UTF-8`, nil},
		{"shape disagrees", "emb", `{"inputs":[{"name":"text","shape":[3],"datatype":"BYTES","parameters":{"binary_data_size":` + strconv.Itoa(len(texts)) + `}}]}`, [][]byte{texts}, nil, octet, 400, `(3 elements) but 2 texts`, nil},
		{"no texts", "emb", `{"inputs":[{"name":"text","shape":[0],"datatype":"BYTES","parameters":{"binary_data_size":0}}]}`, nil, nil, "application/json", 422, `inputs is empty`, nil},
		{"FP32 input", "emb", `{"inputs":[{"name":"text","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}`, [][]byte{{0, 0, 128, 63}}, nil, octet, 400, `datatype "FP32", want BYTES`, nil},
		{"binary_data_output not a bool", "emb", `{"inputs":[` + jsonIn + `],"parameters":{"binary_data_output":1}}`, nil, nil, "application/json", 400, `"binary_data_output" must be a bool`, nil},
		{"binary_data not a bool", "emb", `{"inputs":[` + jsonIn + `],"outputs":[{"name":"embedding","parameters":{"binary_data":"yes"}}]}`, nil, nil, "application/json", 400, `"binary_data" must be a bool`, nil},
		{"classification extension", "cls", `{"inputs":[` + jsonIn + `],"outputs":[{"name":"probabilities","parameters":{"classification":2}}]}`, nil, nil, "application/json", 400, `classification extension`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, length := tritonBody(tt.head, tt.tensors...)
			if tt.tensors == nil {
				length = ""
			}
			if tt.header != nil {
				length = *tt.header
			}
			resp, data := postInfer(t, ts.URL+"/v2/models/"+tt.model+"/infer", body, map[string]string{"Content-Type": tt.contentType, inferHeaderLength: length})
			if resp.StatusCode != tt.code {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, data, tt.code)
			}
			if tt.code != 200 {
				var e KServeError
				if err := json.Unmarshal(data, &e); err != nil || !strings.Contains(e.Error, tt.want) {
					t.Fatalf("error %s, want KServe's shape containing %q", data, tt.want)
				}
				return
			}
			got := readAnswer(t, resp, data)
			if names := got.binaryNames(); !slices.Equal(names, tt.binary) {
				t.Errorf("binary outputs %q, want %q", names, tt.binary)
			}
			want := embRef
			if tt.model == "cls" {
				want = clsRef
			}
			for _, o := range got.Outputs {
				ro := want.Outputs[slices.IndexFunc(want.Outputs, func(w answerOutput) bool { return w.Name == o.Name })]
				if !slices.Equal(o.Shape, ro.Shape) || o.Datatype != ro.Datatype {
					t.Errorf("output %q: %s %v, JSON gave %s %v", o.Name, o.Datatype, o.Shape, ro.Datatype, ro.Shape)
				}
				if o.Datatype == "BYTES" {
					if g, w := got.strings(t, o.Name), want.strings(t, o.Name); !slices.Equal(g, w) {
						t.Errorf("output %q: %q, JSON gave %q", o.Name, g, w)
					}
				} else if g, w := got.floats(t, o.Name), want.floats(t, o.Name); !slices.Equal(g, w) {
					t.Errorf("output %q: %v, JSON gave %v", o.Name, g, w)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestSplitInferBody(t *testing.T) {
	body := []byte(`{"a":1}xyz`)
	tests := []struct {
		header     string
		head, tail string
		err        string
	}{
		{"", `{"a":1}xyz`, "", ""},
		{"7", `{"a":1}`, "xyz", ""},
		{" 7 ", `{"a":1}`, "xyz", ""},
		{"10", `{"a":1}xyz`, "", ""},
		{"11", "", "", "more than the body's 10 bytes"},
		{"0", "", "", "without a JSON header"},
		{"-1", "", "", "is not a length"},
		{"7.0", "", "", "is not a length"},
		{"99999999999999999999", "", "", "is not a length"},
	}
	for _, tt := range tests {
		head, tail, err := splitInferBody(body, tt.header)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("header %q: error %v, want %q", tt.header, err, tt.err)
			}
			continue
		}
		if err != nil || string(head) != tt.head || string(tail) != tt.tail {
			t.Errorf("header %q: %q %q %v, want %q %q", tt.header, head, tail, err, tt.head, tt.tail)
		}
	}
}

func TestBytesTensor(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want []string
		err  string
	}{
		{"none", nil, nil, ""},
		{"two", []byte("\x02\x00\x00\x00hi\x06\x00\x00\x00h\xc3\xa9llo"), []string{"hi", "héllo"}, ""},
		{"empty element", []byte("\x00\x00\x00\x00"), []string{""}, ""},
		{"short length", []byte("\x02\x00\x00"), nil, "element 0 is cut short: 3 bytes left"},
		{"short element", []byte("\x02\x00\x00\x00h"), nil, "its length says 2 bytes but 1 are left"},
		{"huge length", []byte("\xff\xff\xff\xffh"), nil, "its length says 4294967295 bytes"},
		{"second short", []byte("\x01\x00\x00\x00h\x01"), nil, "element 1 is cut short"},
		{"not UTF-8", []byte("\x01\x00\x00\x00\xc3"), nil, "element 0 is not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeBytesTensor(tt.data)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("%q %v, want %q", got, err, tt.want)
			}
			if back := appendBytesTensor(nil, got); !bytes.Equal(back, tt.data) {
				t.Errorf("encodes back to %q", back)
			}
		})
	}
}

func TestFP32Tensor(t *testing.T) {
	b, err := appendFP32Tensor(nil, []float32{1, -0.5})
	if want := []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xbf}; err != nil || !bytes.Equal(b, want) {
		t.Errorf("%x %v, want %x", b, err, want)
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		if _, err := appendFP32Tensor(nil, []float32{1, bad}); err == nil || !strings.Contains(err.Error(), "unsupported value") {
			t.Errorf("%v: error %v, want json.Marshal's", bad, err)
		}
	}
}

func TestKServeBinaryNaN(t *testing.T) {
	s := New(DefaultConfig(), nanRepo{}, slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	body, length := tritonBody(`{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":5}}],"parameters":{"binary_data_output":true}}`, bytesTensor("a"))
	resp, data := postInfer(t, ts.URL+"/v2/models/emb/infer", body, map[string]string{"Content-Type": "application/octet-stream", inferHeaderLength: length})
	if resp.StatusCode != 500 || resp.Header.Get(inferHeaderLength) != "" || !strings.Contains(string(data), `{"error":"encoding the response`) {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, data)
	}
}

func TestKServeServerMetadata(t *testing.T) {
	ts, s := newCompatServer(t, fakeRepo{"emb": {task: models.TaskEmbed}})
	s.cfg.Info.Version = "1.2.3"
	for _, path := range []string{"/v2", "/v2/"} {
		code, body := getURL(t, ts.URL+path)
		var md ServerMetadata
		if err := json.Unmarshal([]byte(body), &md); err != nil || code != 200 || md.Name != "ortserve" || md.Version != "1.2.3" || !slices.Equal(md.Extensions, []string{"binary_tensor_data", "model_configuration"}) {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}
}

func FuzzInferBinary(f *testing.F) {
	seed := func(head string, tensors ...[]byte) {
		body, length := tritonBody(head, tensors...)
		f.Add(body, length)
	}
	seed(`{"inputs":[{"name":"text","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":16}}],"parameters":{"binary_data_output":true}}`, []byte("\x02\x00\x00\x00hi\x06\x00\x00\x00h\xc3\xa9llo"))
	seed(`{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":4}}]}`, []byte("\x00\x00\x00\x00"))
	seed(`{"inputs":[{"name":"a","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":5}},{"name":"text","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":5}}]}`, bytesTensor("x"), bytesTensor("y"))
	seed(`{"inputs":[{"name":"text","shape":[2,1],"datatype":"BYTES","parameters":{"binary_data_size":9}}]}`, []byte("\x01\x00\x00\x00a\x00\x00\x00\x00"))
	seed(`{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":8}}]}`, []byte("\x09\x00\x00\x00abcd"))
	f.Add([]byte(`{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}]}`), "")
	f.Add([]byte(`{"inputs":[]}xyz`), "13")
	f.Fuzz(func(t *testing.T, body []byte, header string) {
		head, tail, err := splitInferBody(body, header)
		if err != nil {
			return
		}
		var req InferRequest
		if decodeJSON(head, &req) != nil {
			return
		}
		if req.attachBinary(tail, header != "") != nil {
			return
		}
		// Every byte after the JSON went to exactly one input, in input order.
		var got []byte
		for _, in := range req.Inputs {
			got = append(got, in.binary...)
		}
		if !bytes.Equal(got, tail) {
			t.Fatalf("the inputs hold %q of the tail %q", got, tail)
		}
		texts, err := req.texts()
		if err != nil {
			return
		}
		// What is accepted is as many UTF-8 texts as the shape says, and a binary input's
		// texts encode back to its bytes.
		in := req.Inputs[0]
		n := int64(1)
		for _, d := range in.Shape {
			n *= d
		}
		if n != int64(len(texts)) || in.Datatype != "BYTES" {
			t.Fatalf("accepted %d texts for shape %v", len(texts), in.Shape)
		}
		for _, s := range texts {
			if in.hasBinary && !utf8.ValidString(s) {
				t.Fatalf("accepted %q, not UTF-8", s)
			}
		}
		if in.hasBinary && !bytes.Equal(appendBytesTensor(nil, texts), in.binary) {
			t.Fatalf("texts %q do not encode back to %q", texts, in.binary)
		}
	})
}
