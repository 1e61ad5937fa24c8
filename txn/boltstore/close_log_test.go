package boltstore_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/boltstore"
)

// A Close that cannot remove the write-ahead log (here: something else
// now stands at its path) says so, where a log already gone is no error
// (TestClose_LogAlreadyRemoved).
func TestClose_LogCannotBeRemoved(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "toolgate.db")
	s, err := txn.Open(path, &txn.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(context.Background(), newRecord("a", "tool", "DENIED")); err != nil {
		t.Fatal(err)
	}
	wal := boltstore.WALPath(path)
	if err := os.Rename(wal, filepath.Join(dir, "moved.wal")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(wal, "in-the-way"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err == nil {
		t.Fatal("Close removed nothing and said nothing")
	}
}
