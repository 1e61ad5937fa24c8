package runtime

import (
	"context"

	"github.com/toolgate/toolgate/txn"
)

// Reader reads what a store holds, as a runtime shows it: executions,
// intents, the audit log, and their verification against the log. It never
// writes, so its store may be open read-only: an inspector that must not
// take the writer's lock (toolgate show, intent show, audit verify) reads
// through a Reader without a Runtime. A Runtime embeds the Reader of its
// store. A Reader is safe for concurrent use; it does not close its store.
type Reader struct {
	store *txn.Store
	// approvers are the approval keys of the policy whose signatures
	// VerifyRecords checks: a Runtime's, or none.
	approvers approverKeys
}

// NewReader returns a Reader of store, an open store (not nil), which stays
// the caller's to close.
func NewReader(store *txn.Store) *Reader { return &Reader{store: store} }

// Execution returns the stored record of one attempt, or an error wrapping
// txn.ErrNotFound.
func (r *Reader) Execution(ctx context.Context, executionID string) (*txn.Record, error) {
	return r.store.Get(ctx, executionID)
}

// Executions returns the stored records matching f, oldest first.
func (r *Reader) Executions(ctx context.Context, f txn.Filter) ([]*txn.Record, error) {
	return r.store.List(ctx, f)
}

// AuditLog returns up to limit entries (limit <= 0: all) of the audit log
// from sequence number from on: one event per lifecycle transition,
// chained, each appended in the same update as the transition it records.
func (r *Reader) AuditLog(ctx context.Context, from uint64, limit int) ([]txn.AuditEntry, error) {
	return r.store.AuditLog(ctx, from, limit)
}
