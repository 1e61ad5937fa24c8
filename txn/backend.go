package txn

import "context"

// backend is the store contract: the operations the runtime needs from the
// database behind a [Store], with the promises each must keep. The runtime
// only ever sees *Store; Open picks the backend from the path it is given
// (a file path: bbolt, the embedded default; a postgres:// URL: Postgres).
//
// The bbolt implementation is the Store's own code (s.be == nil: each
// exported method runs its bbolt body, so the embedded path pays one nil
// check); other backends implement this interface and each exported method
// hands over to them. The shared conformance suite (conformance_test.go)
// runs against every backend.
//
// Promises, common to every backend:
//
//   - Atomicity. Each write (put, begin, commit, rollback, updateState,
//     recover) is one database transaction: its record, its state changes
//     and its audit events are all durable or none is. A write whose check
//     fails (ErrExists, ErrNotFound, ErrConflict, a guard's error) writes
//     nothing and fails alone, even when grouped with others.
//   - Claims. begin stores the EXECUTING record under its id only if no
//     record (final or claim) has that id; commit and rollback require the
//     claim, replace it by the final record and drop it, so an execution
//     ends at most once.
//   - Optimistic concurrency. commit fails with ErrConflict if a key the Tx
//     read, or a key under a prefix it scanned, changed since it read it;
//     the check and the writes are one serialized step, so two
//     read-modify-write transactions on one key never both commit.
//   - Compare-and-set. updateState and begin's guard run against the state
//     as it is in the very transaction that applies their writes; they may
//     run more than once and must act only through the view.
//   - Audit. Every event is appended in its write's transaction to one
//     totally ordered chain, numbered from 1 without gaps, each linked to
//     the one before by SHA-256 (see [AuditEntry]); auditRaw shows it as
//     groups under 8-byte big-endian seq keys (a JSON array of entries
//     each), then the head under [AuditHeadKey], so audit.Verifier checks
//     every backend the same way.
//   - Reads (get, walk, the state reads, auditRaw) see committed data
//     only, each one consistent snapshot.
//   - Recovery. recover finishes, in one transaction, every claim left by
//     a writer that is gone: on bbolt (one writer per file) every claim
//     found, its previous run's; on Postgres the node's own claims (its
//     previous run's, under the same name) and those of nodes whose lease
//     expired, never a live node's (pglease.go).
//   - Failure. A write whose outcome is unknown on bbolt (an fsync error)
//     poisons the Store (ErrPoisoned) until it is reopened. On Postgres a
//     write fails alone (ErrUnavailable: nothing written), a commit whose
//     answer was lost is resolved by reading the node's group number back,
//     and the store goes on once Postgres answers.
//   - Concurrency. Every method is safe for concurrent use.
type backend interface {
	// put stores a final record; the id must be free.
	put(ctx context.Context, id string, data []byte, evs []auditEvent) error
	// getRecord returns the stored bytes of a record, final or claim, or
	// nil if there is none.
	getRecord(ctx context.Context, id string) ([]byte, error)
	// walk calls fn with the records whose ids sort after after, in id
	// order (a final record and a claim under one id: the final one),
	// until it returns false.
	walk(ctx context.Context, after string, fn func(id string, data []byte) bool) error
	// walkBack is walk in reverse: the records whose ids sort before
	// before (all of them when it is empty), last first.
	walkBack(ctx context.Context, before string, fn func(id string, data []byte) bool) error
	// stateValue, statePage and stateScan read committed state.
	stateValue(ctx context.Context, namespace, key string) ([]byte, bool, error)
	statePage(ctx context.Context, namespace, after string, n int) ([]Entry, error)
	stateScan(ctx context.Context, namespace, prefix string) ([]Entry, error)
	// begin claims id with the EXECUTING record data, after guard.
	begin(ctx context.Context, id string, data []byte, guard func(*StateView) error, evs []auditEvent) error
	// commit checks t's read-set and the claim, applies t's writes and
	// stores the final record; t.mu is held.
	commit(ctx context.Context, t *Tx, data []byte, evs []auditEvent) error
	// rollback stores the final record of a claimed execution.
	rollback(ctx context.Context, id string, data []byte, evs []auditEvent) error
	updateState(ctx context.Context, fn func(*StateView) error, evs []auditEvent) error
	recover(ctx context.Context, finish func(*Record) ([]AuditEvent, error)) ([]*Record, error)
	auditRaw(ctx context.Context, fn func(key, value []byte) error) error
	auditHead(ctx context.Context) (uint64, error)
	// auditGroups calls fn with the stored groups (first seq, JSON array)
	// from the one holding seq from on, in order, whose bytes contain
	// needle (nil: all), until fn returns false.
	auditGroups(ctx context.Context, from uint64, needle []byte, fn func(seq uint64, group []byte) (bool, error)) error
	close() error
}

// stateReader is what a [StateView] reads committed state through when it
// is not a bbolt update's.
type stateReader interface {
	get(namespace, key string) ([]byte, bool, error)
	scan(namespace, prefix string, n int) ([]Entry, error)
}
