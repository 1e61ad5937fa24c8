package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
	// A failure before a claim is stored: the Begin fails, nothing stored.
	claimFails := errors.New("injected before the claim")
	claimHook := func(step string) error {
		if step == txn.StepClaim {
			return claimFails
		}
		return nil
	}
	fp.Store(&claimHook)
	if _, err := s.Begin(ctx, newRecord("y", "tool", "EXECUTING"), ev("y")); !errors.Is(err, claimFails) {
		t.Fatalf("Begin with a failure before the claim = %v, want the injected error", err)
	}
	fp.Store(nil)
	if r, err := s.Get(ctx, "y"); !errors.Is(err, txn.ErrNotFound) {
		t.Fatalf("after the failed Begin: %v, %v; want no record", r, err)
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

// A connection lost on every try: the group is tried again twice (three
// tries in all), then its writes fail with ErrUnavailable, saying nothing
// was written, rather than being retried for ever.
func TestPostgresGroupConnectionLostEveryTry(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	s := openAt(t, dbURL)
	var runs atomic.Int32
	tooMany := errors.New("tried more than three times")
	var ended [3]time.Time // when each try's connection was ended
	var gaps []time.Duration
	err := s.UpdateState(ctx, func(v *txn.StateView) error {
		n := runs.Add(1)
		if n > 3 {
			return tooMany // ends a store that would try for ever
		}
		if n > 1 {
			gaps = append(gaps, time.Since(ended[n-2]))
		}
		if err := endOtherSessions(dbURL); err != nil {
			return err
		}
		ended[n-1] = time.Now()
		v.Get("ns", "k")
		return v.Put("ns", "k", []byte("never"))
	}, ev("e"))
	if !errors.Is(err, txn.ErrUnavailable) || !strings.Contains(err.Error(), "nothing was written") ||
		strings.Contains(err.Error(), "no answer") {
		t.Fatalf("a write whose connection is lost on every try = %v, want ErrUnavailable saying nothing was written (and not that Postgres did not answer in time: it did)", err)
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("the guard ran %d times, want 3 (a try and two more)", n)
	}
	// A pause before each new try (50ms, then 100ms): a restarting server
	// is given time rather than a burst of connections.
	if len(gaps) != 2 || gaps[0] < 50*time.Millisecond || gaps[1] < 100*time.Millisecond {
		t.Fatalf("the tries came %v after the connection was lost; want pauses of at least 50ms, then 100ms", gaps)
	}
	if v, found, err := s.StateValue(ctx, "ns", "k"); err != nil || found {
		t.Fatalf("after the failed write: %q, %v, %v; want nothing", v, found, err)
	}
	verifyChain(t, s, 0)
}

// A write that fails in a way that aborts its group's transaction (here
// an id already used, which the primary key finds) fails alone, wherever
// it is in its group, first included: the others are redone without it.
func TestPostgresGroupFirstWriteAborts(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	var fp atomic.Pointer[func(string) error]
	s := openWithFailpoint(t, dbURL, &fp)
	p := s.Driver().(*pgstore.Store)
	if err := s.Put(ctx, newRecord("used", "tool", "DENIED")); err != nil {
		t.Fatal(err)
	}
	// The committer holds a write at its commit until the two others are
	// queued behind it, in order: the next group is [used, fresh].
	release := make(chan struct{})
	var held atomic.Bool
	hook := func(step string) error {
		if step == txn.StepCommit && held.CompareAndSwap(false, true) {
			<-release
		}
		return nil
	}
	fp.Store(&hook)
	errs := make([]chan error, 3)
	for i := range errs {
		errs[i] = make(chan error, 1)
	}
	go func() { errs[0] <- s.PutState(ctx, "ns", "first", nil) }()
	waitFor(t, "the first write to reach its commit", held.Load)
	go func() { errs[1] <- s.Put(ctx, newRecord("used", "tool", "DENIED"), ev("again")) }()
	waitFor(t, "the used id to be queued", func() bool { return p.Queued() == 1 })
	go func() { errs[2] <- s.Put(ctx, newRecord("fresh", "tool", "DENIED"), ev("fresh")) }()
	waitFor(t, "the fresh id to be queued", func() bool { return p.Queued() == 2 })
	close(release)
	if err := <-errs[0]; err != nil {
		t.Fatalf("the first write = %v", err)
	}
	if err := <-errs[1]; !errors.Is(err, txn.ErrExists) {
		t.Fatalf("Put of a used id = %v, want ErrExists", err)
	}
	if err := <-errs[2]; err != nil {
		t.Fatalf("Put of a fresh id grouped after a used one = %v, want it stored", err)
	}
	if r, err := s.Get(ctx, "fresh"); err != nil || r.State != "DENIED" {
		t.Fatalf("the fresh record: %v, %v", r, err)
	}
	// A write that fails alone costs its group's transaction and no more
	// (no empty one after it was taken out).
	before := p.Batches()
	if err := s.Put(ctx, newRecord("used", "tool", "DENIED")); !errors.Is(err, txn.ErrExists) {
		t.Fatalf("Put of a used id = %v, want ErrExists", err)
	}
	if n := p.Batches() - before; n != 1 {
		t.Fatalf("a write that failed alone ran %d transactions, want 1", n)
	}
	verifyChain(t, s, 1)
}

// An error before the commit that is not a lost connection (here a column
// the store needs renamed) fails the group at once, ErrUnavailable saying
// nothing was written: only a lost connection is tried again.
func TestPostgresGroupStatementErrorNotRetried(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	s := openAt(t, dbURL)
	p := s.Driver().(*pgstore.Store)
	pgExec(t, dbURL, `ALTER TABLE toolgate_nodes RENAME COLUMN grp TO grp_renamed`)
	before := p.Batches()
	err := s.PutState(ctx, "ns", "k", []byte("v"))
	if !errors.Is(err, txn.ErrUnavailable) || !strings.Contains(err.Error(), `column "grp" of relation "toolgate_nodes" does not exist; nothing was written`) {
		t.Fatalf("a write whose statement fails = %v, want ErrUnavailable naming the cause", err)
	}
	if n := p.Batches() - before; n != 1 {
		t.Fatalf("a write whose statement failed ran %d transactions, want 1 (not tried again)", n)
	}
	pgExec(t, dbURL, `ALTER TABLE toolgate_nodes RENAME COLUMN grp_renamed TO grp`)
	if err := s.PutState(ctx, "ns", "k", []byte("v")); err != nil {
		t.Fatalf("the write after = %v", err)
	}
}
