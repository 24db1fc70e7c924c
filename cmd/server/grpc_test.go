//go:build cgo && ort

package main

import (
	"net"
	"slices"
	"strings"
	"testing"
)

// freeAddr is a loopback address with a port free a moment ago, for --grpc-addr: serve tells
// its tests the HTTP address only.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// tritonclient.grpc, with its defaults, against `server serve --grpc-addr` on the real
// models: health, metadata, the model configuration, and infer of a BYTES input, whose
// vectors are the KServe REST route's; an unknown model is NOT_FOUND and a 1 ms deadline
// DEADLINE_EXCEEDED.
func TestTritonGRPCClient(t *testing.T) {
	addr := freeAddr(t)
	url := startServer(t, "--grpc-addr", addr)
	var texts []string
	readGolden(t, "texts.json", &texts)
	texts = texts[:8] // a batch, within --max-inputs; includes the empty and blank strings

	var rest struct {
		Outputs []struct {
			Shape []int     `json:"shape"`
			Data  []float32 `json:"data"`
		} `json:"outputs"`
	}
	body := map[string]any{"inputs": []map[string]any{{"name": "text", "datatype": "BYTES", "shape": []int{len(texts)}, "data": texts}}}
	if resp := postJSON(t, url+"/v2/models/minilm/infer", body, &rest); resp.StatusCode != 200 || len(rest.Outputs) != 1 {
		t.Fatalf("REST infer: %d %+v", resp.StatusCode, rest)
	}

	type clientError struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	}
	var got struct {
		Live     bool `json:"live"`
		Ready    bool `json:"ready"`
		Metadata struct {
			Name    string `json:"name"`
			Inputs  []struct{ Name, Datatype string }
			Outputs []struct {
				Name     string `json:"name"`
				Datatype string `json:"datatype"`
				Shape    []string
			} `json:"outputs"`
		} `json:"metadata"`
		Config struct {
			Config struct {
				Name         string `json:"name"`
				MaxBatchSize int    `json:"max_batch_size"`
				Input        []struct {
					Name     string   `json:"name"`
					DataType string   `json:"data_type"`
					Dims     []string `json:"dims"`
				} `json:"input"`
			} `json:"config"`
		} `json:"config"`
		Embedding         [][]float32  `json:"embedding"`
		UnknownModelError *clientError `json:"unknown_model_error"`
		DeadlineError     *clientError `json:"deadline_error"`
	}
	runClient(t, "triton_grpc.py", texts, &got, addr, "minilm")

	if !got.Live || !got.Ready {
		t.Errorf("live %v, ready %v", got.Live, got.Ready)
	}
	// protobuf's JSON form writes int64s as strings.
	if md := got.Metadata; md.Name != "minilm" || len(md.Inputs) != 1 || md.Inputs[0].Name != "text" || md.Inputs[0].Datatype != "BYTES" ||
		len(md.Outputs) != 1 || md.Outputs[0].Name != "embedding" || !slices.Equal(md.Outputs[0].Shape, []string{"-1", "384"}) {
		t.Errorf("metadata %+v", md)
	}
	if c := got.Config.Config; c.Name != "minilm" || c.MaxBatchSize < len(texts) || len(c.Input) != 1 || c.Input[0].DataType != "TYPE_STRING" || !slices.Equal(c.Input[0].Dims, []string{"1"}) {
		t.Errorf("config %+v", c)
	}
	if len(got.Embedding) != len(texts) {
		t.Fatalf("%d vectors for %d texts", len(got.Embedding), len(texts))
	}
	for i, v := range got.Embedding {
		want := rest.Outputs[0].Data[i*384 : (i+1)*384]
		if len(v) != 384 || cosine(v, want) < 0.9999 {
			t.Errorf("text %d %q: %d dims, cosine %.7f with the REST route", i, texts[i], len(v), cosine(v, want))
		}
	}
	if e := got.UnknownModelError; e == nil || e.Status != "StatusCode.NOT_FOUND" || !strings.Contains(e.Message, "no-such-model") {
		t.Errorf("unknown model: %+v", e)
	}
	// The call's deadline passes on both ends at once: the client raises DEADLINE_EXCEEDED
	// when its own timer wins, CANCELLED when the server's reset of the stream at the same
	// deadline reaches it first (RST_STREAM code 8). Either way nothing ran: TestGRPCDeadline
	// checks that the server refuses a call whose deadline has passed.
	if e := got.DeadlineError; e == nil || (e.Status != "StatusCode.DEADLINE_EXCEEDED" &&
		(e.Status != "StatusCode.CANCELLED" || !strings.Contains(e.Message, "RST_STREAM with error code 8"))) {
		t.Errorf("1 ms deadline: %+v", e)
	}
}
