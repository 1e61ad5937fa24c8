package boltstore

import (
	"context"

	bolt "go.etcd.io/bbolt"
)

// Inspection, for tests and tools that look under the contract.

// Claims returns the ids of the claims, in id order.
func (s *Store) Claims(ctx context.Context) ([]string, error) {
	var out []string
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketExecuting).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}

// DumpState returns every namespace's committed state.
func (s *Store) DumpState(ctx context.Context) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketState).ForEach(func(ns, _ []byte) error {
			m := map[string]string{}
			out[string(ns)] = m
			return tx.Bucket(bucketState).Bucket(ns).ForEach(func(k, v []byte) error {
				m[string(k)] = string(v)
				return nil
			})
		})
	})
	return out, err
}

// Batches returns how many bbolt updates the group committer has run.
func (s *Store) Batches() int64 { return s.batches.Load() }

// Queued returns how many writes wait for the group committer.
func (s *Store) Queued() int { return s.w.Queued() }
