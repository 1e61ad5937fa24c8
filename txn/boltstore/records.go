package boltstore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/toolgate/toolgate/txn/driver"
	bolt "go.etcd.io/bbolt"
)

// Put stores a final record under a free id, with the writes of a Tx
// begun without a claim after checking its reads, in one update.
func (s *Store) Put(ctx context.Context, id string, reads driver.ReadSet, writes driver.Writes, data []byte, evs []driver.Event) error {
	key := []byte(id)
	return s.write(ctx, func(tx *bolt.Tx) error {
		if err := recordAbsent(tx, key); err != nil || reads == nil {
			return err
		}
		if err := s.failpoint(driver.StepCheckReads); err != nil {
			return err
		}
		return reads.Check(reader{tx})
	}, func(tx *bolt.Tx) error {
		if err := s.applyWrites(tx, writes); err != nil {
			return err
		}
		if err := s.insertRecord(tx, key, data); err != nil {
			return err
		}
		return s.audit(evs)
	})
}

// Get returns the stored record of id, final or claim, or nil.
func (s *Store) Get(ctx context.Context, id string) ([]byte, error) {
	var out []byte
	err := s.view(ctx, func(tx *bolt.Tx) error {
		if data := getRecord(tx, []byte(id)); data != nil {
			out = bytes.Clone(data)
		}
		return nil
	})
	return out, err
}

// Walk calls fn with the records past after, in id order, in one read
// transaction; data is valid only during the call.
func (s *Store) Walk(ctx context.Context, after string, fn func(id string, data []byte) bool) error {
	return s.view(ctx, func(tx *bolt.Tx) error { return boltWalk(ctx, tx, after, false, fn) })
}

// WalkBack is Walk in reverse, from before (all when empty).
func (s *Store) WalkBack(ctx context.Context, before string, fn func(id string, data []byte) bool) error {
	return s.view(ctx, func(tx *bolt.Tx) error { return boltWalk(ctx, tx, before, true, fn) })
}

// boltWalk calls fn with the records (final ones and claims, merged) past
// cursor, in id order or in reverse, until it returns false.
func boltWalk(ctx context.Context, tx *bolt.Tx, cursor string, reverse bool, fn func(id string, data []byte) bool) error {
	start := func(c *bolt.Cursor) ([]byte, []byte) {
		if c == nil {
			return nil, nil
		}
		switch {
		case cursor == "" && reverse:
			return c.Last()
		case cursor == "":
			return c.First()
		}
		k, v := c.Seek([]byte(cursor))
		switch {
		case reverse && k == nil:
			return c.Last()
		case reverse: // k >= cursor
			return c.Prev()
		case k != nil && string(k) == cursor:
			return c.Next()
		}
		return k, v
	}
	step := func(c *bolt.Cursor) ([]byte, []byte) {
		if reverse {
			return c.Prev()
		}
		return c.Next()
	}
	// before reports whether a comes first in the walk's order.
	before := func(a, b []byte) bool {
		if reverse {
			return bytes.Compare(a, b) > 0
		}
		return bytes.Compare(a, b) < 0
	}
	done := tx.Bucket(bucketExecutions).Cursor()
	var claims *bolt.Cursor
	if b := tx.Bucket(bucketExecuting); b != nil {
		claims = b.Cursor()
	}
	dk, dv := start(done)
	ck, cv := start(claims)
	for dk != nil || ck != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		var id, data []byte
		switch {
		case ck == nil || dk != nil && before(dk, ck):
			id, data = dk, dv
			dk, dv = step(done)
		case dk != nil && bytes.Equal(dk, ck): // never both; the final one
			id, data = dk, dv
			dk, dv = step(done)
			ck, cv = step(claims)
		default:
			id, data = ck, cv
			ck, cv = step(claims)
		}
		if !fn(string(id), data) {
			return nil
		}
	}
	return nil
}

// Begin claims id with data in one short update, after guard.
func (s *Store) Begin(ctx context.Context, id string, data []byte, guard driver.Guard, evs []driver.Event) error {
	key := []byte(id)
	var writes driver.Writes
	return s.write(ctx, func(tx *bolt.Tx) error {
		if err := recordAbsent(tx, key); err != nil {
			return err
		}
		writes = nil
		if guard == nil {
			return nil
		}
		var err error
		writes, err = guard(reader{tx})
		return err // an error fails this claim alone, not its batch
	}, func(tx *bolt.Tx) error {
		if err := s.failpoint(driver.StepClaim); err != nil {
			return err
		}
		if err := s.put(tx, walExecuting, nil, key, data); err != nil {
			return fmt.Errorf("txn: claim execution %q: %w", key, err)
		}
		if err := s.applyWrites(tx, writes); err != nil {
			return err
		}
		return s.audit(evs)
	})
}

// Commit checks the claim and the Tx's reads, then applies its writes and
// stores the final record, in one update.
func (s *Store) Commit(ctx context.Context, id string, reads driver.ReadSet, writes driver.Writes, data []byte, evs []driver.Event) error {
	key := []byte(id)
	return s.write(ctx, func(tx *bolt.Tx) error {
		if err := s.failpoint(driver.StepCheckReads); err != nil {
			return err
		}
		if err := claimPresent(tx, key); err != nil {
			return err
		}
		return reads.Check(reader{tx})
	}, func(tx *bolt.Tx) error {
		if err := s.applyWrites(tx, writes); err != nil {
			return err
		}
		if err := s.failpoint(driver.StepRecord); err != nil {
			return err
		}
		if err := s.finishRecord(tx, key, data); err != nil {
			return err
		}
		return s.audit(evs)
	})
}

// Rollback stores the final record of a claimed execution.
func (s *Store) Rollback(ctx context.Context, id string, data []byte, evs []driver.Event) error {
	key := []byte(id)
	return s.write(ctx, func(tx *bolt.Tx) error { return claimPresent(tx, key) },
		func(tx *bolt.Tx) error {
			if err := s.finishRecord(tx, key, data); err != nil {
				return err
			}
			return s.audit(evs)
		})
}

// SetClaim rewrites the claim of id with set.
func (s *Store) SetClaim(ctx context.Context, id string, set func([]byte) ([]byte, error)) error {
	key := []byte(id)
	return s.write(ctx, func(tx *bolt.Tx) error { return claimPresent(tx, key) }, func(tx *bolt.Tx) error {
		data, err := set(tx.Bucket(bucketExecuting).Get(key))
		if err != nil {
			return err
		}
		return s.put(tx, walExecuting, nil, key, data)
	})
}

// Recover finishes, with finish, every claim in the file, in one update:
// one writer owns the file, so every claim found is its previous run's.
func (s *Store) Recover(ctx context.Context, finish driver.Finish) ([]driver.Claim, error) {
	var done []driver.Claim
	err := s.write(ctx, func(*bolt.Tx) error { return nil }, func(tx *bolt.Tx) error {
		done = nil
		var found []driver.Claim
		if err := tx.Bucket(bucketExecuting).ForEach(func(k, v []byte) error {
			found = append(found, driver.Claim{ID: string(k), Data: bytes.Clone(v)})
			return nil
		}); err != nil {
			return err
		}
		for _, c := range found {
			if tx.Bucket(bucketExecutions).Get([]byte(c.ID)) != nil {
				return fmt.Errorf("%w: execution %q is both claimed and final: it was changed outside toolgate", ErrCorrupt, c.ID)
			}
		}
		if len(found) == 0 {
			return nil
		}
		final, evs, err := finish(found)
		if err != nil {
			return err
		}
		for _, c := range final {
			if err := s.finishRecord(tx, []byte(c.ID), c.Data); err != nil {
				return err
			}
		}
		s.pending = append(s.pending, evs...)
		done = final
		return nil
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}

// recordAbsent fails with ErrExists if the execution has a record, final
// or claimed.
func recordAbsent(tx *bolt.Tx, id []byte) error {
	if getRecord(tx, id) != nil {
		return fmt.Errorf("%w: execution %q", ErrExists, id)
	}
	return nil
}

// claimPresent fails with ErrNotFound unless the execution is claimed
// (begun and not yet committed or rolled back).
func claimPresent(tx *bolt.Tx, id []byte) error {
	if tx.Bucket(bucketExecuting).Get(id) == nil {
		return fmt.Errorf("%w: execution %q is not executing", ErrNotFound, id)
	}
	return nil
}

// getRecord returns the stored record of id: its final record, or its
// claim while it executes. A claim lives in the small executing bucket
// until the commit or rollback moves the final record into the large,
// append-mostly executions bucket: each record enters that tree once.
func getRecord(tx *bolt.Tx, id []byte) []byte {
	if data := tx.Bucket(bucketExecutions).Get(id); data != nil {
		return data
	}
	if claims := tx.Bucket(bucketExecuting); claims != nil { // absent from files of read-only opens made before it existed
		return claims.Get(id)
	}
	return nil
}

// insertRecord stores a final record; recordAbsent or claimPresent has
// checked the id. Records are keyed by execution id alone: the runtime's ids
// are time-ordered, so records are inserted near the end of the tree, and a
// batch of them dirties a few pages rather than one per record.
func (s *Store) insertRecord(tx *bolt.Tx, key []byte, data []byte) error {
	if err := s.put(tx, walExecutions, nil, key, data); err != nil {
		return fmt.Errorf("txn: store execution %q: %w", key, err)
	}
	return nil
}

// finishRecord stores the terminal record of an execution begun by Begin and
// drops its claim. claimPresent has checked that it is claimed.
func (s *Store) finishRecord(tx *bolt.Tx, key []byte, data []byte) error {
	if err := s.insertRecord(tx, key, data); err != nil {
		return err
	}
	return s.del(tx, walExecuting, nil, key)
}
