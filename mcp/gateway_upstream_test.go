package mcp_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

func grantUp(tool string, input string) tgruntime.Invocation {
	return tgruntime.Invocation{Tool: tool, Input: []byte(input), Principal: "p",
		Grants: []capability.Capability{capability.MustParse("mcp.call:up")}}
}

func aborted(r *txn.Record) bool {
	return slices.ContainsFunc(r.Transitions, func(tr txn.Transition) bool { return tr.To == "ABORTED" })
}

// At its deadline a gateway call is aborted (ABORTED, then ROLLED_BACK,
// a TimeoutError, recorded) and the upstream call is cancelled.
func TestGateway_DeadlineAborted(t *testing.T) {
	dir := t.TempDir()
	file, log := upstreamFile(t, dir, "    tools:\n      hang: {limits: {max_execution_time: 300ms}}\n")
	rt := gatewayRuntime(t, file)
	res, _ := rt.Execute(context.Background(), grantUp("up.hang", `{"ms":600000}`))
	if res == nil || res.State != "ROLLED_BACK" || res.Error == nil || res.Error.Type != "TimeoutError" {
		t.Fatalf("up.hang past its deadline: %+v", res)
	}
	recs := records(t, rt, "up.hang")
	if len(recs) != 1 || recs[0].State != "ROLLED_BACK" || !aborted(recs[0]) || recs[0].Error == nil || recs[0].Error.Type != "TimeoutError" {
		t.Fatalf("the record of up.hang: %+v, want ABORTED, then ROLLED_BACK, a TimeoutError", recs)
	}
	waitCall(t, log, "cancelled hang")
}

// An upstream that restarts with other schemas (found when the gateway
// connects again after its process died) makes the changed tools
// unavailable, a ResourceError saying so, without calling them; a tool
// whose schemas did not change goes on.
func TestGateway_SchemaDriftOnReconnect(t *testing.T) {
	dir := t.TempDir()
	file, log := upstreamFile(t, dir, "")
	rt := gatewayRuntime(t, file)
	if res, _ := rt.Execute(context.Background(), grantUp("up.echo", `{"text":"before"}`)); res == nil || res.State != "COMPLETED" {
		t.Fatalf("up.echo: %+v", res)
	}
	t.Setenv("UPSTREAM_DRIFT", "1") // the next process lists another schema for echo
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(b))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The first call after the kill may find the dead session (ResourceError
	// "went away"); the one after reconnects and finds the drift.
	var res *tgruntime.Result
	for range 3 {
		res, _ = rt.Execute(context.Background(), grantUp("up.echo", `{"text":"after"}`))
		if res != nil && res.Error != nil && strings.Contains(res.Error.Message, "changed the definition") {
			break
		}
	}
	if res == nil || res.State != "ROLLED_BACK" || res.Error == nil || res.Error.Type != "ResourceError" || res.Error.Code != "mcp_upstream" ||
		!strings.Contains(res.Error.Message, "changed the definition of echo") {
		t.Fatalf("up.echo after its schema changed: %+v, want a ResourceError saying the schemas changed", res)
	}
	if n := calls(t, log, "echo"); n != 1 {
		t.Errorf("the upstream got %d echo calls, want only the first", n)
	}
	if res, _ := rt.Execute(context.Background(), grantUp("up.plain", `{}`)); res == nil || res.State != "COMPLETED" {
		t.Errorf("up.plain, unchanged: %+v", res)
	}
}

var pinHash = regexp.MustCompile(`tool (\w+) has version \S+ pinned but no definition_sha256 for it: the upstream's definition hashes to ([0-9a-f]{64})`)

// What a server declares (requires_approval, idempotent, version) holds
// for each of its tools, and a tool's own entry overrides it.
func TestGateway_ServerLevelDeclarations(t *testing.T) {
	dir := t.TempDir()
	server := "    version: 2.0.0\n    requires_approval: true\n    idempotent: true\n"
	write := func(tools string) string {
		file, _ := upstreamFile(t, dir, server+tools)
		return file
	}
	// A server-level version pins every tool: the file must give each
	// tool's schema hash, which the refusal lists.
	gw := mcp.NewGateway(nil)
	_, err := tools.LoadRegistryFileWith(write(""), gw.Tools)
	gw.Close()
	ms := pinHash.FindAllStringSubmatch(fmt.Sprint(err), -1)
	if len(ms) < 5 {
		t.Fatalf("a server-level version without hashes: %v", err)
	}
	var b strings.Builder
	b.WriteString("    tools:\n")
	for _, m := range ms {
		extra := ""
		if m[1] == "fail" {
			extra = ", requires_approval: false, idempotent: false, version: 3.1.0"
		}
		fmt.Fprintf(&b, "      %s: {definition_sha256: %s%s}\n", m[1], m[2], extra)
	}
	gw = mcp.NewGateway(nil)
	defer gw.Close()
	reg, err := tools.LoadRegistryFileWith(write(b.String()), gw.Tools)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id, version     string
		approval, idemp bool
	}{
		{"up.echo", "2.0.0", true, true},
		{"up.plain", "2.0.0", true, true},
		{"up.fail", "3.1.0", false, false},
	} {
		e, err := reg.Lookup(tc.id, "")
		if err != nil {
			t.Fatal(err)
		}
		d := e.Declaration()
		if d.Version != tc.version || d.RequiresApproval != tc.approval || d.Idempotent != tc.idemp {
			t.Errorf("%s: version %s, requires_approval %v, idempotent %v; want %s, %v, %v", tc.id, d.Version, d.RequiresApproval, d.Idempotent, tc.version, tc.approval, tc.idemp)
		}
	}
}

// A tool the SDK refuses (here, an x-mcp-header annotation on a property
// that is not a primitive, which RFC-0001 6.3 does not forbid) is left out
// of tools/list, and Server.Skipped says which and why; the other tools
// are served. (An input schema not of type "object", the other reason,
// cannot reach the server: the registry refuses it at Register.)
func TestServer_SkippedToolsTheSDKRefuses(t *testing.T) {
	bad := `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"tags":{"type":"array","description":"tags","items":{"type":"string","description":"a tag"},"x-mcp-header":"X-Tags"}},"required":[],"additionalProperties":false}`
	rt := noopTools(t, decl("test.tags", bad), decl("test.noop", objSchema))
	srv, err := mcp.New(rt, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := srv.Skipped()
	if len(got) != 2 || !strings.HasPrefix(got[0], "test.tags: ") || !strings.HasPrefix(got[1], "test.tags--1.0.0: ") || !strings.Contains(got[0], "x-mcp-header") {
		t.Errorf("Skipped() = %q, want test.tags and test.tags--1.0.0, saying why", got)
	}
	cs := pipeSession(t, rt, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	if slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "test.tags") }) || !slices.Contains(names, "test.noop") {
		t.Errorf("tools/list: %v, want test.noop and no test.tags", names)
	}
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "test.tags", Arguments: map[string]any{}}); err == nil {
		t.Error("a call of the tool left out ran")
	}
}

// A line from a stdio upstream that is not a JSON-RPC message ends the
// connection: the call in flight is a ResourceError (mcp_upstream),
// recorded, and the next call starts the server again.
func TestGateway_GarbledLine(t *testing.T) {
	dir := t.TempDir()
	file, log := upstreamFile(t, dir, "")
	body, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	body = bytes.Replace(body, []byte("env: {"), []byte(`env: {UPSTREAM_GARBLE: "1", `), 1)
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	rt := gatewayRuntime(t, file)
	res, _ := rt.Execute(context.Background(), grantUp("up.garble", `{}`))
	if res == nil || res.State != "ROLLED_BACK" || res.Error == nil || res.Error.Type != "ResourceError" || res.Error.Code != "mcp_upstream" {
		t.Fatalf("up.garble: %+v, want ROLLED_BACK, a ResourceError mcp_upstream", res)
	}
	if n := calls(t, log, "garble"); n != 1 {
		t.Errorf("the upstream got %d garble calls, want 1", n)
	}
	res, err = rt.Execute(context.Background(), grantUp("up.echo", `{"text":"again"}`))
	if err != nil || res.State != "COMPLETED" || string(res.Output) != `{"echoed":"again"}` {
		t.Fatalf("up.echo after the garbled line: %v %+v", err, res)
	}
}
