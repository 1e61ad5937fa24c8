package txn

import (
	"bytes"
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

// PutState sets key of a state namespace to value in one update, outside
// any transaction: like DeleteState, for the runtime's own bookkeeping
// only.
func (s *Store) PutState(ctx context.Context, namespace, key string, value []byte) error {
	if err := validateKey(namespace, key); err != nil {
		return err
	}
	v := bytes.Clone(value)
	return s.write(ctx, func(*bolt.Tx) error { return nil }, func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketState).CreateBucketIfNotExists([]byte(namespace))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), v)
	})
}
