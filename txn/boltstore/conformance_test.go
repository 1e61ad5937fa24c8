package boltstore_test

import (
	"path/filepath"
	"testing"

	"github.com/toolgate/toolgate/txn/boltstore"
	"github.com/toolgate/toolgate/txn/driver"
	"github.com/toolgate/toolgate/txn/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The bbolt backend passes the store's conformance suite.
func TestConformance(t *testing.T) {
	storetest.Run(t, &storetest.Backend{
		Fresh: func(t testing.TB) string { return filepath.Join(t.TempDir(), "toolgate.db") },
		Open: func(path string, failpoint func(string) error) (driver.Backend, error) {
			return boltstore.Open(path, &boltstore.Options{NoSync: true, Failpoint: failpoint})
		},
	})
}
