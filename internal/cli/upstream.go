package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/mcp"
	"github.com/toolgate/toolgate/tools"
)

// checkWarning is a doctor check that works, with something to look at
// (an upstream tool's schema findings, a tool left out): the detail says
// what.
const checkWarning = "warning"

// upstreamName is the upstream's own name of a gateway tool whose id is
// not that name (MCP names may hold spaces, capitals, ...), or "".
func upstreamName(e *tools.Entry) string {
	server, name, ok := mcp.Upstream(e.Tool())
	if !ok || server+"."+name == e.Declaration().ID {
		return ""
	}
	return name
}

// writeUpstreamNotes writes, after the tools listing, which ids the
// gateway mapped from an upstream's names, and each upstream tool's
// schema findings (RFC-0001 6.3, kept as warnings), each once.
func writeUpstreamNotes(w io.Writer, entries []*tools.Entry, leftOut []string) {
	var mapped, warnings []string
	for _, e := range entries {
		if n := upstreamName(e); n != "" {
			mapped = append(mapped, fmt.Sprintf("  %s  is the MCP tool %q", e.Declaration().ID, n))
		}
		d := e.Declaration()
		for _, wn := range e.Warnings() {
			warnings = append(warnings, fmt.Sprintf("  %s: %s", d.Key(), wn))
		}
	}
	for _, l := range leftOut {
		warnings = append(warnings, "  "+l)
	}
	if len(mapped) > 0 {
		fmt.Fprintf(w, "\nUpstream names mapped to tool ids (the id, and its capability scope SERVER/TOOL, replace what an id cannot hold):\n%s\n", strings.Join(slices.Compact(mapped), "\n"))
	}
	if len(warnings) > 0 {
		fmt.Fprintf(w, "\nWarnings on upstream tools (RFC-0001 6.3 findings in their schemas, kept with the tool, strict_schemas: true leaves such a tool out; tools left out; pinned tools that drifted, unavailable):\n%s\n", strings.Join(slices.Compact(warnings), "\n"))
	}
}

// checkMCPServers is doctor's check of each upstream MCP server of the
// registry: its tools, and what is to look at (schema findings, tools
// left out).
func checkMCPServers(reg *tools.Registry, gw *mcp.Gateway) []check {
	if reg == nil {
		return nil
	}
	var leftOut []string
	if gw != nil {
		leftOut = gw.Warnings()
	}
	var out []check
	for _, s := range reg.MCPServers() {
		n := 0
		var notes []string
		for _, e := range reg.Entries() {
			server, _, ok := mcp.Upstream(e.Tool())
			if !ok || server != s.Name {
				continue
			}
			n++
			if u := upstreamName(e); u != "" {
				notes = append(notes, fmt.Sprintf("%s is the MCP tool %q", e.Declaration().ID, u))
			}
			d := e.Declaration()
			for _, w := range e.Warnings() {
				notes = append(notes, fmt.Sprintf("%s: %s", d.Key(), w))
			}
		}
		warned := false
		if unpinned := notPinned(reg, s); unpinned != "" {
			notes = append(notes, unpinned)
			warned = true
		}
		for _, l := range leftOut {
			if strings.HasPrefix(l, s.Name+".") {
				notes = append(notes, l)
				warned = true
			}
		}
		c := check{Name: "MCP server " + s.Name, Status: checkOK, Detail: fmt.Sprintf("%d tools", n)}
		for _, e := range reg.Entries() {
			if server, _, ok := mcp.Upstream(e.Tool()); ok && server == s.Name && len(e.Warnings()) > 0 {
				warned = true
			}
		}
		if warned {
			c.Status = checkWarning
		}
		if len(notes) > 0 {
			c.Detail += "; " + strings.Join(slices.Compact(notes), "; ")
		}
		out = append(out, c)
	}
	return out
}

// notPinned says what of server s's pinned tools is not pinned beyond the
// version: a version pinned alone (pin_definitions: false), and tools whose
// pin covers only the schemas (schema_sha256 without definition_sha256),
// whose description can change unnoticed. "" when nothing.
func notPinned(reg *tools.Registry, s tools.MCPServer) string {
	var alone, schemasOnly []string
	for _, e := range reg.Entries() {
		server, name, ok := mcp.Upstream(e.Tool())
		if !ok || server != s.Name {
			continue
		}
		o := s.Tools[name]
		if o.Version == "" && s.Version == "" {
			continue // the server's own version: nothing pinned
		}
		switch {
		case o.SchemaSHA256 == "" && o.DefinitionSHA256 == "":
			alone = append(alone, e.Declaration().ID)
		case o.DefinitionSHA256 == "":
			schemasOnly = append(schemasOnly, e.Declaration().ID)
		}
	}
	var parts []string
	if len(alone) > 0 {
		parts = append(parts, fmt.Sprintf("not pinned beyond the version (pin_definitions: false): %s; a changed description or schema passes unnoticed", strings.Join(alone, ", ")))
	}
	if len(schemasOnly) > 0 {
		parts = append(parts, fmt.Sprintf("only the schemas pinned (no definition_sha256): %s; a changed description passes unnoticed", strings.Join(schemasOnly, ", ")))
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ") + fmt.Sprintf(" (toolgate pin %s prints the hashes)", s.Name)
}
