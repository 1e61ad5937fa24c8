package txn_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/txn"
)

// Postgres goes away and comes back, or a statement times out: the calls
// fail with a clear error, nothing is half-written, and the store goes on
// once Postgres answers again. About the Postgres backend alone; the
// restart needs the server scripts/pg-test.sh started (it exports
// TOOLGATE_TEST_PG_DIR):
//
//	bash scripts/pg-test.sh run go test -run TestPostgresOutage ./txn

func pgServer(t *testing.T, action string) {
	t.Helper()
	dir := os.Getenv("TOOLGATE_TEST_PG_DIR")
	if out, err := exec.Command("bash", "../scripts/pg-test.sh", action, dir).CombinedOutput(); err != nil {
		t.Fatalf("pg-test.sh %s: %v\n%s", action, err, out)
	}
}

// put writes ns/k with one audit event.
func put(s *txn.Store, v, event string) error {
	return s.UpdateState(context.Background(), func(view *txn.StateView) error { return view.Put("ns", "k", []byte(v)) }, ev(event))
}

func TestPostgresOutageServerRestarted(t *testing.T) {
	dbURL := freshPostgres(t)
	if os.Getenv("TOOLGATE_TEST_PG_DIR") == "" {
		t.Skip("TOOLGATE_TEST_PG_DIR is not set: run it under bash scripts/pg-test.sh run, which can restart its server")
	}
	ctx := context.Background()
	s := openNode(t, dbURL, "a", 0)
	if err := put(s, "1", "one"); err != nil {
		t.Fatal(err)
	}
	tx, err := s.Begin(ctx, newRecord("before", "tool", "EXECUTING"), ev("begin"))
	if err != nil {
		t.Fatal(err)
	}
	_ = tx.Put("ns", "k", []byte("from the tx"))

	pgServer(t, "down")
	up := false
	defer func() {
		if !up {
			pgServer(t, "up")
		}
	}()
	if err := put(s, "2", "two"); !errors.Is(err, txn.ErrUnavailable) || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("a write while Postgres is down = %v, want ErrUnavailable saying nothing was written", err)
	}
	if _, err := s.Begin(ctx, newRecord("during", "tool", "EXECUTING")); !errors.Is(err, txn.ErrUnavailable) {
		t.Fatalf("Begin while Postgres is down = %v, want ErrUnavailable", err)
	}
	if err := tx.Commit(ctx, newRecord("before", "tool", "COMMITTED")); !errors.Is(err, txn.ErrUnavailable) {
		t.Fatalf("Commit while Postgres is down = %v, want ErrUnavailable", err)
	}
	if _, err := s.Get(ctx, "before"); err == nil {
		t.Fatal("a read while Postgres is down succeeded")
	}
	if _, err := txn.Open(dbURL, &txn.Options{Timeout: 100 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "connect to") {
		t.Fatalf("Open while Postgres is down = %v, want a refused start naming the connection", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("the store is poisoned: %v", err)
	}

	pgServer(t, "up")
	up = true
	// The same store goes on: the write that failed wrote nothing, the
	// claim is still there to end.
	if err := put(s, "3", "three"); err != nil {
		t.Fatalf("a write once Postgres is back: %v", err)
	}
	if err := tx.Rollback(ctx, newRecord("before", "tool", "ROLLED_BACK")); err != nil {
		t.Fatalf("Rollback of the claim made before the outage: %v", err)
	}
	waitFor(t, "a claim after the outage", func() bool {
		tx, err := s.Begin(ctx, newRecord("after", "tool", "EXECUTING"), ev("begin after"))
		if err == nil {
			err = tx.Commit(ctx, newRecord("after", "tool", "COMMITTED"))
		}
		return err == nil
	})
	if v, _, err := s.StateValue(ctx, "ns", "k"); err != nil || string(v) != "3" {
		t.Fatalf("state after the outage = %q, %v; want 3", v, err)
	}
	if _, err := s.Get(ctx, "during"); !errors.Is(err, txn.ErrNotFound) {
		t.Fatalf("the claim refused during the outage = %v, want ErrNotFound", err)
	}
	verifyChain(t, s, 4) // one, begin, three, begin after
}

// A statement that times out (lock_timeout, set in the URL) fails its
// write with a clear error and writes nothing; the next one goes through.
func TestPostgresOutageStatementTimeout(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	s := openNode(t, dbURL+"&lock_timeout=200", "a", 0)
	if err := put(s, "1", "one"); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	blocker, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(ctx, `SELECT 1 FROM toolgate_audit_head FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	err = put(s, "2", "two")
	if !errors.Is(err, txn.ErrUnavailable) || !strings.Contains(err.Error(), "lock timeout") || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("a write that times out = %v, want ErrUnavailable naming the timeout", err)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := put(s, "3", "three"); err != nil {
		t.Fatalf("the next write: %v", err)
	}
	if v, _, _ := s.StateValue(ctx, "ns", "k"); string(v) != "3" {
		t.Fatalf("state = %q, want 3", v)
	}
	verifyChain(t, s, 2)
}
