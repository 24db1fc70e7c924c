package engine

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/ortserve/ortserve/runtime/inspect"
	"github.com/ortserve/ortserve/runtime/onnx"
	"github.com/ortserve/ortserve/runtime/ort"
)

// Package inspect keeps its own copy of runtime/ort's Placement and provider names, since
// runtime/ort is cgo: they must agree field for field, in JSON, and in name.
func TestPlacementView(t *testing.T) {
	for _, pair := range [][2]reflect.Type{
		{reflect.TypeFor[ort.Placement](), reflect.TypeFor[inspect.Placement]()},
		{reflect.TypeFor[ort.ProviderCount](), reflect.TypeFor[inspect.ProviderCount]()},
		{reflect.TypeFor[ort.OpPlacement](), reflect.TypeFor[inspect.OpPlacement]()},
		{reflect.TypeFor[ort.PlacedNode](), reflect.TypeFor[inspect.PlacedNode]()},
	} {
		o, v := pair[0], pair[1]
		if o.NumField() != v.NumField() {
			t.Errorf("%v has %d fields, %v %d", o, o.NumField(), v, v.NumField())
			continue
		}
		for i := range o.NumField() {
			of, vf := o.Field(i), v.Field(i)
			if of.Name != vf.Name || of.Tag != vf.Tag || of.Type.Kind() != vf.Type.Kind() {
				t.Errorf("%v.%s %s `%s` and %v.%s %s `%s` differ", o, of.Name, of.Type, of.Tag, v, vf.Name, vf.Type, vf.Tag)
			}
		}
	}

	full := ort.Placement{
		Provider: ort.ProviderCUDA, Nodes: 8, QuantizedNodes: 3,
		Providers: []ort.ProviderCount{{Provider: string(ort.ProviderCUDA), Nodes: 5}, {Provider: string(ort.ProviderCPU), Nodes: 3}},
		Ops: []ort.OpPlacement{
			{Op: "MatMulInteger", Provider: string(ort.ProviderCPU), Nodes: 3, Quantized: true},
			{Op: "Add", Provider: string(ort.ProviderCUDA), Nodes: 5},
		},
		Fallback: []ort.PlacedNode{{Name: "a", Op: "MatMulInteger"}, {Op: "MatMulInteger"}, {Name: "c", Op: "MatMulInteger"}},
	}
	for _, p := range []ort.Placement{full, {}, {Provider: ort.ProviderCPU, Providers: []ort.ProviderCount{}, Ops: []ort.OpPlacement{}}} {
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(placementView(p))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("placementView's JSON\n%s\nwant runtime/ort's\n%s", got, want)
		}
	}

	m := onnx.ModelInfo{Nodes: 3}
	for _, tt := range []struct {
		provider ort.Provider
		placed   string
	}{
		{ort.ProviderCPU, "all:" + string(ort.ProviderCPU)},
		{ort.ProviderCUDA, ort.ProviderUnknown},
	} {
		if kv := inspect.Summary(m, nil, string(tt.provider)); !slices.Equal(kv[len(kv)-2:], []any{"placed", tt.placed}) {
			t.Errorf("summary on %s without a placement %v; want placed=%s", tt.provider, kv, tt.placed)
		}
	}
	if got := inspect.FallbackOps(*placementView(full)); got != "MatMulInteger:3" {
		t.Errorf("fallback ops %q; want the ops on %s", got, ort.ProviderCPU)
	}
}
