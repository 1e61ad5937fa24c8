package txn

import (
	"context"

	bolt "go.etcd.io/bbolt"
)

// DeleteState deletes keys of a state namespace in one update, outside any
// transaction. It is for the runtime's own bookkeeping in namespaces no
// tool reaches (such as the staged-file renames it has finished), never for
// a tool's state, which changes only through a Tx.
func (s *Store) DeleteState(ctx context.Context, namespace string, keys ...string) error {
	for _, k := range keys {
		if err := validateKey(namespace, k); err != nil {
			return err
		}
	}
	return s.write(ctx, func(*bolt.Tx) error { return nil }, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketState).Bucket([]byte(namespace))
		if b == nil {
			return nil
		}
		for _, k := range keys {
			if err := b.Delete([]byte(k)); err != nil {
				return err
			}
		}
		return nil
	})
}
