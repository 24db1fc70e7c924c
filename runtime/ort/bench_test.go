//go:build cgo && ort

package ort_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ortserve/ortserve/tokenize"
)

// Benchmarks of real sessions on the real models: docs/performance.md gives their figures.

func BenchmarkSession(b *testing.B) {
	for _, v := range []string{"fp32", "int8"} {
		s, err := env.NewSession(modelFile("minilm", v), cpu("last_hidden_state"))
		if err != nil {
			b.Fatal(err)
		}
		for _, rows := range []int{1, 8, 32} {
			for _, cols := range []int{1, 16, 18, 64} {
				bt := batch(rows, cols)
				b.Run(fmt.Sprintf("%s/batch=%d/seq=%d", v, rows, cols), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, err := s.Run(context.Background(), bt); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N*rows)/b.Elapsed().Seconds(), "texts/s")
				})
			}
		}
		s.Close()
	}
}

// BenchmarkRunAfterIdle is one batch-1 run (16 tokens) back to back with the last, and after
// the CPU sat idle for the gap between requests at 40 rps (25 ms; the gap is not timed). A
// server at low load sees the second: `bench --offline`'s raw p50 is the first. Run it pinned
// to one core (taskset -c 1) for the figure docs/performance.md gives.
func BenchmarkRunAfterIdle(b *testing.B) {
	for _, v := range []string{"fp32", "int8"} {
		s, err := env.NewSession(modelFile("minilm", v), cpu("last_hidden_state"))
		if err != nil {
			b.Fatal(err)
		}
		bt := batch(1, 16)
		for _, gap := range []time.Duration{0, 25 * time.Millisecond} {
			b.Run(fmt.Sprintf("%s/gap=%v", v, gap), func(b *testing.B) {
				for b.Loop() {
					if gap > 0 {
						b.StopTimer()
						time.Sleep(gap)
						b.StartTimer()
					}
					if _, err := s.Run(context.Background(), bt); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		s.Close()
	}
}

// BenchmarkPacking runs the same texts four ways: one run each (alone), one padded batch,
// one packed batch in one row (tokenize.Pack), and one packed batch in rows as wide as the
// longest text (tokenize.PackRows, rowsOfLongest). The texts' lengths cycle
// through those of short requests like bench's built-in set (p50 18 tokens, a long one of 60).
// texts/s is the figure; docs/performance.md gives it, pinned with taskset -c 1.
func BenchmarkPacking(b *testing.B) {
	lengths := []int{18, 12, 24, 16, 60, 20, 9, 18}
	for _, v := range []string{"fp32", "int8"} {
		s, err := env.NewSession(modelFile("minilm", v), cpu("last_hidden_state"))
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 2, 4, 8, 16} {
			encs := make([]tokenize.Encoding, n)
			for i := range encs {
				encs[i] = encoding(i, lengths[i%len(lengths)])
			}
			for _, mode := range []string{"alone", "padded", "packed", "rows"} {
				var runs []tokenize.Batch
				switch mode {
				case "alone":
					for i := range encs {
						runs = append(runs, tokenize.Pad(encs[i:i+1]))
					}
				case "padded":
					runs = []tokenize.Batch{tokenize.Pad(encs)}
				case "packed":
					runs = []tokenize.Batch{tokenize.Pack(encs)}
				case "rows":
					runs = []tokenize.Batch{tokenize.PackRows(encs, rowsOfLongest(encs))}
				}
				b.Run(fmt.Sprintf("%s/texts=%d/%s", v, n, mode), func(b *testing.B) {
					for b.Loop() {
						for _, r := range runs {
							if _, err := s.Run(context.Background(), r); err != nil {
								b.Fatal(err)
							}
						}
					}
					b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "texts/s")
				})
			}
		}
		s.Close()
	}
}

// rowsOfLongest lays encodings out in packed rows as wide as the longest of them, filled
// first-fit longest first: the narrowest layout the batcher's packRows tries.
func rowsOfLongest(encs []tokenize.Encoding) [][]int {
	order := make([]int, len(encs))
	width := 1
	for i, e := range encs {
		order[i], width = i, max(width, e.Len())
	}
	slices.SortStableFunc(order, func(a, c int) int { return encs[c].Len() - encs[a].Len() })
	var rows [][]int
	var fill []int
	for _, i := range order {
		k := slices.IndexFunc(fill, func(f int) bool { return f+encs[i].Len() <= width })
		if k < 0 {
			rows, fill, k = append(rows, nil), append(fill, 0), len(fill)
		}
		rows[k], fill[k] = append(rows[k], i), fill[k]+encs[i].Len()
	}
	return rows
}
