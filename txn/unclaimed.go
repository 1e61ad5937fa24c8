package txn

import (
	"context"

	"github.com/toolgate/toolgate/txn/driver"
)

// BeginUnclaimed returns an active Tx for rec, as Begin does, but stores
// nothing: no claim is written, and the audit events (of the transitions
// up to EXECUTING) wait in the Tx. Its Commit or Rollback stores the final
// record with those events and its own, and the Tx's writes, in one update,
// under an id that must still be free (ErrExists).
//
// It costs one durable write where Begin and Commit cost two. The price:
// until the Tx ends the store holds no trace of the execution, so a crash
// while it runs leaves none at all, and nothing stops a second execution
// under the same id from running at the same time (the second to end fails
// with ErrExists). The runtime uses it only for calls of read-only tools
// without an idempotency key or an intent, whose effects are all inside
// the Tx: there is then nothing a crash could leave to account for.
// SetProcesses on such a Tx fails: a tool that starts processes needs a
// claim.
//
// rec must be valid (ErrInvalidRecord), the store open and healthy, and, on
// a database many nodes share, this node's lease held (ErrLeaseLost), as
// for a claim.
func (s *Store) BeginUnclaimed(ctx context.Context, rec *Record, events ...AuditEvent) (*Tx, error) {
	buf, _, err := encodeRecordBuf(rec) // the checks a claim's record gets
	putBuf(buf)
	if err != nil {
		return nil, err
	}
	evs, err := prepareAudit(events)
	if err != nil {
		return nil, err
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	if l, ok := s.be.(driver.Leaser); ok {
		// A node that could not claim starts nothing, claimed or not.
		if err := l.LeaseErr(); err != nil {
			return nil, err
		}
	}
	return &Tx{store: s, id: rec.ExecutionID, writes: make(map[string]map[string]op), unclaimed: true, pending: evs}, nil
}

// finish stores the final record data of an unclaimed Tx, with the events
// its BeginUnclaimed kept before evs, and (committing) the Tx's writes
// after checking its reads. t.mu must be held.
func (t *Tx) finish(ctx context.Context, commit bool, data []byte, evs []driver.Event) error {
	all := make([]driver.Event, 0, len(t.pending)+len(evs))
	all = append(append(all, t.pending...), evs...)
	if !commit {
		return t.store.be.Put(ctx, t.id, nil, nil, data, all)
	}
	return t.store.be.Put(ctx, t.id, (*readSet)(t), t.writes, data, all)
}
