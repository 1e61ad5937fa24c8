package pgstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/txn"
	"go.uber.org/goleak"
)

// TestMain fails a suite that passed when goroutines are left (a store
// that does not stop its committer, its lease renewal or its connections
// on Close).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2025, 3, 4, 5, 6, 7, 890, time.UTC)

// freshPostgres is the one fresh-database fixture (internal/testdb).
func freshPostgres(t testing.TB) string { return testdb.FreshPostgres(t) }

func newRecord(id, toolID, state string) *txn.Record {
	return &txn.Record{
		ExecutionID: id,
		CallID:      "call-" + id,
		Attempt:     1,
		ToolID:      toolID,
		ToolVersion: "1.0.0",
		State:       state,
		Transitions: []txn.Transition{{From: "AUTHORIZED", To: state, Event: "run", At: t0}},
		StartedAt:   t0,
	}
}

func ev(s string) txn.AuditEvent {
	return txn.AuditEvent{Data: []byte(`{"what":` + strconv.Quote(s) + `}`)}
}

// verifyChain checks the log with audit.Verifier, as `toolgate audit
// verify` does, and that it holds want entries.
func verifyChain(t *testing.T, s *txn.Store, want uint64) {
	t.Helper()
	ctx := context.Background()
	v := &audit.Verifier{}
	if err := s.AuditRaw(ctx, v.Add); err != nil {
		t.Fatalf("AuditRaw: %v", err)
	}
	if err := v.Finish(); err != nil {
		t.Fatalf("audit.Verifier: %v", err)
	}
	if v.Len() != want {
		t.Fatalf("the verifier saw %d entries, want %d", v.Len(), want)
	}
	head, err := s.AuditHead(ctx)
	if err != nil || head != want {
		t.Fatalf("AuditHead = %d, %v; want %d", head, err, want)
	}
}

func pgExec(t *testing.T, dbURL, sql string) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func openAt(t *testing.T, path string) *txn.Store {
	t.Helper()
	s, err := txn.Open(path, &txn.Options{NoSync: true})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
