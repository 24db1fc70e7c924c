package tokenize_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/ortserve/ortserve/tokenize"
)

func TestPad(t *testing.T) {
	tests := []struct {
		name       string
		encs       []tokenize.Encoding
		rows, cols int
		ids, mask  []int64
	}{
		{"one", []tokenize.Encoding{{IDs: []int64{101, 7, 102}, TypeIDs: []int64{0, 0, 0}}}, 1, 3,
			[]int64{101, 7, 102}, []int64{1, 1, 1}},
		{"pads to longest", []tokenize.Encoding{{IDs: []int64{101, 102}}, {IDs: []int64{101, 5, 6, 102}}}, 2, 4,
			[]int64{101, 102, 0, 0, 101, 5, 6, 102}, []int64{1, 1, 0, 0, 1, 1, 1, 1}},
		{"empty encoding keeps a column", []tokenize.Encoding{{}}, 1, 1, []int64{0}, []int64{0}},
		{"no encodings", nil, 0, 1, []int64{}, []int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tokenize.Pad(tt.encs)
			if b.Rows != tt.rows || b.Cols != tt.cols || !slices.Equal(b.InputIDs, tt.ids) || !slices.Equal(b.AttentionMask, tt.mask) {
				t.Errorf("got %d×%d ids %v mask %v", b.Rows, b.Cols, b.InputIDs, b.AttentionMask)
			}
			if len(b.TypeIDs) != len(b.InputIDs) {
				t.Errorf("type ids %d long, ids %d", len(b.TypeIDs), len(b.InputIDs))
			}
			want := 0
			for _, e := range tt.encs {
				want += e.Len()
			}
			if b.Tokens() != want {
				t.Errorf("tokens %d, want %d", b.Tokens(), want)
			}
		})
	}
}

func TestPack(t *testing.T) {
	tests := []struct {
		name            string
		encs            []tokenize.Encoding
		cols            int
		ids, mask, ty   []int64
		lengths, starts []int
	}{
		{"one", []tokenize.Encoding{{IDs: []int64{101, 7, 102}, TypeIDs: []int64{0, 0, 0}}}, 3,
			[]int64{101, 7, 102}, []int64{1, 1, 1}, []int64{0, 0, 0}, []int{3}, []int{0}},
		{"end to end, numbered", []tokenize.Encoding{{IDs: []int64{101, 102}}, {IDs: []int64{101, 5, 6, 102}, TypeIDs: []int64{0, 0, 1, 1}}}, 6,
			[]int64{101, 102, 101, 5, 6, 102}, []int64{1, 1, 2, 2, 2, 2}, []int64{0, 0, 0, 0, 1, 1}, []int{2, 4}, []int{0, 2}},
		{"an empty encoding takes no column but keeps its number", []tokenize.Encoding{{IDs: []int64{9}}, {}, {IDs: []int64{8}}}, 2,
			[]int64{9, 8}, []int64{1, 3}, []int64{0, 0}, []int{1, 0, 1}, []int{0, 1, 1}},
		{"all empty keeps a padding column", []tokenize.Encoding{{}, {}}, 1, []int64{0}, []int64{0}, []int64{0}, []int{0, 0}, []int{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tokenize.Pack(tt.encs)
			if b.Rows != 1 || b.Cols != tt.cols || !b.Packed {
				t.Fatalf("got %d×%d packed %v, want 1×%d packed", b.Rows, b.Cols, b.Packed, tt.cols)
			}
			if !slices.Equal(b.InputIDs, tt.ids) || !slices.Equal(b.AttentionMask, tt.mask) || !slices.Equal(b.TypeIDs, tt.ty) ||
				!slices.Equal(b.Lengths, tt.lengths) || !slices.Equal(b.Starts, tt.starts) {
				t.Errorf("got ids %v mask %v types %v lengths %v starts %v", b.InputIDs, b.AttentionMask, b.TypeIDs, b.Lengths, b.Starts)
			}
		})
	}
}

func TestPackRows(t *testing.T) {
	a := tokenize.Encoding{IDs: []int64{101, 1, 102}, TypeIDs: []int64{0, 0, 0}}
	b := tokenize.Encoding{IDs: []int64{101, 102}, TypeIDs: []int64{0, 1}}
	c := tokenize.Encoding{IDs: []int64{101, 2, 3, 4, 102}, TypeIDs: []int64{0, 0, 0, 0, 0}}
	tests := []struct {
		name            string
		encs            []tokenize.Encoding
		rows            [][]int
		wantRows, cols  int
		ids, mask, ty   []int64
		lengths, starts []int
	}{
		{"rows padded to the fullest, each numbered from 1, order of encs kept",
			[]tokenize.Encoding{a, b, c}, [][]int{{2}, {1, 0}}, 2, 5,
			[]int64{101, 2, 3, 4, 102, 101, 102, 101, 1, 102},
			[]int64{1, 1, 1, 1, 1, 1, 1, 2, 2, 2},
			[]int64{0, 0, 0, 0, 0, 0, 1, 0, 0, 0},
			[]int{3, 2, 5}, []int{7, 5, 0}},
		{"a short row's padding is zeros",
			[]tokenize.Encoding{a, b, c}, [][]int{{0, 1}, {2}}, 2, 5,
			[]int64{101, 1, 102, 101, 102, 101, 2, 3, 4, 102},
			[]int64{1, 1, 1, 2, 2, 1, 1, 1, 1, 1},
			[]int64{0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
			[]int{3, 2, 5}, []int{0, 3, 5}},
		{"uneven rows",
			[]tokenize.Encoding{b, c}, [][]int{{0}, {1}}, 2, 5,
			[]int64{101, 102, 0, 0, 0, 101, 2, 3, 4, 102},
			[]int64{1, 1, 0, 0, 0, 1, 1, 1, 1, 1},
			[]int64{0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
			[]int{2, 5}, []int{0, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tokenize.PackRows(tt.encs, tt.rows)
			if got.Rows != tt.wantRows || got.Cols != tt.cols || !got.Packed {
				t.Fatalf("got %d×%d packed %v, want %d×%d packed", got.Rows, got.Cols, got.Packed, tt.wantRows, tt.cols)
			}
			if !slices.Equal(got.InputIDs, tt.ids) || !slices.Equal(got.AttentionMask, tt.mask) || !slices.Equal(got.TypeIDs, tt.ty) ||
				!slices.Equal(got.Lengths, tt.lengths) || !slices.Equal(got.Starts, tt.starts) {
				t.Errorf("got ids %v mask %v types %v lengths %v starts %v", got.InputIDs, got.AttentionMask, got.TypeIDs, got.Lengths, got.Starts)
			}
		})
	}
}

func TestTooLongError(t *testing.T) {
	var err error = &tokenize.TooLongError{Index: 2, Tokens: 300, Max: 256}
	if !errors.Is(err, tokenize.ErrTooLong) || err.Error() != "tokenize: input 2 has 300 tokens, more than the model's maximum of 256" {
		t.Errorf("%v", err)
	}
}

func BenchmarkPad(b *testing.B) {
	encs := make([]tokenize.Encoding, 32)
	for i := range encs {
		encs[i].IDs = make([]int64, 16+i)
		encs[i].TypeIDs = make([]int64, 16+i)
	}
	b.ReportAllocs()
	for b.Loop() {
		tokenize.Pad(encs)
	}
}
