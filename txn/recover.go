package txn

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Recover finishes every attempt that a crash left EXECUTING: the claim is
// on disk but neither a commit nor a rollback followed. finish receives each
// such record and turns it into its terminal record (the runtime appends
// ABORTED and ROLLED_BACK with the reason "interrupted"); all are stored in
// one update and their claims dropped. Nothing needs undoing: a
// transaction's writes reach the file only in its commit. Recovered attempts
// are never run again. Recover returns the finished records.
//
// finish may return audit events for the transitions it adds; they are
// appended in the same update.
func (s *Store) Recover(ctx context.Context, finish func(*Record) ([]AuditEvent, error)) ([]*Record, error) {
	if s.readOnly { // a reader finishes nothing, on either backend
		return nil, ErrReadOnly
	}
	if s.be != nil {
		return s.be.recover(ctx, finish)
	}
	var done []*Record
	err := s.write(ctx, func(*bolt.Tx) error { return nil }, func(tx *bolt.Tx) error {
		done = done[:0]
		claims := tx.Bucket(bucketExecuting)
		type claim struct{ id, data []byte }
		var found []claim
		if err := claims.ForEach(func(k, v []byte) error {
			found = append(found, claim{bytes.Clone(k), bytes.Clone(v)})
			return nil
		}); err != nil {
			return err
		}
		for _, c := range found {
			id := c.id
			rec, err := decodeRecord(string(id), c.data)
			if err != nil {
				return err
			}
			// Only a claim is finished: a record put in the claims by hand
			// (a final one moved there, so that recovery would rewrite it
			// with genuine events) is refused, never rewritten.
			if rec.State != "EXECUTING" {
				return fmt.Errorf("%w: the claim of execution %q is in state %s, not EXECUTING: it was changed outside toolgate", ErrCorrupt, id, rec.State)
			}
			if tx.Bucket(bucketExecutions).Get(id) != nil {
				return fmt.Errorf("%w: execution %q is both claimed and final: it was changed outside toolgate", ErrCorrupt, id)
			}
			events, err := finish(rec)
			if err != nil {
				return fmt.Errorf("txn: recover execution %q: %w", id, err)
			}
			if rec.ExecutionID != string(id) {
				return fmt.Errorf("%w: recovery changed execution id %q to %q", ErrInvalidRecord, id, rec.ExecutionID)
			}
			out, err := encodeRecord(rec)
			if err != nil {
				return err
			}
			if err := finishRecord(tx, id, out); err != nil {
				return err
			}
			evs, err := prepareAudit(events)
			if err != nil {
				return err
			}
			s.pending = append(s.pending, evs...)
			done = append(done, rec)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}
