// Command hugot-peer is a baseline for `make bench-peers` (scripts/bench-peers.sh): a Go +
// ONNX Runtime server with no batching, built on knights-analytics/hugot. It serves TEI's
// POST /embed for one ONNX file of a sentence embedder (mean pooling over the attention
// mask, L2-normalized, as ortserve's minilm): each request runs hugot's feature-extraction
// pipeline on its own texts, concurrently with the others, on one shared ONNX Runtime
// session with one intra-op thread.
//
// It tokenizes as hugot does, with the tokenizer.json of --model-dir as it is: minilm's, as
// exported, cuts texts at 128 tokens where ortserve cuts at model.yaml's max_length (256), so
// bench-peers.sh gives it a copy of the model folder whose tokenizer.json cuts at max_length,
// for passages to run the same tokens on every server. Its fixed padding to 128 is not run:
// hugot trims each batch to its longest text.
//
// It is its own Go module so that hugot and its dependencies stay out of ortserve's module
// and binary. Build it with the ORT build tag (hugot's ONNX Runtime backend) and
// CGO_LDFLAGS=-L<dir of libtokenizers.a>:
//
//	go build -tags ORT,NODOWNLOAD -o hugot-peer .
//	hugot-peer --model-dir ~/.cache/ortserve/models/current/minilm --onnx fp32.onnx \
//	    --ort-lib ~/.cache/ortserve/ort/1.29.0/libonnxruntime.so.1 --addr 127.0.0.1:8081
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/knights-analytics/hugot"
	"github.com/knights-analytics/hugot/options"
	"github.com/knights-analytics/hugot/pipelines"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "hugot-peer:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("hugot-peer", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8081", "listen address")
	dir := fs.String("model-dir", "", "model folder holding tokenizer.json and the ONNX file")
	onnx := fs.String("onnx", "fp32.onnx", "ONNX file in --model-dir (model.yaml names one per version)")
	ortLib := fs.String("ort-lib", "", "the ONNX Runtime library file")
	maxInputs := fs.Int("max-inputs", 32, "most texts in one request (TEI's max_client_batch_size)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *ortLib == "" {
		return errors.New("--model-dir and --ort-lib are required")
	}

	// hugot's README settings for throughput, one call per core: one intra-op and one
	// inter-op thread, no memory arena, no memory pattern.
	session, err := hugot.NewORTSession(
		withLibraryFile(*ortLib),
		options.WithIntraOpNumThreads(1),
		options.WithInterOpNumThreads(1),
		options.WithCPUMemArena(false),
		options.WithMemPattern(false),
	)
	if err != nil {
		return err
	}
	defer session.Destroy()
	embed, err := hugot.NewPipeline(session, hugot.FeatureExtractionConfig{
		ModelPath:    *dir,
		Name:         "embed",
		OnnxFilename: *onnx,
		Options:      []hugot.FeatureExtractionOption{pipelines.WithNormalization()},
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /embed", func(w http.ResponseWriter, r *http.Request) {
		texts, err := readInputs(w, r, *maxInputs)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
			return
		}
		out, err := embed.RunPipeline(texts)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out.Embeddings)
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {})

	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Printf("hugot-peer: %s/%s on http://%s", *dir, *onnx, *addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// withLibraryFile loads exactly the ONNX Runtime file ortserve loads: hugot's
// WithOnnxLibraryPath takes a folder and always loads libonnxruntime.so from it.
func withLibraryFile(path string) options.WithOption {
	return func(o *options.Options) error {
		o.ORTOptions.LibraryPath = &path
		return nil
	}
}

// readInputs reads TEI's {"inputs": "text"} or {"inputs": ["a", "b"]}.
func readInputs(w http.ResponseWriter, r *http.Request, most int) ([]string, error) {
	var body struct {
		Inputs json.RawMessage `json:"inputs"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 2<<20)).Decode(&body); err != nil {
		return nil, err
	}
	var one string
	if err := json.Unmarshal(body.Inputs, &one); err == nil {
		return []string{one}, nil
	}
	var texts []string
	if err := json.Unmarshal(body.Inputs, &texts); err != nil || len(texts) == 0 || len(texts) > most {
		return nil, fmt.Errorf(`"inputs" must be a text or a list of 1 to %d texts`, most)
	}
	return texts, nil
}
