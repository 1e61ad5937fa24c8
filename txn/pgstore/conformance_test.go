package pgstore_test

import (
	"testing"

	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/txn/driver"
	"github.com/toolgate/toolgate/txn/pgstore"
	"github.com/toolgate/toolgate/txn/storetest"
)

// The Postgres backend passes the store's conformance suite (on a fresh
// database of the server TOOLGATE_TEST_POSTGRES names; skipped without
// it, saying how to run it).
func TestConformance(t *testing.T) {
	storetest.Run(t, &storetest.Backend{
		Fresh: testdb.FreshPostgres,
		Open: func(url string, failpoint func(string) error) (driver.Backend, error) {
			return pgstore.Open(url, &pgstore.Options{NoSync: true, Failpoint: failpoint})
		},
	})
}
