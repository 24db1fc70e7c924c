package server

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ortserve/ortserve/runtime"
)

// The check against batch 1 reaches the metrics at scrape time, one series a class measured,
// by the bands /info shows, and the fallbacks as a counter.
func TestMetricsShowTheCheckAgainstBatchOne(t *testing.T) {
	var st runtime.SchedulerState
	st.Check = runtime.BatchCheck{Fallbacks: 2, Classes: []runtime.ClassCheck{
		{Rows: "1", Tokens: "1-32", RealisedMs: 1, PredictedMs: 1.2, VsBatch1: 1, Allowed: true},
		{Rows: "5-8", Tokens: "1-32", RealisedMs: 1.5, PredictedMs: 0.5, VsBatch1: 1.5},
	}}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.describeFrom(func() []ModelInfo {
		return []ModelInfo{{Name: "emb", Versions: []string{"v1"}, Scheduling: map[string]runtime.SchedulerState{"v1": st}}}
	})
	want := `
# HELP ortserve_batch_allowed 1 while the version's batcher forms batches of the class, 0 once it has stopped for measuring them dearer than batch 1.
# TYPE ortserve_batch_allowed gauge
ortserve_batch_allowed{model="emb",rows="1",tokens="1-32",version="v1"} 1
ortserve_batch_allowed{model="emb",rows="5-8",tokens="1-32",version="v1"} 0
# HELP ortserve_batch_fallbacks_total Times the version's batcher stopped forming a class of batch for measuring it dearer per text than batch 1.
# TYPE ortserve_batch_fallbacks_total counter
ortserve_batch_fallbacks_total{model="emb",version="v1"} 2
# HELP ortserve_batch_predicted_cost_per_text_seconds What the cost model predicted per text for the version's batches of the class, per text of the band's upper bound.
# TYPE ortserve_batch_predicted_cost_per_text_seconds gauge
ortserve_batch_predicted_cost_per_text_seconds{model="emb",rows="1",tokens="1-32",version="v1"} 0.0012
ortserve_batch_predicted_cost_per_text_seconds{model="emb",rows="5-8",tokens="1-32",version="v1"} 0.0005
# HELP ortserve_batch_realised_cost_per_text_seconds Measured run time per text of the version's batches of the class (rows: texts a batch; tokens: its longest text, padded, or its mean, packed), per text of the band's upper bound; rows 1 is batch 1.
# TYPE ortserve_batch_realised_cost_per_text_seconds gauge
ortserve_batch_realised_cost_per_text_seconds{model="emb",rows="1",tokens="1-32",version="v1"} 0.001
ortserve_batch_realised_cost_per_text_seconds{model="emb",rows="5-8",tokens="1-32",version="v1"} 0.0015
# HELP ortserve_batch_vs_batch1_ratio Measured run time of the version's batches of the class over what their texts took in batches of one row: above 1, batching the class loses.
# TYPE ortserve_batch_vs_batch1_ratio gauge
ortserve_batch_vs_batch1_ratio{model="emb",rows="1",tokens="1-32",version="v1"} 1
ortserve_batch_vs_batch1_ratio{model="emb",rows="5-8",tokens="1-32",version="v1"} 1.5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ortserve_batch_allowed", "ortserve_batch_fallbacks_total",
		"ortserve_batch_predicted_cost_per_text_seconds", "ortserve_batch_realised_cost_per_text_seconds", "ortserve_batch_vs_batch1_ratio"); err != nil {
		t.Error(err)
	}
}
