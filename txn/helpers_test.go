package txn_test

import (
	"os"
	"testing"

	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/storetest"
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

// The suite's record, event and chain check (txn/storetest).
var (
	ev          = storetest.Event
	verifyChain = storetest.VerifyChain
)
