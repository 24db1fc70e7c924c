package inspect

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ortserve/ortserve/runtime/onnx"
)

// WriteHeader writes the text report's first lines: ONNX Runtime's version, the device asked
// for and the provider given, and why CUDA is not used if it was asked for.
func WriteHeader(w io.Writer, r Report) error {
	fmt.Fprintf(w, "ONNX Runtime %s; device %s: %s", r.ORTVersion, r.Device, r.Provider)
	if r.FallbackReason != "" {
		fmt.Fprintf(w, " (CUDA unavailable, placing on CPU: %s)", r.FallbackReason)
	}
	_, err := fmt.Fprint(w, "\n\n")
	return err
}

// WriteFile writes one file's part of the text report.
func WriteFile(w io.Writer, f File) error {
	m := f.File
	title := m.Path
	if f.Model != "" {
		title = fmt.Sprintf("%s/%s  %s", f.Model, f.Version, m.Path)
		if len(f.Devices) > 0 {
			title += fmt.Sprintf("  (devices: %s)", strings.Join(f.Devices, ", "))
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\n", title)
	opsets := make([]string, len(m.Opsets))
	for i, o := range m.Opsets {
		opsets[i] = fmt.Sprintf("%s %d", o.Domain, o.Version)
	}
	fmt.Fprintf(tw, "  file\t%s, IR version %d, produced by %s, opsets %s\n", mib(m.Size), m.IRVersion,
		cmp.Or(strings.TrimSpace(m.Producer+" "+m.ProducerVersion), "(unknown)"), cmp.Or(strings.Join(opsets, ", "), "(none)"))
	for i, vs := range [][]onnx.IOInfo{m.Inputs, m.Outputs} {
		label := [2]string{"inputs", "outputs"}[i]
		for j, v := range vs {
			if j > 0 {
				label = ""
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", label, v.Name, v.Type, onnx.ShapeString(v.Shape))
		}
	}
	fp16 := "no"
	if m.FP16Initializers > 0 || m.FP16Casts > 0 {
		fp16 = fmt.Sprintf("%d of %d initializers, %d Cast nodes to float16", m.FP16Initializers, m.Initializers, m.FP16Casts)
	}
	fmt.Fprintf(tw, "  graph\t%d nodes, %d quantized; fp16: %s\n", m.Nodes, m.QuantizedNodes, fp16)
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(w, "  operators in the file (* quantized):\n")
	rows := make([][]string, len(m.Ops))
	for i, o := range m.Ops {
		op := o.Op
		if o.Domain != "ai.onnx" {
			op = o.Domain + "." + op
		}
		if o.Quantized {
			op += "*"
		}
		rows[i] = []string{op, strconv.Itoa(o.Nodes)}
	}
	writeTable(w, "    ", rows)

	switch p := f.Place; p {
	case nil:
		fmt.Fprintf(w, "  placement: not seen: %s\n", f.PlaceError)
	default:
		fmt.Fprintf(w, "  placement on %s, from ONNX Runtime's profile of one run:\n", p.Provider)
		fmt.Fprintf(w, "    %d nodes after ONNX Runtime's graph optimizations (the file has %d); %d quantized\n", p.Nodes, m.Nodes, p.QuantizedNodes)
		writePlacementTable(w, *p)
		switch {
		case p.Provider == providerCPU:
		case len(p.Fallback) == 0:
			fmt.Fprintf(w, "    no node fell back to CPU\n")
		default:
			fmt.Fprintf(w, "    %d nodes fell back to CPU:\n", len(p.Fallback))
			for _, n := range p.Fallback {
				fmt.Fprintf(w, "      %s (%s)\n", cmp.Or(n.Name, "(unnamed)"), n.Op)
			}
		}
	}
	_, err := fmt.Fprintf(w, "  summary: %s (took %s)\n\n", f.Summary, f.Took)
	return err
}

// mib formats a size in bytes.
func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// writePlacementTable writes the nodes per operator, a column per provider, most nodes first.
func writePlacementTable(w io.Writer, p Placement) {
	col := map[string]int{}
	head := []string{"operator (* quantized)"}
	all := []string{"all"}
	for i, c := range p.Providers {
		col[c.Provider] = i
		head = append(head, c.Provider)
		all = append(all, strconv.Itoa(c.Nodes))
	}
	counts := map[string][]int{}
	totals := map[string]int{}
	var ops []string
	for _, o := range p.Ops {
		if counts[o.Op] == nil {
			counts[o.Op] = make([]int, len(p.Providers))
			ops = append(ops, o.Op)
		}
		counts[o.Op][col[o.Provider]] += o.Nodes
		totals[o.Op] += o.Nodes
	}
	slices.SortStableFunc(ops, func(a, b string) int { return totals[b] - totals[a] })
	rows := [][]string{head, all}
	for _, op := range ops {
		row := []string{op}
		if onnx.IsQuantizedOp(op) {
			row[0] += "*"
		}
		for _, n := range counts[op] {
			row = append(row, strconv.Itoa(n))
		}
		rows = append(rows, row)
	}
	writeTable(w, "    ", rows)
}

// writeTable writes rows as columns: the first left-aligned, the others right-aligned.
func writeTable(w io.Writer, indent string, rows [][]string) {
	var width []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len(cell))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		b.WriteString(indent)
		for i, cell := range row {
			if i == 0 {
				fmt.Fprintf(&b, "%-*s", width[0], cell)
			} else {
				fmt.Fprintf(&b, "  %*s", width[i], cell)
			}
		}
		fmt.Fprintln(w, b.String())
	}
}
