// Package server is ortserve's HTTP face (and its gRPC one, grpc.go): routes (chi), the TEI-shaped API, limits,
// readiness, timing headers, and the one place where errors become status codes. It knows
// nothing of ONNX Runtime or tokenizer internals: models come through Repository.
package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/health"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
)

// Config configures the HTTP layer.
type Config struct {
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes int64
	// MaxInputs bounds the texts in one request (TEI's max_client_batch_size).
	MaxInputs int
	// MaxInputChars bounds the characters (Unicode code points) of one text; 0: no bound.
	// A longer text is cut to it when the request truncates, else refused with 413.
	MaxInputChars int
	// AutoTruncate is the default of a request's `truncate`: cut inputs over the model's
	// maximum length instead of refusing them.
	AutoTruncate bool
	// DefaultPromptName is the prompt of an embed request that names none, for the models
	// that have a prompt of that name and no default of their own (models.EmbedOptions).
	DefaultPromptName string
	// Info is served at /info; Models and the limits are filled in by the server.
	Info Info
	// Metrics, when set, is served at /metrics.
	Metrics http.Handler
	// MaxInFlight bounds the inference requests served at once; past it, 429 at once.
	MaxInFlight int
	// RequestTimeout is a request's deadline when it sets no X-Request-Timeout; 0: none.
	RequestTimeout time.Duration
	// APIKeys, when any, are required of every request as "Authorization: Bearer KEY"
	// (guard.go), but on the routes AuthExempt names (health, metrics).
	APIKeys    []string
	AuthExempt []string
	// AllowedHosts, when any, are the only Host names (lower case, no port) answered; others
	// get 403.
	AllowedHosts []string
	// Tracing, when set, traces the inference requests (trace.go); nil: none, at no cost.
	Tracing *Tracing
}

// DefaultConfig has the defaults `server serve` uses.
func DefaultConfig() Config {
	return Config{MaxBodyBytes: 2 << 20, MaxInputs: 32, AutoTruncate: true, MaxInFlight: 512}
}

// Server serves the API over a Repository.
type Server struct {
	cfg        Config
	repo       Repository
	log        *slog.Logger
	metrics    *Metrics
	ready      atomic.Bool
	inFlight   chan struct{} // a token per inference request being served
	keys       keyring
	started    time.Time      // GET /v1/models' "created"
	grpcHealth *health.Server // grpc.health.v1's state, following ready
}

// New makes a Server; it is not ready until SetReady(true). metrics may be nil.
func New(cfg Config, repo Repository, log *slog.Logger, metrics *Metrics) *Server {
	cfg.Info.FallbackReason = redactPaths(cfg.Info.FallbackReason, "") // no paths in /info
	cfg.Info.MaxInputs = cfg.MaxInputs
	cfg.Info.AutoTruncate = cfg.AutoTruncate
	if metrics == nil {
		metrics = NewMetrics(prometheus.NewRegistry())
	}
	metrics.describeFrom(repo.Describe)
	return &Server{cfg: cfg, repo: repo, log: log, metrics: metrics, inFlight: make(chan struct{}, max(1, cfg.MaxInFlight)), keys: newKeyring(cfg.APIKeys), started: time.Now(), grpcHealth: newHealth()}
}

// SetReady flips readiness: /health answers 503 while not ready, as during shutdown, and
// grpc.health.v1 NOT_SERVING.
func (s *Server) SetReady(ok bool) {
	s.ready.Store(ok)
	setHealth(s.grpcHealth, ok)
}

// Handler is the server's routes, in three groups, one per API family (family.go): each
// group answers its errors, its unknown routes included, in its family's shape.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(s.checkHost, s.authorize)
	r.NotFound(s.notFound)
	r.MethodNotAllowed(s.methodNotAllowed)
	r.Group(func(r chi.Router) { // TEI's routes and ortserve's own
		r.Get("/health", s.health)
		r.Get("/info", s.info)
		r.With(s.admit("/embed")).Post("/embed", s.embed)
		r.With(s.admit("/embed_sparse")).Post("/embed_sparse", s.embedSparse)
		r.With(s.admit("/predict")).Post("/predict", s.predict)
		r.With(s.admit("/rerank")).Post("/rerank", s.rerank)
		r.With(s.admit("/")).Post("/", s.root)                       // TEI's route for its model: tei_root.go
		r.With(s.admit("/embed_all")).Post("/embed_all", s.embedAll) // tei_more.go
		r.With(s.admit("/similarity")).Post("/similarity", s.similarity)
		r.With(s.admit("/decode")).Post("/decode", s.decodeIDs)
		r.With(s.admit("/vertex")).Post("/vertex", s.vertex)         // vertex.go
		r.With(s.admit("/invocations")).Post("/invocations", s.root) // SageMaker's POST /
		r.Get("/ping", s.ping)                                       // SageMaker's /health
		r.Post("/tokenize", s.tokenize)
		r.Get("/openapi.json", s.openAPI)
		r.Get("/api-doc/openapi.json", s.openAPI) // where TEI serves it
		if s.cfg.Metrics != nil {
			r.Method(http.MethodGet, "/metrics", s.cfg.Metrics)
		}
	})
	r.Route("/v1", func(r chi.Router) { // OpenAI's
		r.NotFound(s.notFound)
		r.MethodNotAllowed(s.methodNotAllowed)
		r.With(s.admit("/v1/embeddings")).Post("/embeddings", s.openAIEmbeddings)
		r.With(s.admit("/v1/rerank")).Post("/rerank", s.openAIRerank) // Cohere's and Jina's
		r.Get("/models", s.openAIModels)
		r.Get("/models/{model}", s.openAIModel)
		r.Get("/models/{model}/{version}", s.openAIModel) // the id "minilm/int8"
	})
	r.Route("/v2", func(r chi.Router) { // KServe's Open Inference Protocol
		r.NotFound(s.notFound)
		r.MethodNotAllowed(s.methodNotAllowed)
		r.Get("/", s.kserveServerMetadata) // GET /v2 (and /v2/)
		r.Get("/health/live", s.kserveLive)
		r.Get("/health/ready", s.kserveReady)
		r.Get("/models/{model}", s.kserveMetadata)
		r.Get("/models/{model}/ready", s.kserveModelReady)
		r.Get("/models/{model}/config", s.kserveConfig) // Triton's extensions: kserve_config.go
		r.With(s.admit("/v2/models/{model}/infer")).Post("/models/{model}/infer", s.kserveInfer)
		r.Get("/models/{model}/versions/{version}", s.kserveMetadata)
		r.Get("/models/{model}/versions/{version}/ready", s.kserveModelReady)
		r.Get("/models/{model}/versions/{version}/config", s.kserveConfig)
		r.Post("/repository/index", s.kserveIndex)
		r.With(s.admit("/v2/models/{model}/versions/{version}/infer")).Post("/models/{model}/versions/{version}/infer", s.kserveInfer)
	})
	return r
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, r, http.StatusNotFound, "NotFound", "no such route: "+r.Method+" "+r.URL.Path+": see /info and docs/api.md")
}

func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	writeError(w, r, http.StatusMethodNotAllowed, "Validation", r.Method+" is not allowed on "+r.URL.Path+": see docs/api.md")
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if !s.ready.Load() {
		writeError(w, r, http.StatusServiceUnavailable, "Unhealthy", "not ready")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) info(w http.ResponseWriter, _ *http.Request) {
	info := s.cfg.Info
	info.Models = s.repo.Describe() // hot reloads change it
	writeJSON(w, http.StatusOK, info)
}

// reqInfo is what admit learns of a request before its handler runs (its body) and what
// the handler learns that the request's metrics need.
type reqInfo struct {
	body           []byte // read by admit before the request took a slot
	model, version string
	stats          models.Stats
}

type infoKey struct{}

// note records, for metrics, which model version served the request and how.
func note(r *http.Request, model string, st models.Stats) { noteIn(r.Context(), model, st) }

// noteIn is note for a request known by its context.
func noteIn(ctx context.Context, model string, st models.Stats) {
	if ri, ok := ctx.Value(infoKey{}).(*reqInfo); ok {
		ri.model, ri.version, ri.stats = model, st.Version, st
	}
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// admit guards an inference route, in this order: its metrics; the X-Request-Timeout
// header; the whole body, read (bounded by MaxBodyBytes, and in time by the connection's
// read deadline, serve's --read-timeout) before anything is held, so that a client that
// trickles its body holds a goroutine and a connection but never one of the MaxInFlight
// slots; then the in-flight cap (429 at once past it); then the request's deadline, which
// runs from here, when the server starts to work for it.
func (s *Server) admit(route string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			sw := &statusWriter{ResponseWriter: w}
			ri := &reqInfo{}
			if t := s.cfg.Tracing; t != nil {
				ctx, span := t.startRequest(r.Context(), r, route)
				r = r.WithContext(ctx)
				defer func() { endRequest(span, cmp.Or(sw.code, http.StatusOK), ri) }()
			}
			defer func() {
				s.metrics.observe(route, ri.model, ri.version, cmp.Or(sw.code, http.StatusOK), ri.stats, time.Since(start))
			}()
			timeout := s.cfg.RequestTimeout
			if h := r.Header.Get("X-Request-Timeout"); h != "" {
				d, err := parseTimeout(h)
				if err != nil {
					writeError(sw, r, http.StatusBadRequest, "Validation", "X-Request-Timeout "+strconv.Quote(h)+": give milliseconds or a duration such as 250ms")
					return
				}
				timeout = d
			}
			body, ok := s.readBody(sw, r)
			if !ok {
				return
			}
			ri.body = body
			select {
			case s.inFlight <- struct{}{}:
				defer func() { <-s.inFlight }()
			default:
				setRetryAfter(sw, time.Second)
				writeError(sw, r, http.StatusTooManyRequests, "Overloaded", overloadedMessage(cap(s.inFlight)))
				return
			}
			s.metrics.inFlight.Inc()
			defer s.metrics.inFlight.Dec()
			ctx := runtime.WithArrival(context.WithValue(r.Context(), infoKey{}, ri), time.Now())
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			next.ServeHTTP(sw, r.WithContext(ctx))
		})
	}
}

func parseTimeout(h string) (time.Duration, error) {
	// Milliseconds past what a Duration holds (Inf included) are refused rather than
	// converted: the conversion overflows, on amd64 to a negative duration, that is no deadline.
	if ms, err := strconv.ParseFloat(h, 64); err == nil && ms > 0 && ms < float64(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(ms * float64(time.Millisecond)), nil
	}
	d, err := time.ParseDuration(h)
	if err == nil && d <= 0 {
		err = errors.New("not positive")
	}
	return d, err
}

func (s *Server) predict(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req PredictRequest
	if !s.decode(w, r, &req) {
		return
	}
	truncate := s.truncate(req.Truncate)
	left, ok := s.truncationLeft(w, r, req.TruncationDirection)
	if !ok {
		return
	}
	inputs, ok := s.predictInputs(w, r, req.Inputs, truncate)
	if !ok {
		return
	}
	enc := appendPredictionRows
	if req.Inputs.Single {
		enc = func(b []byte, rows [][]Prediction) ([]byte, error) { return appendPredictions(b, rows[0]) }
	}
	runModel(s, w, r, req.Model, models.TaskClassify, start, predictOn(req.Version, inputs, models.ClassifyOptions{Truncate: truncate, Left: left, Raw: req.RawScores}), enc)
}

// predictOn is /predict's work on a classifier: each input's scores, ranked (rankPredictions).
func predictOn(version string, inputs []models.Input, o models.ClassifyOptions) func(context.Context, Pipeline) ([][]Prediction, models.Stats, error) {
	return func(ctx context.Context, p Pipeline) ([][]Prediction, models.Stats, error) {
		scores, st, err := p.ClassifyPairs(ctx, version, inputs, o)
		if err != nil {
			return nil, st, err
		}
		return rankPredictions(scores, st.Labels), st, nil
	}
}

// predictInputs holds /predict's inputs to the limits (predictInputsOf). On a violation it
// has answered.
func (s *Server) predictInputs(w http.ResponseWriter, r *http.Request, in PredictInputs, truncate bool) ([]models.Input, bool) {
	out, err := s.predictInputsOf(in, truncate)
	return out, s.answered(w, r, err)
}

// predictInputsOf holds /predict's inputs, single texts and pairs (TEI's [["premise",
// "hypothesis"]], which a classifier reads through its tokenizer's pair template), to the
// limits, as checkInputs does: the count is of inputs, a pair being one; the characters are
// of each text.
func (s *Server) predictInputsOf(in PredictInputs, truncate bool) ([]models.Input, error) {
	if err := s.countError(len(in.Seqs), "inputs"); err != nil {
		return nil, err
	}
	out := make([]models.Input, len(in.Seqs))
	for i, seq := range in.Seqs {
		name := func(int) string { return "input " + strconv.Itoa(i) }
		if len(seq) == 2 {
			name = func(j int) string { return fmt.Sprintf("input %d's %s text", i, [2]string{"first", "second"}[j]) }
		}
		if err := s.charsError(seq, truncate, name); err != nil {
			return nil, err
		}
		out[i].Text = seq[0]
		if len(seq) == 2 {
			out[i].Second, out[i].Pair = seq[1], true
		}
	}
	return out, nil
}

// rankPredictions pairs each row of scores with labels, sorted by score, highest first (ties
// in label order), as /predict answers them.
func rankPredictions(scores [][]float32, labels []string) [][]Prediction {
	out := make([][]Prediction, len(scores))
	for i, sc := range scores {
		out[i] = make([]Prediction, len(sc))
		for j, v := range sc {
			out[i][j] = Prediction{Score: v, Label: labels[j]}
		}
		slices.SortStableFunc(out[i], func(a, b Prediction) int { return cmpDesc(a.Score, b.Score) })
	}
	return out
}

func cmpDesc(a, b float32) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

func (s *Server) truncate(req *bool) bool {
	if req == nil {
		return s.cfg.AutoTruncate
	}
	return *req
}

// truncationLeft reads a request's truncation_direction as TEI does ("left" or "Left",
// "right" or "Right"; absent is right): whether a text over the maximum length is cut on the
// left, keeping its end. On another value it has answered 422.
func (s *Server) truncationLeft(w http.ResponseWriter, r *http.Request, dir string) (left, ok bool) {
	switch dir {
	case "", "right", "Right":
		return false, true
	case "left", "Left":
		return true, true
	}
	writeParamError(w, r, http.StatusUnprocessableEntity, "Validation", "truncation_direction", fmt.Sprintf("truncation_direction %q is not one of \"left\", \"right\"", dir))
	return false, false
}

// readBody checks r's Content-Type and reads its body, bounded by MaxBodyBytes; on failure
// it has answered. JSON routes take application/json only: a browser can send text/plain or
// a form to any address without asking (CORS "simple" requests), and must not be able to
// make this server compute. KServe's infer also takes its binary tensor extension.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if err := checkContentType(r); err != nil {
		writeError(w, r, http.StatusUnsupportedMediaType, "Validation", err.Error())
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, r, http.StatusRequestEntityTooLarge, "Validation", fmt.Sprintf("request body is over the limit of %d bytes: send fewer or shorter inputs", s.cfg.MaxBodyBytes))
			return nil, false
		}
		writeError(w, r, http.StatusBadRequest, "Validation", "reading the request body: "+err.Error())
		return nil, false
	}
	return body, true
}

// body is r's body: as admit read it, or read now for a route admit does not guard.
func (s *Server) body(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if ri, ok := r.Context().Value(infoKey{}).(*reqInfo); ok && ri.body != nil {
		return ri.body, true
	}
	return s.readBody(w, r)
}

// decode reads a JSON body into v, answering the client itself on failure.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	span := childSpan(r.Context(), "decode")
	defer endSpan(span)
	body, ok := s.body(w, r)
	if !ok {
		return false
	}
	if err := decodeJSON(body, v); err != nil {
		badJSON(w, r, "bad JSON body: ", err)
		return false
	}
	return true
}

// badJSON answers decodeJSON's error: 400 for a body that is not UTF-8, else 422.
func badJSON(w http.ResponseWriter, r *http.Request, what string, err error) {
	code := http.StatusUnprocessableEntity
	if errors.Is(err, errNotUTF8) {
		code = http.StatusBadRequest
	}
	writeError(w, r, code, "Validation", what+err.Error())
}

// checkInputs holds a request's texts to the limits: at least one, at most MaxInputs, and at
// most MaxInputChars characters each. Every route that takes texts calls it once, before
// tokenization. A text over MaxInputChars is cut to it in place when truncate (the request's
// effective "truncate") is set, and refused otherwise. On a violation it answers the client
// itself, naming the limit, and returns false.
func (s *Server) checkInputs(w http.ResponseWriter, r *http.Request, texts []string, truncate bool) bool {
	return s.answered(w, r, s.inputsError(texts, truncate))
}

// inputsError is checkInputs' check, as an error.
func (s *Server) inputsError(texts []string, truncate bool) error {
	if err := s.countError(len(texts), "inputs"); err != nil {
		return err
	}
	return s.charsError(texts, truncate, func(i int) string { return "input " + strconv.Itoa(i) })
}

// checkCount is checkInputs' count: n texts (or pairs, or documents) of the request field
// named field, at least one and at most MaxInputs.
func (s *Server) checkCount(w http.ResponseWriter, r *http.Request, n int, field string) bool {
	return s.answered(w, r, s.countError(n, field))
}

// countError is checkCount's check, as an error.
func (s *Server) countError(n int, field string) error {
	switch {
	case n == 0:
		return &requestError{code: http.StatusUnprocessableEntity, kind: "Empty", msg: field + " is empty: send at least one text"}
	case n > s.cfg.MaxInputs:
		return &requestError{code: http.StatusRequestEntityTooLarge, kind: "Validation", msg: fmt.Sprintf("%d %s is over the limit of %d per request (max_client_batch_size): split the request", n, field, s.cfg.MaxInputs)}
	}
	return nil
}

// answered fails the request with err, when not nil, and says whether all is well.
func (s *Server) answered(w http.ResponseWriter, r *http.Request, err error) bool {
	if err != nil {
		s.fail(w, r, err)
		return false
	}
	return true
}

// charsError is checkInputs' characters: each text at most MaxInputChars, cut in place
// when truncate, else refused; name(i) names texts[i] in the message.
func (s *Server) charsError(texts []string, truncate bool, name func(int) string) error {
	limit := s.cfg.MaxInputChars
	if limit <= 0 {
		return nil
	}
	for i, text := range texts {
		if len(text) <= limit { // a text has no more characters than bytes
			continue
		}
		chars := utf8.RuneCountInString(text)
		if chars <= limit {
			continue
		}
		if !truncate {
			return &requestError{code: http.StatusRequestEntityTooLarge, kind: "Validation", msg: fmt.Sprintf("%s has %d characters, over the limit of %d (max_input_chars): shorten it or send \"truncate\": true", name(i), chars, limit)}
		}
		texts[i] = cutChars(text, limit)
	}
	return nil
}

// cutChars returns text's first n characters.
func cutChars(text string, n int) string {
	for i := range text {
		if n == 0 {
			return text[:i]
		}
		n--
	}
	return text
}

// setTiming sets TEI's timing headers (milliseconds) and the served model/version.
func setTiming(w http.ResponseWriter, model string, st models.Stats, start time.Time) {
	h := w.Header()
	h.Set("x-model-version", model+"/"+st.Version)
	h.Set("x-compute-tokens", strconv.Itoa(st.Tokens))
	h.Set("x-tokenization-time", ms(st.Tokenize))
	h.Set("x-queue-time", ms(st.Queue))
	h.Set("x-inference-time", ms(st.Inference))
	h.Set("x-total-time", ms(time.Since(start)))
	if st.Truncated > 0 {
		h.Set("x-truncated-inputs", strconv.Itoa(st.Truncated))
	}
	if st.CacheHits > 0 {
		h.Set("x-cache-hits", strconv.Itoa(st.CacheHits))
	}
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		writeError(w, nil, http.StatusInternalServerError, "Backend", "encoding the response: "+err.Error())
		return
	}
	writeBody(w, code, "application/json", append(data, '\n'))
}
