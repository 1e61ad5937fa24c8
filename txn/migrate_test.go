package txn_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/txn"
)

// A format 2 file (records as JSON) is upgraded in place by the first
// writer: every record reads back as it was written, claims included.
func TestOpen_MigratesFormat2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	final := newRecord("exec-final", "echo", "COMPLETED")
	final.Output = json.RawMessage(`{"msg":"x"}`)
	claim := newRecord("exec-claim", "echo", "EXECUTING")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range []string{"meta", "executions", "state", "executing", "audit"} {
			if _, err := tx.CreateBucket([]byte(name)); err != nil {
				return err
			}
		}
		if err := tx.Bucket([]byte("meta")).Put([]byte("format"), binary.BigEndian.AppendUint64(nil, 2)); err != nil {
			return err
		}
		for bucket, r := range map[string]*txn.Record{"executions": final, "executing": claim} {
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if err := tx.Bucket([]byte(bucket)).Put([]byte(r.ExecutionID), b); err != nil {
				return err
			}
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	if _, err := txn.Open(path, &txn.Options{ReadOnly: true}); !errors.Is(err, txn.ErrIncompatible) {
		t.Fatalf("a read-only open of format 2: %v; want ErrIncompatible (it does not upgrade)", err)
	}
	s := openStoreAt(t, path)
	for _, want := range []*txn.Record{final, claim} {
		got, err := s.Get(context.Background(), want.ExecutionID)
		if err != nil {
			t.Fatalf("%s after the upgrade: %v", want.ExecutionID, err)
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if !reflect.DeepEqual(string(g), string(w)) {
			t.Errorf("%s changed in the upgrade:\n got %s\nwant %s", want.ExecutionID, g, w)
		}
	}
	if ids, err := txn.Claims(s); err != nil || len(ids) != 1 || ids[0] != "exec-claim" {
		t.Errorf("claims after the upgrade: %v, %v", ids, err)
	}
}
