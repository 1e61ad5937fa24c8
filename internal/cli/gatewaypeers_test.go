package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// peerUpstream serves, over streamable HTTP on loopback, an MCP server
// with tools as the TypeScript and Python SDKs write them: draft-07
// schemas whose properties lack descriptions, and names with spaces and
// capitals. It returns the registry file's server entry.
func peerUpstream(t *testing.T, extra string) string {
	t.Helper()
	up := sdk.NewServer(&sdk.Implementation{Name: "notes", Version: "2.0.1"}, nil)
	in := json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"n":{"type":"integer","exclusiveMinimum":0}},"required":["n"],"additionalProperties":false}`)
	for _, name := range []string{"read note", "Write Note (draft)"} {
		up.AddTool(&sdk.Tool{Name: name, Description: "notes", InputSchema: in},
			func(ctx context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "note " + r.Params.Name}}}, nil
			})
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return up }, nil)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return "mcp_servers:\n  - name: notes\n    url: " + srv.URL + "\n    limits: {max_execution_time: 10s}\n" + extra
}

// An upstream whose schemas are draft-07 and fail RFC-0001 6.3's lint
// (properties without descriptions) is accepted: its tools are listed,
// validated by draft-07 (exclusiveMinimum a number), the findings shown
// once by tools, describe and doctor as warnings; names an id cannot hold
// are mapped (read note is notes.read_note), the mapping shown; with
// strict_schemas the tools are left out, said once, and mcp.call is still
// a capability --allow knows.
func TestGateway_PeerSchemasAndNames(t *testing.T) {
	workdir(t)
	must(t, os.WriteFile("gateway.yaml", []byte(peerUpstream(t, "")), 0o600))

	r := toolgate(t, "", "--registry", "gateway.yaml", "tools")
	if r.code != 0 {
		t.Fatalf("tools: exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"mcp.call:notes/read_note ", "mcp.call:notes/write_note_draft ",
		`notes.read_note  is the MCP tool "read note"`, `notes.write_note_draft  is the MCP tool "Write Note (draft)"`,
		"notes.read_note@2.0.1: inputSchema /properties/n/description: missing; every property must have a description"} {
		if n := strings.Count(r.stdout, want); n != 1 {
			t.Errorf("tools shows %q %d times, want once:\n%s", want, n, r.stdout)
		}
	}
	if strings.Contains(r.stderr, "description") {
		t.Errorf("tools printed a warning on stderr as well:\n%s", r.stderr)
	}

	r = toolgate(t, "", "--registry", "gateway.yaml", "describe", "notes.read_note")
	if r.code != 0 || !strings.Contains(r.stdout, `the tool "read note" of the MCP server notes`) || !strings.Contains(r.stdout, "Warning:               inputSchema /properties/n/description") {
		t.Errorf("describe: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// draft-07: exclusiveMinimum 0 refuses 0 (under draft-04 it would be a
	// boolean, and the schema would not compile).
	r = toolgate(t, "", "--registry", "gateway.yaml", "run", "notes.read_note", "--allow", "mcp.call:notes/read_note", "--input", `{"n":0}`)
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "ValidationError") {
		t.Errorf("n 0 against exclusiveMinimum 0: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = toolgate(t, "", "--registry", "gateway.yaml", "run", "notes.read_note", "--allow", "mcp.call:notes/read_note", "--input", `{"n":1}`)
	if r.code != 0 || !strings.Contains(r.stdout, "note read note") {
		t.Errorf("granted notes.read_note: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = toolgate(t, "", "--registry", "gateway.yaml", "doctor", "--json")
	var rep struct{ Checks []check }
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	var found *check
	for i, c := range rep.Checks {
		if c.Name == "MCP server notes" {
			found = &rep.Checks[i]
		}
	}
	if found == nil || found.Status != checkWarning || strings.Count(found.Detail, "notes.read_note@2.0.1: inputSchema /properties/n/description") != 1 ||
		!strings.Contains(found.Detail, `notes.read_note is the MCP tool "read note"`) {
		t.Errorf("doctor's check of the server: %+v", found)
	}

	// strict_schemas: the tools are left out, each said once; mcp.call is
	// still known, so the grant is not what is refused.
	must(t, os.WriteFile("gateway.yaml", []byte(peerUpstream(t, "    strict_schemas: true\n")), 0o600))
	r = toolgate(t, "", "--registry", "gateway.yaml", "run", "notes.read_note", "--allow", "mcp.call:notes", "--input", `{"n":1}`)
	if strings.Contains(r.stderr, "unknown capability") || !strings.Contains(r.stderr, "notes.read_note left out") || !strings.Contains(r.stderr, "(strict_schemas)") {
		t.Errorf("strict: exit %d\n%s", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "notes.read_note left out"); n != 1 {
		t.Errorf("the warning is printed %d times:\n%s", n, r.stderr)
	}
}

// toolgate pin prints a server's pin block; pasted, the server loads
// pinned and doctor says nothing is unpinned; a version pinned alone
// (pin_definitions: false) loads, and doctor says which tools are not
// pinned beyond it.
func TestGateway_PinBlockAndDoctor(t *testing.T) {
	workdir(t)
	entry := peerUpstream(t, "")
	must(t, os.WriteFile("gateway.yaml", []byte(entry), 0o600))
	r := toolgate(t, "", "--registry", "gateway.yaml", "pin", "notes")
	if r.code != 0 || !strings.Contains(r.stdout, "    version: 2.0.1\n    tools:\n") || !strings.Contains(r.stdout, `      "read note": {schema_sha256: `) ||
		!strings.Contains(r.stdout, "definition_sha256: ") {
		t.Fatalf("pin: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	_, block, _ := strings.Cut(r.stdout, "\n") // the comment line
	doctorCheck := func() check {
		t.Helper()
		r := toolgate(t, "", "--registry", "gateway.yaml", "doctor", "--json")
		var rep struct{ Checks []check }
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("doctor --json: %v\n%s%s", err, r.stdout, r.stderr)
		}
		for _, c := range rep.Checks {
			if c.Name == "MCP server notes" {
				return c
			}
		}
		t.Fatalf("no check of the server: %+v", rep.Checks)
		return check{}
	}
	must(t, os.WriteFile("gateway.yaml", []byte(entry+block), 0o600))
	if c := doctorCheck(); strings.Contains(c.Detail, "pinned") {
		t.Errorf("pinned with the block: %+v", c)
	}
	must(t, os.WriteFile("gateway.yaml", []byte(entry+"    version: 2.0.1\n    pin_definitions: false\n"), 0o600))
	if c := doctorCheck(); c.Status != checkWarning || !strings.Contains(c.Detail, "not pinned beyond the version (pin_definitions: false): notes.read_note, notes.write_note_draft; a changed description or schema passes unnoticed") {
		t.Errorf("the version alone: %+v", c)
	}
	if r := toolgate(t, "", "--registry", "gateway.yaml", "pin", "nope"); r.code != ExitUsage || !strings.Contains(r.stderr, `no MCP server "nope"`) {
		t.Errorf("pin nope: exit %d\n%s", r.code, r.stderr)
	}
}
