// Package driver is the contract between toolgate's store (package txn)
// and the databases behind it, as database/sql/driver is for database/sql:
// the interfaces a backend implements, one per role, with the promises each
// must keep, and the few pieces of work every backend does the same way
// (the group committer, the audit group's encoding and the checks of its
// head), written once here so that no backend writes its own.
//
// A backend imports this package and nothing of toolgate above it; package
// txn imports the backends only to open them (txn.Open), and sees them
// through [Backend] alone. What only some backends have is an optional
// interface ([Leaser], [Describer], [AuditSearcher]), found by a type
// assertion on the interface, never on a backend's type. The conformance
// suite (package txn/storetest) holds every backend to these promises.
//
// Records are opaque bytes here: their encoding, the audit events'
// preparation (checked, hashed) and the policy that finishes a claim left
// by a crash belong to txn, above the contract.
//
// # Promises, common to every backend
//
//   - Atomicity. Each write (Put, Begin, Commit, Rollback, SetClaim,
//     UpdateState, Recover) is one database transaction: its record, its
//     state changes and its audit events are all durable or none is. A
//     write whose check fails (ErrExists, ErrNotFound, ErrConflict, a
//     guard's error) writes nothing and fails alone, even when grouped with
//     others.
//   - Claims. Begin stores the EXECUTING record under its id only if no
//     record (final or claim) has that id; Commit and Rollback require the
//     claim, replace it by the final record and drop it, so an execution
//     ends at most once. Put stores a final record only under a free id,
//     so an execution that was never claimed also ends at most once.
//   - Optimistic concurrency. Commit runs its check (the Tx's read-set and
//     scans, against the state as the write's transaction sees it) and its
//     writes as one serialized step, so two read-modify-write transactions
//     on one key never both commit.
//   - Compare-and-set. UpdateState's function and Begin's guard run against
//     the state as it is in the very transaction that applies their
//     writes; they may run more than once and act only through the writes
//     they return.
//   - Audit. Every event is appended in its write's transaction to one
//     totally ordered chain, numbered from 1 without gaps, each linked to
//     the one before by SHA-256 ([AppendAuditGroup] encodes a group so);
//     AuditRaw shows it as groups under 8-byte big-endian seq keys (a JSON
//     array of entries each), then the head under the key "\xff" (8-byte
//     seq, 32-byte hash), so one verifier checks every backend the same
//     way. Before it appends, a backend holds the head against its last
//     group with [CheckAuditTail].
//   - Reads (Get, Walk, the state reads, the audit reads) see committed
//     data only, each one consistent snapshot.
//   - Recovery. Recover finishes, in one transaction, every claim left by a
//     writer that is gone, with the [Finish] function it is given (the
//     policy is the caller's): on a backend with one writer at a time, every
//     claim found; on a shared one, the claims of this node's previous run
//     and those of nodes whose lease expired, never a live node's.
//   - Failure. A write whose outcome is unknown on a single file (an fsync
//     error) poisons the backend (Err returns the ErrPoisoned error) until
//     it is reopened. On a shared database a write fails alone
//     (ErrUnavailable: nothing written), and the backend goes on once the
//     database answers.
//   - Concurrency. Every method is safe for concurrent use.
package driver

import "context"

// Entry is one key and value of state.
type Entry struct {
	Key   string
	Value []byte
}

// Op is a buffered write of one key: a put of Value, or a delete.
type Op struct {
	Value   []byte
	Deleted bool
}

// Writes is a buffered write-set: namespace -> key -> op.
type Writes map[string]map[string]Op

// Event is an audit event ready to append: its bytes (one valid JSON
// value) and their SHA-256, computed before the write is queued, so the
// serialized commit only links them.
type Event struct {
	Data []byte
	Sum  [32]byte
}

// Claim is a stored record of an execution, by id: a claim found by
// Recover, or the final record that replaces it.
type Claim struct {
	ID   string
	Data []byte
}

// StateReader reads committed state inside a write's transaction: what a
// [Guard] and a commit's check see. Scan returns at most n entries (n <= 0:
// all), in key order.
type StateReader interface {
	Get(namespace, key string) ([]byte, bool, error)
	Scan(namespace, prefix string, n int) ([]Entry, error)
}

// ReadSet is what a transaction read (keys, and digests of the prefixes it
// scanned): Check fails with ErrConflict when any of it is not what the
// state of a commit's transaction shows.
type ReadSet interface {
	Check(StateReader) error
}

// Guard reads the state of a write's transaction and returns the writes to
// apply with it; an error fails the write alone. It may run more than once
// for one write.
type Guard func(StateReader) (Writes, error)

// Finish is the policy that finishes the claims Recover found, in the
// transaction that found them: it returns each one's final record and the
// audit events to append. An error writes nothing. It may run more than
// once for one Recover.
type Finish func(claims []Claim) (final []Claim, events []Event, err error)

// Records stores execution records and their claims.
type Records interface {
	// Put stores the final record of an execution that holds no claim;
	// the id must be free (else ErrExists). reads (nil: none) are checked
	// and writes (nil: none) applied as Commit does, in the same write: a
	// record that never entered a transaction (FAILED, DENIED) is stored
	// so, and so ends a transaction begun without a claim.
	Put(ctx context.Context, id string, reads ReadSet, writes Writes, data []byte, events []Event) error
	// Get returns the stored bytes of a record, final or claim, or nil if
	// there is none.
	Get(ctx context.Context, id string) ([]byte, error)
	// Walk calls fn with the records whose ids sort after after, in id
	// order (a final record and a claim under one id: the final one),
	// until it returns false. WalkBack walks in reverse: the records whose
	// ids sort before before (all of them when it is empty), last first.
	Walk(ctx context.Context, after string, fn func(id string, data []byte) bool) error
	WalkBack(ctx context.Context, before string, fn func(id string, data []byte) bool) error
	// Begin claims id with the EXECUTING record data, after guard (nil:
	// none), whose writes it applies with the claim.
	Begin(ctx context.Context, id string, data []byte, guard Guard, events []Event) error
	// Commit checks reads against the write's transaction (ErrConflict
	// when what the Tx read changed), requires the claim of id
	// (ErrNotFound), applies writes and stores the final record data.
	Commit(ctx context.Context, id string, reads ReadSet, writes Writes, data []byte, events []Event) error
	// Rollback stores the final record of a claimed execution.
	Rollback(ctx context.Context, id string, data []byte, events []Event) error
	// SetClaim rewrites the claim of id with set, which may refuse.
	SetClaim(ctx context.Context, id string, set func([]byte) ([]byte, error)) error
	// Recover finishes the claims left by writers that are gone, with
	// finish, and returns their final records.
	Recover(ctx context.Context, finish Finish) ([]Claim, error)
}

// State stores the tool-visible state and the runtime's own.
type State interface {
	StateValue(ctx context.Context, namespace, key string) ([]byte, bool, error)
	// StatePage returns up to n entries whose keys sort after after; n
	// is at least 1 (the Store answers a page of fewer itself).
	StatePage(ctx context.Context, namespace, after string, n int) ([]Entry, error)
	// StateScan returns the entries under prefix, in key order.
	StateScan(ctx context.Context, namespace, prefix string) ([]Entry, error)
	// UpdateState applies, in one write, the writes fn returns.
	UpdateState(ctx context.Context, fn Guard, events []Event) error
}

// AuditLog reads the audit log that the writes append to.
type AuditLog interface {
	// AuditRaw calls fn with every key and value as stored, in key order
	// (see the Audit promise), in one snapshot. An error from fn stops
	// the walk and is returned as is.
	AuditRaw(ctx context.Context, fn func(key, value []byte) error) error
	// AuditHead returns the seq of the last entry, as the head records it.
	AuditHead(ctx context.Context) (uint64, error)
	// AuditGroups calls fn with the stored groups (first seq, JSON array),
	// from the one holding seq from on, in order, until fn returns false.
	// From past the head, which no group holds, it delivers the last group
	// or nothing, never an earlier one (storetest's AuditGroups).
	AuditGroups(ctx context.Context, from uint64, fn func(seq uint64, group []byte) (bool, error)) error
}

// Health is a backend's state as a whole.
type Health interface {
	// Err returns the error that poisoned the backend, or nil.
	Err() error
	// Close waits for the writes in progress and closes the backend. It is
	// called once.
	Close() error
}

// Backend is the contract: every role.
type Backend interface {
	Records
	State
	AuditLog
	Health
}

// Leaser is the optional interface of a backend that many nodes share,
// each holding a lease.
type Leaser interface {
	// Node and NodeRun name this node ("" when it holds no lease: read
	// only); NodeRun is "name/run".
	Node() string
	NodeRun() string
	// LeaseErr says why this node may start no execution now (its lease
	// lapsed: ErrLeaseLost, or it holds none), nil while it may: what a
	// claim checks, for an execution that stores none until it ends.
	LeaseErr() error
	// NodeLive reports whether run (a NodeRun, or a bare node name) is
	// another run than this one whose lease holds.
	NodeLive(ctx context.Context, run string) (bool, error)
	// OnSweep registers fn, run after each background sweep of what
	// expired nodes left.
	OnSweep(fn func(context.Context))
}

// Describer is the optional interface of a backend that describes itself
// for toolgate doctor ("bbolt file, format 3").
type Describer interface {
	Describe(ctx context.Context) (string, error)
}

// AuditSearcher is the optional interface of a backend that finds audit
// groups by the time of their events faster than a walk of the log.
type AuditSearcher interface {
	// AuditSearch calls fn with the groups holding needle that can hold
	// an event made between from and to (Unix ms, inclusive; to < from:
	// the instant from), in log order, until fn returns false. A group
	// with an event whose timestamp is not an integer (Timestamps) can
	// hold an event of any time: a search that reaches it returns it if
	// it holds needle, and goes on past it; a search may end, before
	// reaching it, at a group made after to (storetest.CheckAuditSearch).
	AuditSearch(ctx context.Context, needle []byte, from, to int64, fn func(seq uint64, group []byte) (bool, error)) error
	// GetWithAudit reads the record of id (ErrNotFound without one) and,
	// in the same snapshot, searches as AuditSearch with what window
	// gives for it.
	GetWithAudit(ctx context.Context, id string, window func(data []byte) (needle []byte, from, to int64, err error), fn func(seq uint64, group []byte) (bool, error)) ([]byte, error)
}

// SyncCounter is the optional interface of a backend that counts the
// times it made its writes durable (an fsync of a file it writes), for
// toolgate bench: counted where the syncs are made, not inferred.
type SyncCounter interface {
	Syncs() uint64
}
