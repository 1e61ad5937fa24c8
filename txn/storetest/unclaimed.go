package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// testUnclaimed holds a backend to what a Tx begun without a claim
// (Store.BeginUnclaimed) relies on: Put with reads and writes.
func testUnclaimed(t *testing.T, b *Backend) {
	ctx := context.Background()
	s := b.open(t, b.fresh(t))
	if err := s.PutState(ctx, "ns", "seen", []byte("0")); err != nil {
		t.Fatal(err)
	}

	// Nothing is stored until the Tx ends.
	tx, err := s.BeginUnclaimed(ctx, Record("ex-1", "tool", "EXECUTING"), Event("begin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "ex-1"); !errors.Is(err, txn.ErrNotFound) {
		t.Fatalf("Get while an unclaimed Tx runs = %v, want ErrNotFound", err)
	}
	if c, _ := claims(s); len(c) != 0 {
		t.Fatalf("an unclaimed Tx stored claims %v", c)
	}
	VerifyChain(t, s, 0)
	if err := tx.SetProcesses(ctx, []txn.Process{{Pid: 1}}); !errors.Is(err, txn.ErrNotFound) {
		t.Fatalf("SetProcesses of an unclaimed Tx = %v, want ErrNotFound", err)
	}

	// Its reads are checked as a claimed Tx's are: a changed key fails the
	// commit, which writes nothing and leaves the Tx active.
	if _, _, err := tx.Get("ns", "seen"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Put("ns", "out", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutState(ctx, "ns", "seen", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, Record("ex-1", "tool", "COMPLETED"), Event("commit")); !errors.Is(err, txn.ErrConflict) {
		t.Fatalf("Commit after its read changed = %v, want ErrConflict", err)
	}
	if _, err := s.Get(ctx, "ex-1"); !errors.Is(err, txn.ErrNotFound) {
		t.Fatalf("a failed commit stored a record: %v", err)
	}
	VerifyChain(t, s, 0)
	// The rollback stores the record with the events of the beginning
	// first, and discards the writes.
	if err := tx.Rollback(ctx, Record("ex-1", "tool", "ROLLED_BACK"), Event("rollback")); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Get(ctx, "ex-1"); err != nil || r.State != "ROLLED_BACK" || r.WriteSet == nil || r.WriteSet.Committed || r.WriteSet.Puts != 1 {
		t.Fatalf("record = %+v, %v", r, err)
	}
	if st, _ := dumpState(s); !reflect.DeepEqual(st, map[string]map[string]string{"ns": {"seen": "1"}}) {
		t.Fatalf("state after the rollback = %v", st)
	}
	VerifyChain(t, s, 2)
	wantEvents(t, s, 0, "begin", "rollback")

	// A commit stores the record, the writes and every event in one write.
	tx, err = s.BeginUnclaimed(ctx, Record("ex-2", "tool", "EXECUTING"), Event("begin 2"), Event("run 2"))
	if err != nil {
		t.Fatal(err)
	}
	if v, _, err := tx.Get("ns", "seen"); err != nil || string(v) != "1" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if err := tx.Put("ns", "out", []byte("y")); err != nil {
		t.Fatal(err)
	}
	// A failure at any step writes nothing of it.
	for _, step := range []string{txn.StepCheckReads, txn.StepApplyWrite, txn.StepAudit} {
		b.setFailpoint(func(got string) error {
			if got == step {
				return errors.New("injected at " + step)
			}
			return nil
		})
		err := tx.Commit(ctx, Record("ex-2", "tool", "COMPLETED"), Event("commit 2"))
		b.setFailpoint(nil)
		if !errors.Is(err, txn.ErrCommit) {
			t.Fatalf("%s: Commit = %v, want ErrCommit", step, err)
		}
		if _, err := s.Get(ctx, "ex-2"); !errors.Is(err, txn.ErrNotFound) {
			t.Fatalf("%s: a failed commit stored a record: %v", step, err)
		}
		if v, ok, _ := s.StateValue(ctx, "ns", "out"); ok {
			t.Fatalf("%s: a failed commit wrote ns/out = %q", step, v)
		}
		VerifyChain(t, s, 2)
	}
	if err := tx.Commit(ctx, Record("ex-2", "tool", "COMPLETED"), Event("commit 2")); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Get(ctx, "ex-2"); err != nil || r.State != "COMPLETED" || r.WriteSet == nil || !r.WriteSet.Committed || r.WriteSet.Puts != 1 {
		t.Fatalf("record = %+v, %v", r, err)
	}
	if v, ok, err := s.StateValue(ctx, "ns", "out"); err != nil || !ok || string(v) != "y" {
		t.Fatalf("ns/out = %q, %v, %v; want y", v, ok, err)
	}
	VerifyChain(t, s, 5)
	wantEvents(t, s, 2, "begin 2", "run 2", "commit 2")
	if err := tx.Rollback(ctx, Record("ex-2", "tool", "ROLLED_BACK")); !errors.Is(err, txn.ErrTxDone) {
		t.Fatalf("Rollback after Commit = %v, want ErrTxDone", err)
	}

	// The id must still be free when the Tx ends: of two executions under
	// one id, the second to end fails and writes nothing.
	tx, err = s.BeginUnclaimed(ctx, Record("ex-3", "tool", "EXECUTING"), Event("begin 3"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, Record("ex-3", "tool", "DENIED"), Event("denied 3")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, Record("ex-3", "tool", "COMPLETED"), Event("commit 3")); !errors.Is(err, txn.ErrExists) {
		t.Fatalf("Commit under a taken id = %v, want ErrExists", err)
	}
	if r, err := s.Get(ctx, "ex-3"); err != nil || r.State != "DENIED" {
		t.Fatalf("record = %+v, %v; want the DENIED one untouched", r, err)
	}
	VerifyChain(t, s, 6)

	// A claimed execution cannot be ended as an unclaimed one.
	if _, err := s.Begin(ctx, Record("ex-4", "tool", "EXECUTING")); err != nil {
		t.Fatal(err)
	}
	tx, err = s.BeginUnclaimed(ctx, Record("ex-4", "tool", "EXECUTING"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx, Record("ex-4", "tool", "ROLLED_BACK")); !errors.Is(err, txn.ErrExists) {
		t.Fatalf("Rollback of an unclaimed Tx whose id is claimed = %v, want ErrExists", err)
	}
	if r, err := s.Get(ctx, "ex-4"); err != nil || r.State != "EXECUTING" {
		t.Fatalf("record = %+v, %v; want the claim untouched", r, err)
	}
}

// wantEvents checks the events of the log after seq after, in order.
func wantEvents(t *testing.T, s *txn.Store, after uint64, whats ...string) {
	t.Helper()
	log, err := s.AuditLog(context.Background(), after+1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range log {
		got = append(got, string(e.Event))
	}
	var want []string
	for _, w := range whats {
		want = append(want, string(Event(w).Data))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events after %d = %q, want %q", after, got, want)
	}
}
