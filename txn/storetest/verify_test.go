package storetest_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/storetest"
	bolt "go.etcd.io/bbolt"
)

// Verify, which checks every database the suite used when its test ends,
// finds what `toolgate audit verify` finds: a changed audit entry, and a
// record that does not decode; and nothing in a database left as written.
func TestVerify(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolgate.db")
	s, err := txn.Open(path, &txn.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	rec := &txn.Record{ExecutionID: "a", ToolID: "tool", ToolVersion: "1", State: "DENIED", StartedAt: at}
	if err := s.Put(ctx, rec, txn.AuditEvent{Data: []byte(`{"what":"denied"}`)}); err != nil {
		t.Fatal(err)
	}
	if got := storetest.Verify(ctx, s); len(got) != 0 {
		t.Fatalf("Verify of a database as written = %q", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	tamper := func(bucket, key string, change func([]byte) []byte) {
		t.Helper()
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		err = db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(bucket))
			return b.Put([]byte(key), change(bytes.Clone(b.Get([]byte(key)))))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check := func(want string) {
		t.Helper()
		s, err := txn.Open(path, &txn.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		got := storetest.Verify(ctx, s)
		if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), want) {
			t.Fatalf("Verify = %q, want a problem with %q", got, want)
		}
	}
	tamper("audit", "\x00\x00\x00\x00\x00\x00\x00\x01", func(v []byte) []byte {
		return bytes.Replace(v, []byte("denied"), []byte("allowed"), 1)
	})
	check("the audit chain")
	tamper("audit", "\x00\x00\x00\x00\x00\x00\x00\x01", func(v []byte) []byte {
		return bytes.Replace(v, []byte("allowed"), []byte("denied"), 1)
	})
	tamper("executions", "a", func(v []byte) []byte { return v[:len(v)/2] })
	check(`record "a"`)
}
