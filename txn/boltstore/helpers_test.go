package boltstore_test

import (
	"testing"

	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/storetest"
)

// openStoreAt opens the bbolt file at path behind a txn.Store (txn.Open
// picks this backend for a file path), closed at cleanup.
func openStoreAt(t *testing.T, path string) *txn.Store {
	t.Helper()
	s, err := txn.Open(path, &txn.Options{NoSync: true})
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newRecord returns a valid record in the given state.
var newRecord = storetest.Record
