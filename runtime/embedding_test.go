package runtime_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// An embedder that opens the store itself keeps it: runtimes made by New on
// it, one after the other, each see what the one before wrote, and closing
// them leaves the store open, to be closed by its owner.
func TestNew_StoreStaysTheCallers(t *testing.T) {
	ctx := context.Background()
	store, err := txn.Open(testdb.Path(t, "toolgate.db"), &txn.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for round := range 2 {
		rt, err := tgruntime.New(store, &tgruntime.Options{Registry: registry(t), Grants: grantAll})
		if err != nil {
			t.Fatalf("round %d: New: %v", round, err)
		}
		if got, err := rt.Executions(ctx, txn.Filter{}); err != nil || len(got) != len(ids) {
			t.Fatalf("round %d: the runtime sees %d executions (%v), want the %d of the runtimes before it", round, len(got), err, len(ids))
		}
		res, err := rt.Execute(ctx, invoke("test.echo", `{"msg":"hi"}`))
		if err != nil {
			t.Fatalf("round %d: Execute: %v", round, err)
		}
		ids = append(ids, res.ExecutionID)
		if err := rt.Close(ctx); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		// The store is still open: the runtime did not close what it was handed.
		if _, err := store.Get(ctx, res.ExecutionID); err != nil {
			t.Fatalf("round %d: the store after the runtime's Close: %v", round, err)
		}
		if _, err := rt.Execute(ctx, invoke("test.echo", `{"msg":"late"}`)); !errors.Is(err, tgruntime.ErrClosed) {
			t.Fatalf("round %d: Execute after Close = %v, want ErrClosed", round, err)
		}
	}
	// Everything both runtimes did is proven by the log, read through a
	// Reader of the store its owner still holds.
	r := tgruntime.NewReader(store)
	rep, err := r.VerifyRecords(ctx, func(d tgruntime.Discrepancy) error { t.Errorf("discrepancy: %v", d); return nil })
	if err != nil || rep.Executions != len(ids) {
		t.Fatalf("VerifyRecords = %+v, %v; want %d executions", rep, err, len(ids))
	}
	if err := r.VerifyAuditLog(ctx, new(audit.Verifier)); err != nil {
		t.Fatalf("VerifyAuditLog: %v", err)
	}
	if err := store.Close(); err != nil {
		t.Fatalf("the owner's Close: %v", err)
	}
}

// One runtime at a time runs on a store: a second would take the first
// one's running executions for interrupted ones.
func TestNew_OneRuntimeAtATime(t *testing.T) {
	ctx := context.Background()
	store, err := txn.Open(testdb.Path(t, "toolgate.db"), &txn.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	first, err := tgruntime.New(store, &tgruntime.Options{Registry: registry(t), Grants: grantAll})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tgruntime.New(store, &tgruntime.Options{Registry: registry(t), Grants: grantAll}); !errors.Is(err, txn.ErrLocked) {
		t.Fatalf("a second New on a store in use = %v, want txn.ErrLocked", err)
	}
	if _, err := first.Execute(ctx, invoke("test.echo", `{"msg":"still mine"}`)); err != nil {
		t.Fatalf("the first runtime after the refused New: %v", err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := tgruntime.New(store, &tgruntime.Options{Registry: registry(t), Grants: grantAll})
	if err != nil {
		t.Fatalf("New once the first runtime is closed: %v", err)
	}
	if err := second.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A store configured its own way (here read-only) that a runtime cannot
// run on is refused, and stays open and readable by its owner; New of no
// store is an error, not a panic.
func TestNew_RefusesAStoreItCannotRunOn(t *testing.T) {
	ctx := context.Background()
	path := testdb.Path(t, "toolgate.db")
	rt, err := tgruntime.Open(path, &tgruntime.Options{Registry: registry(t), Grants: grantAll, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := rt.Execute(ctx, invoke("test.echo", `{"msg":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ro, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := tgruntime.New(ro, &tgruntime.Options{Registry: registry(t), Grants: grantAll}); !errors.Is(err, txn.ErrReadOnly) {
		t.Fatalf("New on a read-only store = %v, want txn.ErrReadOnly", err)
	}
	rec, ds, err := tgruntime.NewReader(ro).ReadExecution(ctx, res.ExecutionID)
	if err != nil || len(ds) != 0 || rec.State != "COMPLETED" {
		t.Fatalf("reading the store after the refused New: %v, %v, %v", rec, ds, err)
	}
	if _, err := tgruntime.New(nil, nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

// The runtime Open makes owns the store it opened: its Close closes it.
func TestOpen_RuntimeClosesItsStore(t *testing.T) {
	ctx := context.Background()
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	store := tgruntime.StoreOf(rt)
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.List(ctx, txn.Filter{}); !errors.Is(err, txn.ErrClosed) {
		t.Fatalf("the store of Open's runtime after Close: %v, want txn.ErrClosed", err)
	}
}

// A Reader of a read-only store reads what the runtime's own reader reads.
func TestReader_ReadsWhatTheRuntimeShows(t *testing.T) {
	ctx := context.Background()
	rt, path := openRuntime(t, nil, echo("test.echo"))
	res, err := rt.Execute(ctx, invoke("test.echo", `{"msg":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	in, err := rt.Propose(ctx, invoke("test.echo", `{"msg":"later"}`))
	if err != nil {
		t.Fatal(err)
	}
	log, err := rt.AuditLog(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ro, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	r := tgruntime.NewReader(ro)
	if recs, err := r.Executions(ctx, txn.Filter{}); err != nil || len(recs) != 1 || recs[0].ExecutionID != res.ExecutionID {
		t.Fatalf("Executions = %v, %v", recs, err)
	}
	rec, err := r.Execution(ctx, res.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	if ds, err := r.VerifyExecution(ctx, rec); err != nil || len(ds) != 0 {
		t.Fatalf("VerifyExecution = %v, %v", ds, err)
	}
	got, err := r.Intent(ctx, in.ID)
	if err != nil || got.Hash != in.Hash || got.Status != tgruntime.IntentPending {
		t.Fatalf("Intent = %+v, %v", got, err)
	}
	if ds, err := r.VerifyIntent(ctx, got); err != nil || len(ds) != 0 {
		t.Fatalf("VerifyIntent = %v, %v", ds, err)
	}
	if all, err := r.Intents(ctx, tgruntime.IntentFilter{Status: tgruntime.IntentPending}); err != nil || len(all) != 1 {
		t.Fatalf("Intents = %v, %v", all, err)
	}
	if again, err := r.AuditLog(ctx, 0, 0); err != nil || len(again) != len(log) {
		t.Fatalf("AuditLog: %d entries (%v), the runtime read %d", len(again), err, len(log))
	}
	if _, err := r.Intent(ctx, "not-an-id"); !errors.As(err, new(*tgruntime.IntentError)) {
		t.Fatalf("Intent of a malformed id = %v, want an *IntentError", err)
	}
}

// Options that cannot work are refused before the store is opened: Open
// creates no database for them, and New leaves the store as it was.
func TestOpen_BadGrantsOpenNothing(t *testing.T) {
	testdb.BboltOnly(t, "it checks that no database file is created")
	path := filepath.Join(t.TempDir(), "toolgate.db")
	bad := map[string][]capability.Capability{"tester": {{Name: "NOT A CAPABILITY"}}}
	if _, err := tgruntime.Open(path, &tgruntime.Options{Grants: bad}); !errors.Is(err, capability.ErrPolicy) {
		t.Fatalf("Open with a bad grant = %v, want capability.ErrPolicy", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open with a bad grant created the database: %v", err)
	}
	store, err := txn.Open(path, &txn.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := tgruntime.New(store, &tgruntime.Options{Grants: bad}); !errors.Is(err, capability.ErrPolicy) {
		t.Fatalf("New with a bad grant = %v, want capability.ErrPolicy", err)
	}
	// Refused before it was taken: a runtime may run on the store.
	rt, err := tgruntime.New(store, &tgruntime.Options{Registry: registry(t), Grants: grantAll})
	if err != nil {
		t.Fatalf("New after a refused New: %v", err)
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
