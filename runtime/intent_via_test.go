package runtime_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/testkit"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// An approval made via elicitation says so in the decision and in its
// audit event; the verifier compares the two, so a decision whose "via"
// was removed from the store below the API (to pass it off as an approval
// out of band) is a discrepancy, and the intent does not run.
func TestIntent_ApproveVia(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	testkit.Tampers(t, "it removes the via from a stored decision, to see verify and run refuse it")
	ctx := context.Background()
	if _, err := rt.ApproveVia(ctx, "0f8fad5b-d9cb-469f-a165-70867728950e", "alice", "Not a Word!"); intentCode(err) != "intent_malformed" {
		t.Errorf("a malformed via: %v", err)
	}
	in, err := rt.Propose(ctx, invoke("test.echo", `{"msg":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := rt.ApproveVia(ctx, in.ID, "mcp:alice", "elicitation")
	if err != nil {
		t.Fatal(err)
	}
	if d := got.Decision; d == nil || !d.Approved || d.By != "mcp:alice" || d.Via != "elicitation" {
		t.Fatalf("decision %+v, want approved by mcp:alice via elicitation", d)
	}
	var approved []audit.Event
	store := tgruntime.StoreOf(rt)
	rt.VerifyRecords(ctx, func(d tgruntime.Discrepancy) error {
		t.Errorf("before tampering: %s", d)
		return nil
	})
	for _, e := range auditIntentEvents(t, rt, in.ID) {
		if e.Intent.Action == audit.IntentApproved {
			approved = append(approved, e)
		}
	}
	if len(approved) != 1 || approved[0].Intent.Via != "elicitation" || approved[0].UserID != "mcp:alice" {
		t.Fatalf("approval events %+v, want one by mcp:alice via elicitation", approved)
	}

	raw, _, _ := store.StateValue(ctx, "toolgate.intent.decisions", in.ID)
	plain := strings.Replace(string(raw), `,"via":"elicitation"`, "", 1)
	if plain == string(raw) {
		t.Fatalf("the stored decision %s has no via", raw)
	}
	if err := store.PutState(ctx, "toolgate.intent.decisions", in.ID, []byte(plain)); err != nil {
		t.Fatal(err)
	}
	var found []string
	rt.VerifyRecords(ctx, func(d tgruntime.Discrepancy) error {
		found = append(found, d.String())
		return nil
	})
	if len(found) != 1 || !strings.Contains(found[0], "via") {
		t.Errorf("discrepancies %q, want the decision's via", found)
	}
	if _, err := execIntent(rt, in.ID, in.Hash); intentCode(err) != "intent_corrupt" {
		t.Errorf("an intent whose decision disagrees with its event: %v", err)
	}
}

// auditIntentEvents returns the events of intent id's history.
func auditIntentEvents(t *testing.T, rt *tgruntime.Runtime, id string) []audit.Event {
	t.Helper()
	var out []audit.Event
	err := tgruntime.StoreOf(rt).AuditSearch(context.Background(), id, -1<<62, 1<<62, func(e txn.AuditEntry) bool {
		var ev audit.Event
		if json.Unmarshal(e.Event, &ev) == nil && ev.Intent != nil && ev.Intent.ID == id {
			out = append(out, ev)
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
