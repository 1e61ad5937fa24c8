package txn

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// BeginWith is Begin with a guard run in the same update as the claim:
// guard reads the committed state and may change it through the view, and
// its changes are applied with the claim, all or nothing. An error from
// guard claims nothing and is returned. This is how an approved intent is
// marked executed in the very update that claims its execution, so two
// executions can never both claim it. Like UpdateState's function, guard
// may run more than once and must have no effect but through the view.
func (s *Store) BeginWith(ctx context.Context, rec *Record, guard func(*StateView) error, events ...AuditEvent) (*Tx, error) {
	buf, data, err := encodeRecordBuf(rec)
	if err != nil {
		return nil, err
	}
	defer putBuf(buf) // write returns once the update has ended
	evs, err := prepareAudit(events)
	if err != nil {
		return nil, err
	}
	if s.be != nil {
		if err := s.be.begin(ctx, rec.ExecutionID, data, guard, evs); err != nil {
			return nil, err
		}
		return &Tx{store: s, id: rec.ExecutionID, writes: make(map[string]map[string]op)}, nil
	}
	id := []byte(rec.ExecutionID)
	var v *StateView
	err = s.write(ctx, func(tx *bolt.Tx) error {
		if err := recordAbsent(tx, id); err != nil {
			return err
		}
		if guard == nil {
			v = nil
			return nil
		}
		v = &StateView{tx: tx, writes: make(map[string]map[string]op)}
		return guard(v) // an error fails this claim alone, not its batch
	}, func(tx *bolt.Tx) error {
		if err := s.failpoint(StepClaim); err != nil {
			return err
		}
		if err := tx.Bucket(bucketExecuting).Put(id, data); err != nil {
			return fmt.Errorf("txn: claim execution %q: %w", id, err)
		}
		if v != nil {
			if err := applyWrites(tx, v.writes, s.failpoint); err != nil {
				return err
			}
		}
		return s.audit(evs)
	})
	if err != nil {
		return nil, err
	}
	return &Tx{store: s, id: rec.ExecutionID, writes: make(map[string]map[string]op)}, nil
}
