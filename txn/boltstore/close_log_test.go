package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolgate/toolgate/internal/wal"
	"github.com/toolgate/toolgate/internal/wal/crashfile"
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

// closeFails is a log file whose Close fails.
type closeFails struct{ *crashfile.File }

var errCloseLog = errors.New("the log's file did not close")

func (closeFails) Close() error { return errCloseLog }

// A Close whose log's file fails to close says so, after its checkpoint
// (the file holds every write).
func TestClose_LogCloseFails(t *testing.T) {
	restore := boltstore.SetCrashTest(func(_ string, applied uint64) (*wal.Log, []wal.Entry, error) {
		return wal.OpenFile(closeFails{crashfile.New()}, applied)
	}, 8<<20)
	defer restore()
	path := filepath.Join(t.TempDir(), "toolgate.db")
	s, err := txn.Open(path, &txn.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(context.Background(), newRecord("a", "tool", "DENIED")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); !errors.Is(err, errCloseLog) {
		t.Fatalf("Close = %v; want the log's close error", err)
	}
	restore()
	if _, err := openStoreAt(t, path).Get(context.Background(), "a"); err != nil {
		t.Errorf("the write after that Close: %v", err)
	}
}

// Opening a file whose log holds no entries (a new file, or one its last
// writer closed) writes and syncs nothing to the log: the log is only
// given the number of its next entry.
func TestOpen_EmptyLogNotSynced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	for i := range 2 {
		be, err := boltstore.Open(path, &boltstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if n := be.Syncs(); n != 0 {
			t.Errorf("open %d: %d syncs before any write; want none", i, n)
		}
		if err := be.Put(context.Background(), fmt.Sprint("rec-", i), nil, nil, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		if err := be.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
