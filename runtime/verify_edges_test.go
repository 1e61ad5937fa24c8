package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// An approved intent whose proposal and approval cannot be read from the
// audit log, because the log's entries holding them no longer decode, is
// not run: it is refused as corrupt, saying that the audit log is damaged
// (not that the intent disagrees with it), and the refusal names nothing
// the damaged entries would have said.
func TestIntent_ApprovalOnADamagedAuditLogRefused(t *testing.T) {
	testdb.BboltOnly(t, whyTamper)
	ctx := context.Background()
	runs := 0
	counted := tool(decl("test.counted"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		runs++
		return in, nil
	})
	path := filepath.Join(t.TempDir(), "toolgate.db")
	rt, _ := openRuntimeAt(t, path, counted)
	in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.counted", Input: json.RawMessage(`{"msg":"go"}`), Principal: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	// Later entries, so that the damaged ones are not the log's last.
	if _, err := rt.Execute(ctx, invoke("test.counted", `{"msg":"other"}`)); err != nil {
		t.Fatal(err)
	}
	ran := runs
	rt.Close(ctx)

	damaged := 0
	tamper(t, path, func(tx *bolt.Tx) error {
		log := tx.Bucket([]byte("audit"))
		type kv struct{ k, v []byte }
		var edits []kv
		if err := log.ForEach(func(k, v []byte) error {
			if len(k) == 8 && bytes.Contains(v, []byte(in.ID)) {
				edits = append(edits, kv{bytes.Clone(k), append(bytes.Clone(v), '}')})
			}
			return nil
		}); err != nil {
			return err
		}
		for _, e := range edits {
			if err := log.Put(e.k, e.v); err != nil {
				return err
			}
		}
		damaged = len(edits)
		return nil
	})
	if damaged == 0 {
		t.Fatal("no audit entry names the intent")
	}

	rt, _ = openRuntimeAt(t, path, counted)
	_, err = execIntent(rt, in.ID, in.Hash)
	if intentCode(err) != "intent_corrupt" || runs != ran {
		t.Fatalf("an approval on a damaged log: err = %v, the tool ran %d times (%d before); want intent_corrupt and no run", err, runs, ran)
	}
	if msg := err.Error(); !strings.Contains(msg, "the audit log is damaged: ") || !strings.Contains(msg, "it was not run") {
		t.Fatalf("the refusal %q does not say that the audit log is damaged", msg)
	}
}

// VerifyRecords reads the log in pages of 4096 entries, each check to its
// end: events after the first page prove their records and keys like any
// other. Here 4200 events that name no execution come first, then a keyed
// call's events, then a record stored without events: only that record is
// reported.
func TestVerifyRecords_LogOfManyPages(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolgate.db")
	rt, _ := openRuntimeAt(t, path, echo("test.echo"))
	store := tgruntime.StoreOf(rt)
	fillers := make([]txn.AuditEvent, 4200)
	now := time.Now().UnixMilli()
	for i := range fillers {
		e := audit.Event{EventID: fmt.Sprintf("filler-%d", i), Timestamp: now, ToolID: "test.filler", ToolVersion: "1.0.0"}
		fillers[i] = txn.AuditEvent{Data: e.AppendJSON(nil), Checked: true}
	}
	if err := store.UpdateState(ctx, func(*txn.StateView) error { return nil }, fillers...); err != nil {
		t.Fatal(err)
	}
	inv := invoke("test.echo", `{"msg":"late"}`)
	inv.IdempotencyKey = "late-key"
	res, err := rt.Execute(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	forged := *record(t, rt, res.ExecutionID)
	forged.ExecutionID, forged.CallID, forged.AuditEvents = "0199e4a1-0000-7000-8000-00000000000f", "forged-call", nil
	if err := store.Put(ctx, &forged); err != nil {
		t.Fatal(err)
	}
	var ds []tgruntime.Discrepancy
	rep, err := rt.VerifyRecords(ctx, func(d tgruntime.Discrepancy) error {
		ds = append(ds, d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].ID != forged.ExecutionID || ds[0].Field != "events" {
		t.Fatalf("reported %v; want the record stored without events alone", ds)
	}
	log, err := rt.AuditLog(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Events != uint64(len(log)) || len(log) <= 4200 || rep.Executions != 1 || rep.Keys != 1 || rep.Discrepancy != 1 {
		t.Fatalf("report %+v; want the log's %d events, 1 execution and 1 key checked, 1 discrepancy", rep, len(log))
	}
}
