package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/lifecycle"
	"github.com/toolgate/toolgate/txn"
)

// divergence is a deterministic tool that returned different outputs for
// one input (RFC-0001 4.2.5): the canonical hashes the records hold make
// it visible after the fact.
type divergence struct {
	Tool       string   `json:"tool"`       // id@version
	InputHash  string   `json:"inputHash"`  // the input
	Outputs    int      `json:"outputs"`    // distinct output hashes
	Executions []string `json:"executions"` // one COMPLETED attempt per distinct output
}

// determinismCheck collects the COMPLETED records of deterministic tools
// and finds the inputs with more than one output.
type determinismCheck struct {
	deterministic map[string]bool                 // id@version
	seen          map[[2]string]map[string]string // (tool, input) -> output hash -> an execution
	order         [][2]string                     // (tool, input) in first-seen order
}

func newDeterminismCheck(deterministic map[string]bool) *determinismCheck {
	return &determinismCheck{deterministic: deterministic, seen: map[[2]string]map[string]string{}}
}

func (d *determinismCheck) add(r *txn.Record) {
	key := r.ToolID + "@" + r.ToolVersion
	if !d.deterministic[key] || r.State != string(lifecycle.Completed) || r.InputHash == "" {
		return
	}
	k := [2]string{key, r.InputHash}
	outs := d.seen[k]
	if outs == nil {
		outs = map[string]string{}
		d.seen[k] = outs
		d.order = append(d.order, k)
	}
	if _, ok := outs[r.OutputHash]; !ok {
		outs[r.OutputHash] = r.ExecutionID
	}
}

func (d *determinismCheck) result() []divergence {
	out := []divergence{}
	for _, k := range d.order {
		outs := d.seen[k]
		if len(outs) < 2 {
			continue
		}
		var ids []string
		for _, id := range outs {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		out = append(out, divergence{Tool: k[0], InputHash: k[1], Outputs: len(outs), Executions: ids})
	}
	return out
}

func writeDivergences(w io.Writer, ds []divergence) {
	if len(ds) == 0 {
		return
	}
	fmt.Fprintf(w, "\nNot deterministic: %d inputs of tools declared deterministic gave different outputs:\n", len(ds))
	for _, d := range ds {
		fmt.Fprintf(w, "  %s input %s: %d outputs (executions %s)\n", d.Tool, d.InputHash[:min(12, len(d.InputHash))], d.Outputs, strings.Join(d.Executions, ", "))
	}
}
