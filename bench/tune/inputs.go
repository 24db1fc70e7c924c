package tune

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/models"
)

// WorkloadInfo is what the cache lever needs to know of the workload.
type WorkloadInfo struct {
	Source   string  `json:"source"`
	Texts    int     `json:"texts"`
	Distinct int     `json:"distinct"`
	Repeat   float64 `json:"repeat_ratio"` // 1 − distinct/texts: how often a text repeats an earlier one in the file
	// FitBytes is a response cache that holds every distinct text's answer, by the cache's
	// own accounting, with a quarter to spare, in whole MiB.
	FitBytes int64 `json:"fit_bytes"`
}

// DescribeWorkload counts w's distinct texts and sizes a cache for them; outFloats is the
// length of one answer (classes, or the embedding's dimension).
func DescribeWorkload(w *bench.Workload, outFloats int) WorkloadInfo {
	seen := map[string]bool{}
	var bytes int64
	for _, t := range w.Texts {
		if !seen[t] {
			seen[t] = true
			bytes += int64(len(t)) + 4*int64(outFloats) + 128 // models/cache.go's entry size
		}
	}
	info := WorkloadInfo{Source: w.Source, Texts: len(w.Texts), Distinct: len(seen)}
	if info.Texts > 0 {
		info.Repeat = 1 - float64(info.Distinct)/float64(info.Texts)
	}
	const mib = 1 << 20
	info.FitBytes = max(1, (bytes*5/4+mib-1)/mib) * mib
	return info
}

// replayRepeat is the fraction of n requests that repeated a text the server had already
// answered, when the replay cycles through the workload's texts.
func (w WorkloadInfo) replayRepeat(n int) float64 {
	if n <= 0 {
		return 0
	}
	seen := min(n, w.Texts)
	distinct := float64(seen) * float64(w.Distinct) / float64(max(1, w.Texts))
	return 1 - distinct/float64(n)
}

// GateReport is what tune reads of a `server gate --json` report: which version was held
// against which, and whether it passed.
type GateReport struct {
	File      string
	Model     string
	Baseline  string
	Candidate string
	Pass      bool
	Reasons   []string
}

// GateSchema is the gate report layout tune reads.
const GateSchema = "ortserve.gate/v1"

// ReadGateReport reads the fields tune needs from a gate report, and refuses a file that is
// not one.
func ReadGateReport(path string) (GateReport, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return GateReport{}, fmt.Errorf("tune: gate report: %w", err)
	}
	var doc struct {
		Schema   string `json:"schema"`
		Model    string `json:"model"`
		Baseline struct {
			Version string `json:"version"`
		} `json:"baseline"`
		Candidate struct {
			Version string `json:"version"`
		} `json:"candidate"`
		Verdict struct {
			Pass    *bool    `json:"pass"`
			Reasons []string `json:"reasons"`
		} `json:"verdict"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return GateReport{}, fmt.Errorf("tune: gate report %s: %w", path, err)
	}
	switch {
	case doc.Schema != GateSchema:
		return GateReport{}, fmt.Errorf("tune: %s is not a gate report (schema %q, want %q): write one with `server gate --json FILE`", path, doc.Schema, GateSchema)
	case doc.Candidate.Version == "" || doc.Baseline.Version == "" || doc.Verdict.Pass == nil:
		return GateReport{}, fmt.Errorf("tune: gate report %s has no baseline, candidate or verdict", path)
	}
	return GateReport{File: path, Model: doc.Model, Baseline: doc.Baseline.Version, Candidate: doc.Candidate.Version,
		Pass: *doc.Verdict.Pass, Reasons: doc.Verdict.Reasons}, nil
}

// VersionChoice is one of the model's other versions and whether tune may serve it.
type VersionChoice struct {
	Version string
	Allowed bool
	Why     string
}

// VersionChoices decides, for each of versions other than baseline, whether the precision
// lever may try it: only with a passing gate report for the same model that held that version
// against baseline. Accuracy is never traded without one.
func VersionChoices(model, baseline string, versions []string, reports []GateReport) []VersionChoice {
	var out []VersionChoice
	for _, v := range slices.Sorted(slices.Values(versions)) {
		if v == baseline {
			continue
		}
		c := VersionChoice{Version: v, Why: v + " not tried: no passing gate report (give one with --gate FILE from `server gate --model " + model + " --candidate " + v + " --json FILE`)"}
		for _, r := range reports {
			if r.Candidate != v || r.Model != model {
				continue
			}
			switch {
			case r.Baseline != baseline:
				c.Why = fmt.Sprintf("%s not tried: its gate report %s holds it against %s, not %s", v, r.File, r.Baseline, baseline)
			case !r.Pass:
				c.Why = fmt.Sprintf("%s not tried: its gate report %s failed: %s", v, r.File, strings.Join(r.Reasons, "; "))
			default:
				c = VersionChoice{Version: v, Allowed: true, Why: fmt.Sprintf("%s may be tried: gate report %s passed against %s", v, r.File, baseline)}
			}
			if c.Allowed {
				break
			}
		}
		out = append(out, c)
	}
	return out
}

// Pinned lists the levers a model's own model.yaml fixes, since its values override the
// server's: tuning them at the server would change nothing for this model.
func Pinned(cfg models.Config) map[Lever]string {
	out := map[Lever]string{}
	pin := func(l Lever, set bool, key string, v any) {
		if set {
			out[l] = fmt.Sprintf("%s not tried: %s's model.yaml sets %s %v, which overrides the server's", l, cfg.Name, key, v)
		}
	}
	b := cfg.Batching
	pin(LeverQueueDelay, b.MaxQueueDelay != 0, "batching.max_queue_delay", b.MaxQueueDelay)
	pin(LeverMaxBatch, b.MaxBatchSize != 0, "batching.max_batch_size", b.MaxBatchSize)
	pin(LeverBatchTokens, b.MaxBatchTokens != 0, "batching.max_batch_tokens", b.MaxBatchTokens)
	pin(LeverSessions, cfg.Instances != 0, "instances", cfg.Instances)
	if len(cfg.Traffic) > 0 {
		out[LeverVersion] = fmt.Sprintf("version not tried: %s's model.yaml splits traffic between versions (%v)", cfg.Name, cfg.Traffic)
	}
	return out
}

// BatchModel is the cost of one batch as a line, latency ≈ base + per item × batch, fitted
// to offline runs at several batch sizes. It guides which lever values to try first; it
// decides nothing.
type BatchModel struct {
	BaseMs    float64              `json:"base_ms"`
	PerItemMs float64              `json:"per_item_ms"`
	FitUpTo   int                  `json:"fit_up_to"`  // the line is fitted to batch sizes up to this
	BestBatch int                  `json:"best_batch"` // the measured batch size with the most texts/s
	BestItems float64              `json:"best_items_per_s"`
	Points    []bench.OfflinePoint `json:"points"`
}

// FitBatchModel fits the line by least squares to the batch sizes up to twice the best one
// (at least 4): past it, padding to the longest text of a bigger batch bends the cost
// upwards and no line fits. ok is false with fewer than two batch sizes to fit.
func FitBatchModel(pts []bench.OfflinePoint) (m BatchModel, ok bool) {
	m.Points = pts
	for _, p := range pts {
		if p.ItemsPerS > m.BestItems {
			m.BestBatch, m.BestItems = p.Batch, p.ItemsPerS
		}
	}
	m.FitUpTo = max(4, 2*m.BestBatch)
	var sx, sy, sxx, sxy, n float64
	for _, p := range pts {
		if p.Batch > m.FitUpTo {
			continue
		}
		x := float64(p.Batch)
		sx, sy, sxx, sxy, n = sx+x, sy+p.P50, sxx+x*x, sxy+x*p.P50, n+1
	}
	den := n*sxx - sx*sx
	if n < 2 || den == 0 {
		return m, false
	}
	m.PerItemMs = (n*sxy - sx*sy) / den
	m.BaseMs = (sy - m.PerItemMs*sx) / n
	return m, !math.IsNaN(m.PerItemMs)
}

// batchingPays says whether bigger batches bought throughput offline: the best batch size
// is over 1 and beats batch 1 by more than 10%.
func (m BatchModel) batchingPays() bool {
	var one float64
	for _, p := range m.Points {
		if p.Batch == 1 {
			one = p.ItemsPerS
		}
	}
	return m.BestBatch > 1 && m.BestItems > 1.1*one
}

func (m BatchModel) String() string {
	return fmt.Sprintf("offline batch cost ≈ %.2f ms + %.2f ms × batch (batches up to %d); most texts/s at batch %d (%.0f/s)", m.BaseMs, m.PerItemMs, m.FitUpTo, m.BestBatch, m.BestItems)
}
