package runtime_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// putState writes one state row of a database as an earlier version left it.
type putState func(ns, key string, v any)

// writeEarlierVersion writes a database at path as a version that did not
// audit intents left it: the state rows write puts, and no intent events.
func writeEarlierVersion(t *testing.T, path string, write func(put putState)) {
	t.Helper()
	ctx := context.Background()
	s, err := txn.Open(path, &txn.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write(func(ns, key string, v any) {
		b, _ := json.Marshal(v)
		if err := s.PutState(ctx, ns, key, b); err != nil {
			t.Fatal(err)
		}
	})
}

// putEarlierIntent puts the proposal of intent id (test.echo 1.0.0, input
// {"msg":"go"}, by "agent" at at) as an earlier version stored it, and
// returns its hash.
func putEarlierIntent(put putState, id string, at time.Time, callID string) string {
	input := json.RawMessage(`{"msg":"go"}`)
	hash, _ := tgruntime.IntentHash("test.echo", "1.0.0", input)
	put("toolgate.intents", id, map[string]any{"id": id, "hash": hash, "tool": "test.echo", "version": "1.0.0",
		"input": input, "proposer": "agent", "proposedAt": at, "callId": callID})
	return hash
}

// The first open of a database written by a version that did not audit
// intents imports each part of each intent's history as an event marked
// "imported" (a refusal keeps its own code), with its original time and
// who: the proposal, the decision, every refused request and the execution
// mark. After it nothing is
// reported, and an executed intent stays executed (never run again).
func TestOpen_ImportsAnEarlierVersionsRefusalsAndExecution(t *testing.T) {
	ctx := context.Background()
	path := testdb.Path(t, "toolgate.db")
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	id := "0f8fad5b-d9cb-469f-a165-70867728950e"
	mark := tgruntime.IntentExecution{ExecutionID: "0199e4a1-0000-7000-8000-000000000001", CallID: "call-run", Principal: "tester", At: at.Add(2 * time.Minute)}
	var hash string
	writeEarlierVersion(t, path, func(put putState) {
		hash = putEarlierIntent(put, id, at, "call-propose")
		put("toolgate.intent.decisions", id, tgruntime.IntentDecision{Approved: true, By: "alice", At: at.Add(time.Minute), Via: "elicitation"})
		put("toolgate.intent.refusals", id+"/00000000000000000001-aaaaaaaa",
			tgruntime.IntentRefusal{At: at.Add(30 * time.Second), Principal: "tester", Code: "intent_pending", CallID: "call-early"})
		put("toolgate.intent.refusals", id+"/00000000000000000002-bbbbbbbb",
			tgruntime.IntentRefusal{At: at.Add(40 * time.Second), Principal: "bot", Code: "intent_pending"})
		put("toolgate.intent.executed", id, mark)
	})

	rt, _ := openRuntimeAt(t, path, echo("test.echo"))
	if ds := verifyRT(t, rt); len(ds) != 0 {
		t.Fatalf("an intent of an earlier version reported: %v", ds)
	}
	in, err := rt.Intent(ctx, id)
	if err != nil || in.Status != tgruntime.IntentExecuted || len(in.Refusals) != 2 {
		t.Fatalf("the imported intent: %+v, %v", in, err)
	}
	if ds, err := rt.VerifyIntent(ctx, in); err != nil || len(ds) != 0 {
		t.Fatalf("VerifyIntent: %v, %v", ds, err)
	}
	// The imported events, in order, each with its original time and who.
	type step struct {
		action, who, callID, code string
		at                        time.Time
	}
	want := []step{
		{audit.IntentProposed, "agent", "call-propose", "imported", at},
		{audit.IntentApproved, "alice", "", "imported", at.Add(time.Minute)},
		{audit.IntentRefused, "tester", "call-early", "intent_pending", at.Add(30 * time.Second)},
		{audit.IntentRefused, "bot", "", "intent_pending", at.Add(40 * time.Second)},
		{audit.IntentExecuted, "tester", "call-run", "imported", at.Add(2 * time.Minute)},
	}
	evs := auditIntentEvents(t, rt, id)
	if len(evs) != len(want) {
		t.Fatalf("%d imported events, want %d: %+v", len(evs), len(want), evs)
	}
	for i, e := range evs {
		w := want[i]
		if e.Intent.Action != w.action || e.UserID != w.who || e.CallID != w.callID || e.Timestamp != w.at.UnixMilli() || e.Intent.Code != w.code {
			t.Errorf("event %d: %s by %q (call %q) at %d, code %q; want %+v", i, e.Intent.Action, e.UserID, e.CallID, e.Timestamp, e.Intent.Code, w)
		}
	}
	if e := evs[1]; e.Intent.Via != "elicitation" {
		t.Errorf("the imported approval lost its via: %+v", e.Intent)
	}
	if e := evs[4]; e.ExecutionID != mark.ExecutionID || e.Intent.Hash != hash {
		t.Errorf("the imported execution: %+v", e)
	}
	if _, err := execIntent(rt, id, hash); intentCode(err) != "intent_already_executed" {
		t.Fatalf("an executed intent of an earlier version: %v; want intent_already_executed", err)
	}
}
