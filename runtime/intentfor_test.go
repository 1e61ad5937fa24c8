package runtime_test

import (
	"context"
	"encoding/json"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// IntentFor finds the newest intent a proposer proposed for a call, not
// another proposer's nor another call's; a database written before the
// index is indexed at its first open; an index that names another call's
// intent is refused, never followed.
func TestIntentFor(t *testing.T) {
	ctx := context.Background()
	db := &approvalsDB{t: t, path: testdb.Path(t, "tg.db")}
	rt := db.open(keyedPolicy(t, nil), nil)
	propose := func(who, msg string) *tgruntime.Intent {
		t.Helper()
		in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.counted", Input: json.RawMessage(`{"msg":"` + msg + `"}`), Principal: who})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	first := propose("agent", "go")
	newest := propose("agent", "go")
	theirs := propose("other", "go")
	propose("agent", "stop")
	if got, err := rt.IntentFor(ctx, "agent", first.Hash); err != nil || got.ID != newest.ID {
		t.Fatalf("IntentFor(agent) = %v, %v; want the newest, %s", got, err, newest.ID)
	}
	if got, err := rt.IntentFor(ctx, "other", first.Hash); err != nil || got.ID != theirs.ID {
		t.Fatalf("IntentFor(other) = %v, %v; want %s", got, err, theirs.ID)
	}
	if _, err := rt.IntentFor(ctx, "nobody", first.Hash); intentCode(err) != "intent_not_found" {
		t.Fatalf("IntentFor(nobody): %v", err)
	}
	rt.Close(ctx)

	// A database from before the index: the index and its marker gone.
	tamper(t, db.path, func(tx *bolt.Tx) error {
		state := tx.Bucket([]byte("state"))
		if err := state.DeleteBucket([]byte("toolgate.intent.bycall")); err != nil {
			return err
		}
		return state.Bucket([]byte("toolgate.meta")).Delete([]byte("intents.indexed"))
	})
	rt = db.open(keyedPolicy(t, nil), nil)
	if got, err := rt.IntentFor(ctx, "agent", first.Hash); err != nil || got.ID != newest.ID {
		t.Fatalf("after indexing an older database: %v, %v; want %s", got, err, newest.ID)
	}
	rt.Close(ctx)

	// An index entry pointed at another call's intent.
	tamper(t, db.path, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("state")).Bucket([]byte("toolgate.intent.bycall")).Put([]byte(first.Hash+"/agent"), []byte(theirs.ID))
	})
	rt = db.open(keyedPolicy(t, nil), nil)
	defer rt.Close(ctx)
	if _, err := rt.IntentFor(ctx, "agent", first.Hash); intentCode(err) != "intent_corrupt" {
		t.Fatalf("an index naming another call's intent: %v", err)
	}
}

// The request that proposed an intent, and each refused request, keep
// their call ids (over MCP: the MCP request), in the intent and in their
// audit events; a call id changed in the store is a discrepancy.
func TestIntent_CallIDsKept(t *testing.T) {
	ctx := context.Background()
	db := &approvalsDB{t: t, path: testdb.Path(t, "tg.db")}
	rt := db.open(keyedPolicy(t, nil), nil)
	in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.counted", Input: json.RawMessage(`{"msg":"go"}`), Principal: "agent", CallID: "mcp:s1:7"})
	if err != nil || in.CallID != "mcp:s1:7" {
		t.Fatalf("propose: %+v, %v", in, err)
	}
	if _, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.counted", Input: json.RawMessage(`{"msg":"go"}`), Principal: "agent", CallID: "bad id\n"}); err == nil {
		t.Fatal("a malformed call id was stored")
	}
	_, err = rt.Execute(ctx, tgruntime.Invocation{IntentID: in.ID, IntentHash: in.Hash, Principal: "tester", CallID: "mcp:s1:8"})
	if intentCode(err) != "intent_pending" {
		t.Fatalf("a pending intent: %v", err)
	}
	got, _ := rt.Intent(ctx, in.ID)
	if len(got.Refusals) != 1 || got.Refusals[0].CallID != "mcp:s1:8" {
		t.Fatalf("the refusal: %+v", got.Refusals)
	}
	rt.Close(ctx)
	if ds := db.verify(nil); len(ds) != 0 {
		t.Fatalf("audit verify: %v", ds)
	}
	tamper(t, db.path, func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("state")).Bucket([]byte("toolgate.intents"))
		var rec map[string]any
		if err := json.Unmarshal(b.Get([]byte(in.ID)), &rec); err != nil {
			return err
		}
		rec["callId"] = "mcp:s1:99"
		v, _ := json.Marshal(rec)
		return b.Put([]byte(in.ID), v)
	})
	if ds := db.verify(nil); !hasDiscrepancy(ds, "intent", in.ID, "callId") {
		t.Errorf("a call id changed in the store: %v", ds)
	}
}
