package txn

import (
	"context"
	"fmt"

	"github.com/toolgate/toolgate/txn/driver"
)

// Recover finishes every attempt that a crash left EXECUTING: the claim is
// on disk but neither a commit nor a rollback followed. finish receives each
// such record and turns it into its terminal record (the runtime appends
// ABORTED and ROLLED_BACK with the reason "interrupted"); all are stored in
// one update and their claims dropped. Nothing needs undoing: a
// transaction's writes reach the database only in its commit. Recovered
// attempts are never run again. Recover returns the finished records.
//
// Which claims a crash left is the backend's to say (on bbolt every claim
// in the file; on a shared Postgres database this node's previous run's and
// those of nodes whose lease expired); what is done with each is said here,
// once, for every backend (finishClaims).
//
// finish may return audit events for the transitions it adds; they are
// appended in the same update.
func (s *Store) Recover(ctx context.Context, finish func(*Record) ([]AuditEvent, error)) ([]*Record, error) {
	if s.readOnly { // a reader finishes nothing, on either backend
		return nil, ErrReadOnly
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	final, err := s.be.Recover(ctx, finishClaims(finish))
	if err != nil {
		return nil, err
	}
	return decodeClaims(final)
}

// finishClaims is the recovery policy for the claims a backend found, in
// the transaction that found them: only a claim is finished (a record put
// in the claims by hand, a final one moved there so that recovery would
// rewrite it with genuine events, is refused, never rewritten), by finish,
// which may not change its id; its events are checked and hashed as any
// write's.
func finishClaims(finish func(*Record) ([]AuditEvent, error)) driver.Finish {
	return func(claims []driver.Claim) ([]driver.Claim, []driver.Event, error) {
		final := make([]driver.Claim, 0, len(claims))
		var all []driver.Event
		for _, c := range claims {
			id := c.ID
			rec, err := decodeRecord(id, c.Data)
			if err != nil {
				return nil, nil, err
			}
			if rec.State != "EXECUTING" {
				return nil, nil, fmt.Errorf("%w: the claim of execution %q is in state %s, not EXECUTING: it was changed outside toolgate", ErrCorrupt, id, rec.State)
			}
			events, err := finish(rec)
			if err != nil {
				return nil, nil, fmt.Errorf("txn: recover execution %q: %w", id, err)
			}
			if rec.ExecutionID != id {
				return nil, nil, fmt.Errorf("%w: recovery changed execution id %q to %q", ErrInvalidRecord, id, rec.ExecutionID)
			}
			out, err := encodeRecord(rec)
			if err != nil {
				return nil, nil, err
			}
			evs, err := prepareAudit(events)
			if err != nil {
				return nil, nil, err
			}
			final = append(final, driver.Claim{ID: id, Data: out})
			all = append(all, evs...)
		}
		return final, all, nil
	}
}

// decodeClaims decodes the final records a recovery stored.
func decodeClaims(cs []driver.Claim) ([]*Record, error) {
	out := make([]*Record, 0, len(cs))
	for _, c := range cs {
		rec, err := decodeRecord(c.ID, c.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}
