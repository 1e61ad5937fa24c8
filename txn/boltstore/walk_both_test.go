package boltstore_test

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/txn"
)

// An id stored both as a final record and as a claim (which no write of
// the store makes: a file edited below it) is walked once, as the final
// record, in both directions.
func TestWalk_FinalAndClaimUnderOneID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	ctx := context.Background()
	s, err := txn.Open(path, &txn.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := s.Put(ctx, newRecord(id, "tool", "DENIED")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	claim, err := txn.EncodeRecord(newRecord("b", "tool", "EXECUTING"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("executing"))
		if err != nil {
			return err
		}
		return b.Put([]byte("b"), claim)
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	be := ro.Driver()
	for _, reverse := range []bool{false, true} {
		var got []string
		walk := be.Walk
		if reverse {
			walk = be.WalkBack
		}
		if err := walk(ctx, "", func(id string, data []byte) bool {
			kind := ":final"
			if bytes.Equal(data, claim) {
				kind = ":claim"
			}
			got = append(got, id+kind)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		want := []string{"a:final", "b:final", "c:final"}
		if reverse {
			want = []string{"c:final", "b:final", "a:final"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("reverse=%v: walked %v, want %v", reverse, got, want)
		}
	}
}
