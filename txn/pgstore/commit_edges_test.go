package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/pgstore"
)

// The group transaction's edges: a connection lost inside a group, a commit
// that fails or goes unanswered, a head whose row was tampered with. About
// the Postgres backend alone:
//
//	bash scripts/pg-test.sh run go test -run 'TestPostgresGroup' ./txn/pgstore

// openWithFailpoint opens a writing store on dbURL whose commit steps call
// fp (nil: none until set), behind a txn.Store closed when t ends.
func openWithFailpoint(t *testing.T, dbURL string, fp *atomic.Pointer[func(string) error]) *txn.Store {
	t.Helper()
	be, err := pgstore.Open(dbURL, &pgstore.Options{NoSync: true, Failpoint: func(step string) error {
		if f := fp.Load(); f != nil {
			return (*f)(step)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := txn.NewStore(be, dbURL)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// endOtherSessions ends every other session of the database, as an
// operator or a failover would, and waits until they are gone. It may run
// on the store's committer (in a guard, at a failpoint), so it returns its
// error rather than failing the test there.
func endOtherSessions(dbURL string) error {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	return err
}

// A connection lost while a group's guard reads (before its commit was
// sent: nothing of it written) costs the write nothing: the group is tried
// again on a fresh connection, and the guard runs again there.
func TestPostgresGroupConnectionLostInGuard(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	s := openAt(t, dbURL)
	if err := s.PutState(ctx, "ns", "k", []byte("1")); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	err := s.UpdateState(ctx, func(v *txn.StateView) error {
		if runs.Add(1) == 1 {
			if err := endOtherSessions(dbURL); err != nil {
				return err
			}
		}
		old, _ := v.Get("ns", "k")
		return v.Put("ns", "k", append(old, '2'))
	}, ev("e"))
	if err != nil {
		t.Fatalf("a write whose connection was lost in its guard = %v, want it tried again and done", err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the guard ran %d times, want 2 (once on the lost connection, once again)", n)
	}
	if v, _, err := s.StateValue(ctx, "ns", "k"); err != nil || string(v) != "12" {
		t.Fatalf("after the write: %q, %v; want \"12\"", v, err)
	}
	verifyChain(t, s, 1)
}

// A connection lost while a group applies its writes: the same, the group
// is tried again on a fresh connection and lands once.
func TestPostgresGroupConnectionLostInApply(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	var fp atomic.Pointer[func(string) error]
	s := openWithFailpoint(t, dbURL, &fp)
	var ended atomic.Bool
	hook := func(step string) error {
		if step == txn.StepApplyWrite && ended.CompareAndSwap(false, true) {
			return endOtherSessions(dbURL)
		}
		return nil
	}
	fp.Store(&hook)
	tx, err := s.Begin(ctx, newRecord("x", "tool", "EXECUTING"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put("ns", "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Put("ns", "b", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, newRecord("x", "tool", "COMMITTED"), ev("done")); err != nil {
		t.Fatalf("a commit whose connection was lost while applying = %v, want it tried again and done", err)
	}
	if !ended.Load() {
		t.Fatal("the failpoint never ran: the test tested nothing")
	}
	if r, err := s.Get(ctx, "x"); err != nil || r.State != "COMMITTED" {
		t.Fatalf("record after the commit: %v, %v", r, err)
	}
	st, err := s.Driver().(*pgstore.Store).DumpState(ctx)
	if err != nil || st["ns"]["a"] != "1" || st["ns"]["b"] != "2" {
		t.Fatalf("state after the commit: %v, %v", st, err)
	}
	verifyChain(t, s, 1)
}

// A connection lost when the commit is sent: the store asks Postgres
// whether the group's transaction happened (by the group number in its
// node's row); it did not, so the write fails with ErrUnavailable saying
// that nothing was written, and nothing was. The next write goes through.
func TestPostgresGroupConnectionLostAtCommit(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	var fp atomic.Pointer[func(string) error]
	s := openWithFailpoint(t, dbURL, &fp)
	if err := s.PutState(ctx, "ns", "k", []byte("1")); err != nil {
		t.Fatal(err)
	}
	var ended atomic.Bool
	hook := func(step string) error {
		if step == txn.StepCommit && ended.CompareAndSwap(false, true) {
			return endOtherSessions(dbURL)
		}
		return nil
	}
	fp.Store(&hook)
	err := s.UpdateState(ctx, func(v *txn.StateView) error { return v.Put("ns", "k", []byte("2")) }, ev("lost"))
	if !errors.Is(err, txn.ErrUnavailable) || !strings.Contains(err.Error(), "the connection was lost during the commit") ||
		!strings.Contains(err.Error(), "which did not happen: nothing was written") {
		t.Fatalf("a write whose commit was lost = %v, want ErrUnavailable saying it did not happen", err)
	}
	if v, _, err := s.StateValue(ctx, "ns", "k"); err != nil || string(v) != "1" {
		t.Fatalf("after the lost commit: %q, %v; want \"1\" (nothing written)", v, err)
	}
	if err := s.UpdateState(ctx, func(v *txn.StateView) error { return v.Put("ns", "k", []byte("3")) }, ev("after")); err != nil {
		t.Fatalf("the write after = %v", err)
	}
	verifyChain(t, s, 1)
}

// A commit Postgres refuses (here a trigger an operator put on the audit
// table) fails the group's writes, naming the first audit entry it would
// have appended, and writes nothing of them. The writes after go through
// once the cause is gone.
func TestPostgresGroupCommitRefused(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	s := openAt(t, dbURL)
	if err := s.UpdateState(ctx, func(v *txn.StateView) error { return v.Put("ns", "k", []byte("1")) }, ev("first"), ev("second")); err != nil {
		t.Fatal(err)
	}
	pgExec(t, dbURL, `CREATE FUNCTION no_appends() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'no appends today'; END $$;
		CREATE TRIGGER no_appends BEFORE INSERT ON toolgate_audit FOR EACH ROW EXECUTE FUNCTION no_appends()`)
	err := s.UpdateState(ctx, func(v *txn.StateView) error { return v.Put("ns", "k", []byte("2")) }, ev("refused"))
	if err == nil || !strings.Contains(err.Error(), "append audit events from 3 and commit: no appends today; nothing was written") {
		t.Fatalf("a write whose commit was refused = %v, want an error naming entry 3 and the cause", err)
	}
	if v, _, err := s.StateValue(ctx, "ns", "k"); err != nil || string(v) != "1" {
		t.Fatalf("after the refused commit: %q, %v; want \"1\" (nothing written)", v, err)
	}
	pgExec(t, dbURL, `DROP TRIGGER no_appends ON toolgate_audit`)
	if err := s.UpdateState(ctx, func(v *txn.StateView) error { return v.Put("ns", "k", []byte("3")) }, ev("third")); err != nil {
		t.Fatalf("the write after = %v", err)
	}
	verifyChain(t, s, 3)
}

// An error just before a group's commit (the StepCommit failpoint) fails
// the group's writes with it and writes nothing of them; unlike bbolt,
// whose store a failed commit poisons, the store goes on: the next write
// goes through.
func TestPostgresGroupFailsBeforeCommit(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	var fp atomic.Pointer[func(string) error]
	s := openWithFailpoint(t, dbURL, &fp)
	tx, err := s.Begin(ctx, newRecord("x", "tool", "EXECUTING"), ev("begin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put("ns", "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	injected := errors.New("injected before the commit")
	hook := func(step string) error {
		if step == txn.StepCommit {
			return injected
		}
		return nil
	}
	fp.Store(&hook)
	if err := tx.Commit(ctx, newRecord("x", "tool", "COMMITTED"), ev("commit")); !errors.Is(err, injected) {
		t.Fatalf("Commit with a failure before the commit = %v, want the injected error", err)
	}
	fp.Store(nil)
	if r, err := s.Get(ctx, "x"); err != nil || r.State != "EXECUTING" {
		t.Fatalf("record after the failed commit: %v, %v", r, err)
	}
	if st, err := s.Driver().(*pgstore.Store).DumpState(ctx); err != nil || len(st["ns"]) != 0 {
		t.Fatalf("state after the failed commit: %v, %v", st, err)
	}
	if err := tx.Commit(ctx, newRecord("x", "tool", "COMMITTED"), ev("commit")); err != nil {
		t.Fatalf("the commit again = %v", err)
	}
	verifyChain(t, s, 2)
}
