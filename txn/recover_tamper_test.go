package txn_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/txn"
)

// Recovery finishes claims only: a final record moved into the claims by
// hand (so that recovery would rewrite it, with genuine events, as
// interrupted) or a record both claimed and final is refused as corrupt,
// and nothing is rewritten.
func TestStore_RecoverRefusesForgedClaims(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		move func(b, claims *bolt.Bucket, id []byte) error
	}{
		{"final record moved into the claims", func(b, claims *bolt.Bucket, id []byte) error {
			v := append([]byte(nil), b.Get(id)...)
			if err := claims.Put(id, v); err != nil {
				return err
			}
			return b.Delete(id)
		}},
		{"final record copied into the claims", func(b, claims *bolt.Bucket, id []byte) error {
			return claims.Put(id, append([]byte(nil), b.Get(id)...))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a.db")
			s, err := txn.Open(path, &txn.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			tx, err := s.Begin(ctx, executing("x1"))
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx, finalOf("x1")); err != nil {
				t.Fatal(err)
			}
			s.Close()
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(btx *bolt.Tx) error {
				return tc.move(btx.Bucket([]byte("executions")), btx.Bucket([]byte("executing")), []byte("x1"))
			}); err != nil {
				t.Fatal(err)
			}
			db.Close()
			s, err = txn.Open(path, &txn.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			finished := 0
			_, err = s.Recover(ctx, func(r *txn.Record) ([]txn.AuditEvent, error) {
				finished++
				r.State = "ROLLED_BACK"
				return nil, nil
			})
			if !errors.Is(err, txn.ErrCorrupt) || finished != 0 {
				t.Fatalf("Recover: %v, %d finished; want ErrCorrupt and none", err, finished)
			}
		})
	}
}
