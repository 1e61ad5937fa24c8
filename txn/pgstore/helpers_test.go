package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/storetest"
	"go.uber.org/goleak"
)

// TestMain fails a suite that passed when goroutines are left (a store
// that does not stop its committer, its lease renewal or its connections
// on Close).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2025, 3, 4, 5, 6, 7, 890, time.UTC)

// freshPostgres is the one fresh-database fixture (internal/testdb).
func freshPostgres(t testing.TB) string { return testdb.FreshPostgres(t) }

// The suite's record, event and chain check (txn/storetest).
var (
	newRecord   = storetest.Record
	ev          = storetest.Event
	verifyChain = storetest.VerifyChain
)

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
