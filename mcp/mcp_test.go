package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// outcome is the JSON text block of a result that is an error.
type outcome struct {
	State       string              `json:"state"`
	ExecutionID string              `json:"executionId"`
	Replayed    bool                `json:"replayed"`
	Error       tgruntime.ErrorInfo `json:"error"`
}

func call(t testing.TB, ctx context.Context, cs *sdk.ClientSession, name string, args any, meta sdk.Meta) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args, Meta: meta})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func text(t testing.TB, res *sdk.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("want one content block, got %d", len(res.Content))
	}
	tc, ok := res.Content[0].(*sdk.TextContent)
	if !ok {
		t.Fatalf("want a text block, got %T", res.Content[0])
	}
	return tc.Text
}

func failed(t testing.TB, res *sdk.CallToolResult) outcome {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want isError, got %s", text(t, res))
	}
	var o outcome
	if err := json.Unmarshal([]byte(text(t, res)), &o); err != nil {
		t.Fatalf("error text is not JSON: %v: %s", err, text(t, res))
	}
	return o
}

func completed(t testing.TB, res *sdk.CallToolResult) {
	t.Helper()
	if res.IsError {
		t.Fatalf("want COMPLETED, got %s", text(t, res))
	}
	if res.Meta[mcp.MetaState] != "COMPLETED" {
		t.Fatalf("state %v, want COMPLETED", res.Meta[mcp.MetaState])
	}
	sc, _ := json.Marshal(res.StructuredContent)
	if !jsonEqual(sc, []byte(text(t, res))) {
		t.Fatalf("structuredContent %s and the text block %s differ", sc, text(t, res))
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return string(ja) == string(jb)
}

// lifecycle runs the checks every transport must pass on cs.
func lifecycle(t *testing.T, cs *sdk.ClientSession, p *progress) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// tools/list: every tool, plain ids at their highest version, every
	// version as ID--VERSION, annotations from the declarations.
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*sdk.Tool{}
	for _, tool := range lt.Tools {
		byName[tool.Name] = tool
	}
	for _, name := range []string{"test.noop", "test.noop--1.0.0", "test.noop--2.0.0_b7", "test.fail", "test.approve", mcp.ExecuteIntentTool} {
		if byName[name] == nil {
			t.Fatalf("tools/list lacks %s", name)
		}
	}
	if v := byName["test.noop"].Meta["io.toolgate/version"]; v != "2.0.0+b7" {
		t.Errorf("test.noop lists version %v, want the highest, 2.0.0+b7", v)
	}
	if a := byName["test.noop--1.0.0"].Annotations; a == nil || !a.ReadOnlyHint || !a.IdempotentHint || *a.DestructiveHint {
		t.Errorf("test.noop@1.0.0 annotations %+v: want read-only, idempotent, not destructive", a)
	}
	if a := byName["test.approve"].Annotations; a == nil || a.ReadOnlyHint || !*a.DestructiveHint || a.IdempotentHint || *a.OpenWorldHint {
		t.Errorf("test.approve annotations %+v: want a closed-world state writer", a)
	}
	if s, _ := json.Marshal(byName["test.slow"].InputSchema); !jsonEqual(s, []byte(slowSchema)) {
		t.Errorf("test.slow inputSchema %s, want the declared %s", s, slowSchema)
	}

	// COMPLETED, with the ids in _meta.
	res := call(t, ctx, cs, "test.noop--1.0.0", map[string]any{"msg": "hi"}, nil)
	completed(t, res)
	if id, _ := res.Meta[mcp.MetaCallID].(string); !strings.HasPrefix(id, "mcp:") {
		t.Errorf("call id %q: want mcp:SESSION:ID", id)
	}
	if res.Meta[mcp.MetaExecutionID] == "" {
		t.Error("no execution id in _meta")
	}

	// FAILED: the input does not match the schema.
	if o := failed(t, call(t, ctx, cs, "test.noop", map[string]any{"msg": 5}, nil)); o.State != "FAILED" || o.Error.Type != "ValidationError" || o.Error.Code != "invalid_input" {
		t.Errorf("schema: got %+v", o)
	}
	// DENIED: a capability nobody holds.
	if o := failed(t, call(t, ctx, cs, "test.secret", map[string]any{}, nil)); o.State != "DENIED" || o.Error.Type != "AuthorizationError" || !strings.Contains(o.Error.Message, "state.write:secret") {
		t.Errorf("denied: got %+v", o)
	}
	// ROLLED_BACK: the tool failed.
	if o := failed(t, call(t, ctx, cs, "test.fail", map[string]any{}, nil)); o.State != "ROLLED_BACK" || o.Error.Type != "ExecutionError" || !strings.Contains(o.Error.Message, "the disk is on fire") {
		t.Errorf("rolled back: got %+v", o)
	}
	// Unknown tool or version: invalid params.
	for _, name := range []string{"test.nope", "test.noop--9.9.9"} {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: map[string]any{}})
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("%s: got %v, want the invalid-params error", name, err)
		}
	}
	// Idempotency key in _meta: the second call returns the first's result.
	key := sdk.Meta{mcp.MetaIdempotencyKey: "k-" + t.Name()}
	first := call(t, ctx, cs, "test.noop", map[string]any{"msg": "once"}, key)
	second := call(t, ctx, cs, "test.noop", map[string]any{"msg": "once"}, key)
	completed(t, second)
	if second.Meta[mcp.MetaReplayed] != true || second.Meta[mcp.MetaExecutionID] != first.Meta[mcp.MetaExecutionID] {
		t.Errorf("idempotency key: second call %v, want a replay of %v", second.Meta, first.Meta)
	}
	if o := failed(t, call(t, ctx, cs, "test.noop", map[string]any{"msg": "other"}, key)); o.Error.Code != "idempotency_conflict" {
		t.Errorf("the key with another request: got %+v", o)
	}

	// Progress, then cancellation mid-call.
	cctx, ccancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		params := &sdk.CallToolParams{Name: "test.slow", Arguments: map[string]any{"ms": 30000}}
		params.SetProgressToken("slow-1")
		_, err := cs.CallTool(cctx, params)
		done <- err
	}()
	select {
	case <-p.ch:
	case err := <-done:
		t.Fatalf("the slow call ended before any progress: %v", err)
	case <-ctx.Done():
		t.Fatal("no progress notification")
	}
	ccancel()
	if err := <-done; err == nil {
		t.Fatal("the canceled call returned no error")
	}
	p.mu.Lock()
	if p.got[0].ProgressToken != "slow-1" || p.got[0].Progress <= 0 {
		t.Errorf("progress %+v", p.got[0])
	}
	p.mu.Unlock()
}

// checkRecords checks what the session left: the canceled call ABORTED
// then ROLLED_BACK, every call id naming its MCP request, and every record
// matching the audit log.
func checkRecords(t *testing.T, rt *tgruntime.Runtime, who string) {
	ctx := context.Background()
	var recs []*txn.Record
	var err error
	// The canceled attempt is recorded when its tool returns: wait for it
	// (the server may still be finishing it; on a loaded machine, for
	// seconds).
	for guard := time.Now().Add(time.Minute); ; time.Sleep(25 * time.Millisecond) {
		recs, err = rt.Executions(ctx, txn.Filter{ToolID: "test.slow"})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 1 && !recs[0].EndedAt.IsZero() || time.Now().After(guard) { // a hang guard, not a timing assertion
			break
		}
	}
	if len(recs) != 1 {
		t.Fatalf("%d records of test.slow, want 1", len(recs))
	}
	var states []string
	for _, tr := range recs[0].Transitions {
		states = append(states, string(tr.To))
	}
	if recs[0].State != "ROLLED_BACK" || !slices.Contains(states, "ABORTED") {
		t.Errorf("canceled call: state %s through %v, want ABORTED then ROLLED_BACK", recs[0].State, states)
	}
	all, err := rt.Executions(ctx, txn.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if !strings.HasPrefix(r.CallID, "mcp:") || strings.Count(r.CallID, ":") != 2 {
			t.Errorf("record %s has call id %q, want mcp:SESSION:ID", r.ExecutionID, r.CallID)
		}
		if r.Principal != who {
			t.Errorf("record %s ran as %q, want %q", r.ExecutionID, r.Principal, who)
		}
	}
	rep, err := rt.VerifyRecords(ctx, func(d tgruntime.Discrepancy) error {
		t.Errorf("audit verify: %s", d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Executions < 6 {
		t.Errorf("verified %d executions, want every call's", rep.Executions)
	}
}

func TestStdio_Lifecycle(t *testing.T) {
	db := testdb.Path(t, "tg.db")
	p := newProgress()
	cs, cmd := stdioClient(t, db, p)
	lifecycle(t, cs, p)

	// A 10 MB argument: refused by the runtime (FAILED), the server goes on.
	ctx := context.Background()
	big := strings.Repeat("x", 10<<20)
	if o := failed(t, call(t, ctx, cs, "test.big", map[string]any{"data": big}, nil)); o.Error.Type != "ValidationError" {
		t.Errorf("10 MB argument: got %+v", o)
	}
	completed(t, call(t, ctx, cs, "test.noop", map[string]any{}, nil))
	cs.Close()
	if err := cmd.Wait(); err != nil && !isExit0(cmd) {
		t.Fatalf("the server did not exit cleanly: %v", err)
	}
	checkRecords(t, open(t, db), principal)
}

func isExit0(cmd *exec.Cmd) bool { return cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == 0 }
