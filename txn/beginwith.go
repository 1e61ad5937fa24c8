package txn

import "context"

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
	defer putBuf(buf) // the write returns once the update has ended
	evs, err := prepareAudit(events)
	if err != nil {
		return nil, err
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	if err := s.be.Begin(ctx, rec.ExecutionID, data, toGuard(guard), evs); err != nil {
		return nil, err
	}
	return &Tx{store: s, id: rec.ExecutionID, writes: make(map[string]map[string]op)}, nil
}
