package mcp_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// intentOf returns the intent a call of a tool requiring approval answered
// with: not an error, nothing ran.
func intentOf(t *testing.T, res *sdk.CallToolResult) (id, hash, approve string) {
	t.Helper()
	if res.IsError {
		t.Fatalf("a call needing approval answered with an error: %s", text(t, res))
	}
	v, ok := res.Meta[mcp.MetaIntent].(map[string]any)
	if !ok || res.Meta[mcp.MetaState] != "APPROVAL_REQUIRED" {
		t.Fatalf("no intent in _meta: %v", res.Meta)
	}
	id, _ = v["intentId"].(string)
	hash, _ = v["hash"].(string)
	approve, _ = v["approve"].(string)
	if id == "" || hash == "" || approve == "" {
		t.Fatalf("intent %v lacks id, hash or how to approve it", v)
	}
	return id, hash, approve
}

// Approval over stdio: the call becomes an intent; a person approves it
// with the CLI while no server holds the database; then the agent runs it
// once, and every later run is the stored outcome, replayed.
func TestStdio_Approval(t *testing.T) {
	bin := toolgate(t)
	db := testdb.Path(t, "tg.db")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := map[string]any{"msg": "ship it"}

	cs, cmd := stdioClient(t, db, nil)
	id, hash, _ := intentOf(t, call(t, ctx, cs, "test.approve", args, nil))
	// The identical call again: the same pending intent, not a second one.
	if again, _, _ := intentOf(t, call(t, ctx, cs, "test.approve", args, nil)); again != id {
		t.Errorf("the repeated call proposed intent %s, want the pending %s", again, id)
	}
	// Before approval, the intent does not run.
	if o := failed(t, call(t, ctx, cs, mcp.ExecuteIntentTool, map[string]any{"id": id, "hash": hash}, nil)); o.Error.Code != "intent_pending" {
		t.Errorf("running a pending intent: got %+v", o)
	}
	if o := failed(t, call(t, ctx, cs, mcp.ExecuteIntentTool, map[string]any{"id": id}, nil)); o.Error.Type != "ValidationError" {
		t.Errorf("execute_intent without a hash: got %+v", o)
	}
	cs.Close()
	cmd.Wait()

	out, err := exec.Command(bin, "--db", db, "intent", "approve", id, "--yes", "--approver", "alice").CombinedOutput()
	if err != nil {
		t.Fatalf("toolgate intent approve: %v\n%s", err, out)
	}

	cs, cmd = stdioClient(t, db, nil)
	res := call(t, ctx, cs, mcp.ExecuteIntentTool, map[string]any{"id": id, "hash": hash}, nil)
	completed(t, res)
	if res.Meta[mcp.MetaReplayed] == true {
		t.Error("the first run of the intent is marked replayed")
	}
	for _, again := range []*sdk.CallToolResult{
		call(t, ctx, cs, "test.approve", args, nil),
		call(t, ctx, cs, mcp.ExecuteIntentTool, map[string]any{"id": id, "hash": hash}, nil),
	} {
		completed(t, again)
		if again.Meta[mcp.MetaReplayed] != true || again.Meta[mcp.MetaExecutionID] != res.Meta[mcp.MetaExecutionID] {
			t.Errorf("a second run: %v, want the stored outcome of %v, replayed", again.Meta, res.Meta[mcp.MetaExecutionID])
		}
	}
	cs.Close()
	cmd.Wait()
	out, err = exec.Command(bin, "--db", db, "audit", "verify").CombinedOutput()
	if err != nil {
		t.Errorf("toolgate audit verify: %v\n%s", err, out)
	}

	rt := open(t, db)
	recs, err := rt.Executions(context.Background(), txn.Filter{ToolID: "test.approve", State: "COMPLETED"})
	if err != nil {
		t.Fatal(err)
	}
	if runs, _, _ := rt.StateValue(context.Background(), "approved", "runs"); len(recs) != 1 || string(runs) != "1" {
		t.Errorf("%d COMPLETED records, the tool ran %q times: want once", len(recs), runs)
	}
	in, err := rt.Intent(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if in.Status != "executed" || in.Decision == nil || in.Decision.By != "alice" || in.Proposer != principal {
		t.Errorf("intent %+v", in)
	}
	if _, err := rt.VerifyRecords(context.Background(), func(d tgruntime.Discrepancy) error {
		t.Errorf("audit verify: %s", d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
