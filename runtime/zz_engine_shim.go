package runtime

// TEMPORARY: stands in for the batcher redesign's API until it lands.

import (
	"context"

	"github.com/ortserve/ortserve/tokenize"
)

func CalibrationBatches(most int, packed bool) []tokenize.Batch { return nil }
func SyntheticBatch(rows, cols int) tokenize.Batch             { return tokenize.Batch{} }
func (p *Pool) RunBatch(ctx context.Context, encs []tokenize.Encoding, packed bool) ([]Tensor, error) {
	return nil, nil
}
