package boltstore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/toolgate/toolgate/txn/driver"
	bolt "go.etcd.io/bbolt"
)

// reader is the state of one bbolt transaction, as a guard or a commit's
// check reads it.
type reader struct{ tx *bolt.Tx }

func (r reader) Get(namespace, key string) ([]byte, bool, error) {
	v, ok := readState(r.tx, namespace, key)
	return v, ok, nil
}

func (r reader) Scan(namespace, prefix string, n int) ([]driver.Entry, error) {
	return scanState(r.tx, namespace, prefix, n), nil
}

// StateValue reads a committed value; the returned slice is a copy.
func (s *Store) StateValue(ctx context.Context, namespace, key string) ([]byte, bool, error) {
	var (
		value []byte
		found bool
	)
	err := s.view(ctx, func(tx *bolt.Tx) error {
		value, found = readState(tx, namespace, key)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return value, found, nil
}

// StatePage returns up to n entries of namespace past after.
func (s *Store) StatePage(ctx context.Context, namespace, after string, n int) ([]driver.Entry, error) {
	var out []driver.Entry
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketState).Bucket([]byte(namespace))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		k, v := c.First()
		if after != "" {
			if k, v = c.Seek([]byte(after)); k != nil && string(k) == after {
				k, v = c.Next()
			}
		}
		for ; k != nil && len(out) < n; k, v = c.Next() {
			out = append(out, driver.Entry{Key: string(k), Value: bytes.Clone(v)})
		}
		return nil
	})
	return out, err
}

// StateScan returns the committed entries under prefix, in key order.
func (s *Store) StateScan(ctx context.Context, namespace, prefix string) ([]driver.Entry, error) {
	var out []driver.Entry
	err := s.view(ctx, func(tx *bolt.Tx) error {
		out = scanState(tx, namespace, prefix, 0)
		return nil
	})
	return out, err
}

// UpdateState applies the writes fn returns, in one update.
func (s *Store) UpdateState(ctx context.Context, fn driver.Guard, evs []driver.Event) error {
	var writes driver.Writes
	return s.write(ctx, func(tx *bolt.Tx) error {
		var err error
		writes, err = fn(reader{tx})
		return err // an error fails this call alone, not its batch
	}, func(tx *bolt.Tx) error {
		if err := s.applyWrites(tx, writes); err != nil {
			return err
		}
		return s.audit(evs)
	})
}

// readState returns a copy of a committed state value.
func readState(tx *bolt.Tx, namespace, key string) ([]byte, bool) {
	b := tx.Bucket(bucketState).Bucket([]byte(namespace))
	if b == nil {
		return nil, false
	}
	v := b.Get([]byte(key))
	if v == nil {
		return nil, false
	}
	return bytes.Clone(v), true
}

// scanState returns copies of the committed entries under prefix, at most
// n (n <= 0: all).
func scanState(tx *bolt.Tx, namespace, prefix string, n int) []driver.Entry {
	b := tx.Bucket(bucketState).Bucket([]byte(namespace))
	if b == nil {
		return nil
	}
	var out []driver.Entry
	c, p := b.Cursor(), []byte(prefix)
	for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p) && (n <= 0 || len(out) < n); k, v = c.Next() {
		out = append(out, driver.Entry{Key: string(k), Value: bytes.Clone(v)})
	}
	return out
}

// applyWrites applies a buffered write-set to the committed state, creating
// namespace buckets on first put.
func (s *Store) applyWrites(tx *bolt.Tx, writes driver.Writes) error {
	for ns, ops := range writes {
		for key, o := range ops {
			if o.Deleted {
				if err := s.del(tx, walState, []byte(ns), []byte(key)); err != nil {
					return fmt.Errorf("txn: delete %q in namespace %q: %w", key, ns, err)
				}
				continue
			}
			if err := s.put(tx, walState, []byte(ns), []byte(key), o.Value); err != nil {
				return fmt.Errorf("txn: put %q in namespace %q: %w", key, ns, err)
			}
			if err := s.failpoint(driver.StepApplyWrite); err != nil {
				return err
			}
		}
	}
	return nil
}
