package txn_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/txn"
)

// Helpers of the package's store tests. The conformance suite every
// backend passes is package txn/storetest (run by txn/boltstore and
// txn/pgstore); tests against Postgres need TOOLGATE_TEST_POSTGRES, the
// URL of a server where the test user may create databases; without it
// they skip.
//
// The package's store tests (those that open their store with
// openStore) run against bbolt, or, with TOOLGATE_TEST_BACKEND=postgres,
// against Postgres:
//
//	TOOLGATE_TEST_BACKEND=postgres bash scripts/pg-test.sh run go test ./txn

// onPostgres reports whether openStore opens Postgres databases.
func onPostgres() bool { return os.Getenv("TOOLGATE_TEST_BACKEND") == "postgres" }

// freshPostgres creates an empty database on the test server, dropped at
// cleanup, and returns its URL: the one fixture, internal/testdb's.
func freshPostgres(t testing.TB) string { return testdb.FreshPostgres(t) }

func openAt(t *testing.T, path string) *txn.Store {
	t.Helper()
	s, err := txn.Open(path, &txn.Options{NoSync: true})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func ev(s string) txn.AuditEvent {
	return txn.AuditEvent{Data: []byte(`{"what":` + strconv.Quote(s) + `}`)}
}

// verifyChain checks the log with audit.Verifier, as `toolgate audit
// verify` does, and that it holds want entries numbered 1..want.
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
	log, err := s.AuditLog(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range log {
		if e.Seq != uint64(i+1) {
			t.Fatalf("entry %d has seq %d: the chain has a gap", i, e.Seq)
		}
	}
	if uint64(len(log)) != want {
		t.Fatalf("AuditLog has %d entries, want %d", len(log), want)
	}
}
