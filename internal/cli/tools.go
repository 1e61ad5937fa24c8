package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/mcp"
	"github.com/toolgate/toolgate/tools"
)

func newToolsCmd(g *globals, stdio Stdio) *cobra.Command {
	return &cobra.Command{
		Use:   "tools",
		Short: "List the registered tools",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			g.ownWarnings = true // shown below, once
			reg, err := g.registry()
			if err != nil {
				return err
			}
			entries := reg.Entries()
			var leftOut []string
			if g.gateway != nil {
				leftOut = g.gateway.Warnings()
			}
			if g.json {
				for _, l := range leftOut {
					fmt.Fprintf(stdio.Err, "toolgate: --registry: %s\n", l)
				}
				return encodeJSON(stdio, entries)
			}
			tw := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOOL\tVERSION\tCAPABILITIES\tDESCRIPTION")
			for _, e := range entries {
				d := e.Declaration()
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.ID, d.Version, strings.Join(declaredCaps(d), ","), d.Description)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			writeUpstreamNotes(stdio.Out, entries, leftOut)
			return nil
		},
	}
}

func newDescribeCmd(g *globals, stdio Stdio) *cobra.Command {
	return &cobra.Command{
		Use:   "describe TOOL[@VERSION]",
		Short: "Show a tool's declaration with its schemas",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			d := e.Declaration()
			if g.json {
				return encodeJSON(stdio, d)
			}
			w := stdio.Out
			fmt.Fprintf(w, "%s@%s  %s\n%s\n\n", d.ID, d.Version, d.Name, d.Description)
			if server, name, ok := mcp.Upstream(e.Tool()); ok {
				fmt.Fprintf(w, "Upstream:              the tool %q of the MCP server %s\n", name, server)
			}
			for _, wn := range e.Warnings() {
				fmt.Fprintf(w, "Warning:               %s\n", wn)
			}
			caps := declaredCaps(d)
			if len(caps) == 0 {
				caps = []string{"(none)"}
			}
			fmt.Fprintf(w, "Required capabilities: %s\n", strings.Join(caps, ", "))
			if len(d.InputCapabilities) > 0 {
				fmt.Fprintln(w, "                       (name:{field}: required, scoped by that input field, when a call gives it)")
			}
			l := d.ResourceLimits
			fmt.Fprintf(w, "Limits:                max execution time %v", l.MaxExecutionTime)
			for _, x := range []struct {
				name string
				v    int64
			}{{"max memory", l.MaxMemory}, {"max file size", l.MaxFileSize}, {"max output", l.MaxOutputBytes}} {
				if x.v > 0 {
					fmt.Fprintf(w, ", %s %d bytes", x.name, x.v)
				}
			}
			if l.MaxConcurrent > 0 {
				fmt.Fprintf(w, ", at most %d at once", l.MaxConcurrent)
			}
			fmt.Fprintf(w, "\nDeterministic:         %v\nIdempotent:            %v\n", d.Deterministic, d.Idempotent)
			if d.ReadOnly() {
				fmt.Fprintln(w, "Read-only:             yes: it only reads; a call without an idempotency key or intent is recorded once, when it ends (a crash mid-call leaves no trace)")
			} else {
				fmt.Fprintln(w, "Read-only:             no: each call is recorded on disk before the tool runs")
			}
			if d.RequiresApproval {
				fmt.Fprintln(w, "Requires approval:     yes: it runs only as an approved intent (toolgate intent propose, then intent approve)")
			} else {
				fmt.Fprintln(w, "Requires approval:     no")
			}
			fmt.Fprintln(w, "\nInput schema:")
			writeJSON(w, d.InputSchema)
			fmt.Fprintln(w, "\nOutput schema:")
			return writeJSON(w, d.OutputSchema)
		},
	}
}

func encodeJSON(stdio Stdio, v any) error {
	enc := json.NewEncoder(stdio.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// declaredCaps lists what a tool requires: its capabilities, then its
// input capabilities as "filesystem.read:{cwd}" (required, scoped by the
// field, when a call gives it).
func declaredCaps(d tools.Declaration) []string {
	out := capability.Strings(d.RequiredCapabilities)
	for _, ic := range d.InputCapabilities {
		out = append(out, ic.String())
	}
	return out
}
