package runtime_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	tgruntime "github.com/toolgate/toolgate/runtime"
)

// IntentFor finds the newest intent a proposer proposed for a call, not
// another proposer's nor another call's; a database written before the
// index is indexed at its first open; an index that names another call's
// intent is refused, never followed.
func TestIntentFor(t *testing.T) {
	ctx := context.Background()
	db := &approvalsDB{t: t, path: filepath.Join(t.TempDir(), "tg.db")}
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
