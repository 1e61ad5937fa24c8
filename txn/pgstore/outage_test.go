package pgstore_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/txn"
)

// Postgres goes away and comes back, or a statement times out: the calls
// fail with a clear error, nothing is half-written, and the store goes on
// once Postgres answers again. About the Postgres backend alone. The
// restart is of a server of the test's own (scripts/pg-test.sh start), not
// the shared one other packages' tests may be using:
//
//	bash scripts/pg-test.sh run go test -run TestPostgresOutage ./txn/pgstore

// ownServer starts a throwaway Postgres for this test alone and returns
// its URL and a function taking it down ("down") or up again ("up").
func ownServer(t *testing.T) (string, func(action string)) {
	t.Helper()
	if os.Getenv("TOOLGATE_TEST_POSTGRES") == "" {
		t.Skip(testdb.HowTo())
	}
	out, err := exec.Command("bash", "../../scripts/pg-test.sh", "start").Output()
	if err != nil {
		t.Fatalf("pg-test.sh start: %v", err)
	}
	var dbURL, dir string
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "export TOOLGATE_TEST_POSTGRES='"); ok {
			dbURL = strings.TrimSuffix(v, "'")
		}
		if i := strings.LastIndex(line, " stop "); strings.HasPrefix(line, "# stop") && i > 0 {
			dir = line[i+len(" stop "):]
		}
	}
	if dbURL == "" || dir == "" {
		t.Fatalf("pg-test.sh start said:\n%s", out)
	}
	t.Cleanup(func() { _ = exec.Command("bash", "../../scripts/pg-test.sh", "stop", dir).Run() })
	return dbURL, func(action string) {
		t.Helper()
		if out, err := exec.Command("bash", "../../scripts/pg-test.sh", action, dir).CombinedOutput(); err != nil {
			t.Fatalf("pg-test.sh %s: %v\n%s", action, err, out)
		}
	}
}

// put writes ns/k with one audit event.
func put(s *txn.Store, v, event string) error {
	return s.UpdateState(context.Background(), func(view *txn.StateView) error { return view.Put("ns", "k", []byte(v)) }, ev(event))
}

func TestPostgresOutageServerRestarted(t *testing.T) {
	dbURL, pgServer := ownServer(t)
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

	pgServer("down")
	up := false
	defer func() {
		if !up {
			pgServer("up")
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

	pgServer("up")
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
