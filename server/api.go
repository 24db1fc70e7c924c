package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
)

// Inputs is TEI's `inputs` for /embed: one string or a list of strings.
type Inputs []string

// UnmarshalJSON accepts "text" or ["a", "b"].
func (in *Inputs) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*in = Inputs{s}
		return nil
	}
	if len(data) == 0 || data[0] != '[' {
		if bytes.Equal(data, []byte("null")) {
			*in = nil
			return nil
		}
		return fmt.Errorf("inputs is %s: send a string or a list of strings", jsonKind(data))
	}
	list, err := stringList(data, "inputs")
	if err != nil {
		return err
	}
	*in = list
	return nil
}

// EmbedRequest is TEI's /embed body, plus optional model and version to pick one of many.
type EmbedRequest struct {
	Inputs    Inputs `json:"inputs"`
	Normalize *bool  `json:"normalize"` // default true, as TEI
	Truncate  *bool  `json:"truncate"`  // default: the server's auto_truncate
	// TruncationDirection is the side a text over the maximum is cut from: "right" (the
	// default: it keeps its start) or "left" (it keeps its end), as TEI spells them
	// (truncationLeft).
	TruncationDirection string `json:"truncation_direction,omitempty"`
	// PromptName names one of the model's prompts, put before each input; "": the model's
	// default prompt, else the server's --default-prompt-name (models.EmbedOptions).
	PromptName string `json:"prompt_name,omitempty"`
	// Dimensions, when set, cuts each vector to its first values (1 to the model's width,
	// or one of its model.yaml dimensions), normalized again when normalize is.
	Dimensions *int   `json:"dimensions,omitempty"`
	Model      string `json:"model,omitempty"`
	Version    string `json:"version,omitempty"`
}

// PredictInputs is TEI's `inputs` for /predict: "text" (one input), ["a", "b"] (one pair),
// or [["a"], ["b", "c"], ...] (a batch of singles and pairs). Single is true for the first
// two forms, whose response is one list of predictions rather than a list of lists.
type PredictInputs struct {
	Seqs   [][]string // each of length 1 or 2
	Single bool
}

// UnmarshalJSON follows TEI's rules for the three forms.
func (in *PredictInputs) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	const want = "inputs must be a string, a pair [string, string], or a batch [[string], [string, string], ...]"
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*in = PredictInputs{Seqs: [][]string{{s}}, Single: true}
		return nil
	}
	var items []json.RawMessage
	if len(data) == 0 || data[0] != '[' || json.Unmarshal(data, &items) != nil || len(items) == 0 {
		return errors.New(want)
	}
	if items[0][0] != '[' { // one text or one pair
		flat, err := stringList(data, "inputs")
		if err != nil {
			return err
		}
		if len(flat) > 2 {
			return errors.New(want)
		}
		*in = PredictInputs{Seqs: [][]string{flat}, Single: true}
		return nil
	}
	batch := make([][]string, len(items))
	for i, item := range items {
		seq, err := stringList(item, fmt.Sprintf("inputs[%d]", i))
		if err != nil {
			if len(item) > 0 && item[0] != '[' {
				return errors.New(want)
			}
			return err
		}
		if len(seq) == 0 || len(seq) > 2 {
			return errors.New(want)
		}
		batch[i] = seq
	}
	*in = PredictInputs{Seqs: batch}
	return nil
}

// PredictRequest is TEI's /predict body, plus optional model and version.
type PredictRequest struct {
	Inputs    PredictInputs `json:"inputs"`
	RawScores bool          `json:"raw_scores"`
	Truncate  *bool         `json:"truncate"`
	// TruncationDirection is as EmbedRequest's; a pair cut on the left keeps the end of
	// each of its texts.
	TruncationDirection string `json:"truncation_direction,omitempty"`
	Model               string `json:"model,omitempty"`
	Version             string `json:"version,omitempty"`
}

// Prediction is one label's score, as TEI returns it.
type Prediction struct {
	Score float32 `json:"score"`
	Label string  `json:"label"`
}

// ErrorResponse is TEI's error body.
type ErrorResponse struct {
	Error     string `json:"error"`
	ErrorType string `json:"error_type"`
}

// Info is /info's body.
type Info struct {
	Version        string      `json:"version"`
	ORTVersion     string      `json:"ort_version"`
	Device         string      `json:"device"`   // what was asked for
	Provider       string      `json:"provider"` // what runs
	FallbackReason string      `json:"fallback_reason,omitempty"`
	Models         []ModelInfo `json:"models"`
	MaxInputs      int         `json:"max_client_batch_size"`
	AutoTruncate   bool        `json:"auto_truncate"`
}

// ModelInfo describes one served model.
type ModelInfo struct {
	Name           string   `json:"name"`
	Task           string   `json:"task"`
	MaxLength      int      `json:"max_input_length"`
	Versions       []string `json:"versions"`
	DefaultVersion string   `json:"default_version"`
	Pooling        string   `json:"pooling,omitempty"`
	Labels         []string `json:"labels,omitempty"`
	// Dimension is the output vector's length: hidden size or number of labels (0: unknown).
	Dimension int `json:"dimension,omitempty"`
	// Traffic is the weighted split of requests that name no version, if any.
	Traffic map[string]int `json:"traffic,omitempty"`
	// Reloads counts successful hot reloads; ReloadError says why the last one failed.
	Reloads     int    `json:"reloads"`
	ReloadError string `json:"reload_error,omitempty"`
	// Scheduling is, per version, the batcher's learned cost curve and its SLO controller's
	// state (docs/api.md).
	Scheduling map[string]runtime.SchedulerState `json:"scheduling,omitempty"`
	// VersionStates is, per version, when it loads (eager or lazy), whether it has (ready,
	// unloaded, loading, failed) and what it holds: sessions, streams, whether they share
	// weights, where its calibration came from.
	VersionStates map[string]models.VersionState `json:"version_states,omitempty"`
}
