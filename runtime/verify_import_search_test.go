package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// An intent's events are found by searching the log for its id, which
// finds every event that mentions it: an imported execution of another
// intent whose call id names this one is not this intent's execution.
func TestVerifyIntent_ImportedExecutionOfAnotherIntentNamingIt(t *testing.T) {
	ctx := context.Background()
	path := testdb.Path(t, "toolgate.db")
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	a, b := "0f8fad5b-d9cb-469f-a165-70867728950e", "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	writeEarlierVersion(t, path, func(put putState) {
		for i, id := range []string{a, b} {
			putEarlierIntent(put, id, at, "propose-"+id)
			put("toolgate.intent.decisions", id, tgruntime.IntentDecision{Approved: true, By: "alice", At: at.Add(time.Minute)})
			if id == a {
				continue // a was approved and never run
			}
			put("toolgate.intent.executed", id, tgruntime.IntentExecution{
				ExecutionID: "0199e4a1-0000-7000-8000-00000000000" + string(rune('1'+i)),
				CallID:      "after-" + a, // b's execution names a
				Principal:   "tester", At: at.Add(2 * time.Minute)})
		}
	})

	rt, _ := openRuntimeAt(t, path, echo("test.echo"))
	in, err := rt.Intent(ctx, a)
	if err != nil || in.Status != tgruntime.IntentApproved {
		t.Fatalf("intent a: %+v, %v; want approved, not executed", in, err)
	}
	if ds, err := rt.VerifyIntent(ctx, in); err != nil || len(ds) != 0 {
		t.Fatalf("VerifyIntent(a) = %v, %v; b's execution was taken for a's", ds, err)
	}
	if ds := verifyRT(t, rt); len(ds) != 0 {
		t.Fatalf("verify: %v", ds)
	}
}
