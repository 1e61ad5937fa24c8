// Package txn is toolgate's execution store. It persists the record of
// each execution attempt, with its state history, the audit log, and
// provides the state transaction (Tx) through which a tool reads and writes
// its key-value state.
//
// # Backends
//
// The store is written once, above a contract (package txn/driver: one
// small interface per role, records and claims, state, the audit log,
// health, with the promises each keeps; optional ones for what only some
// backends have: leases, a description, a search of the log by time).
// Backends are peer packages that implement it: txn/boltstore, an
// embedded bbolt file, the default, and txn/pgstore, a Postgres database
// shared by many nodes. [Open] picks one by the path it is given (a file
// path; a postgres:// or postgresql:// URL), and is the only code that
// knows which: the rest sees the contract. What does not depend on the
// backend is done here, once: the records' encoding, the audit events'
// preparation, the recovery policy for a claim, a Tx's buffer and
// read-set. The group committer, the audit group's encoding and the audit
// head's checks are the contract's, shared by the backends. One
// conformance suite (package txn/storetest) holds every backend, a user's
// own included, to the contract; [NewStore] puts a Store on a backend
// opened by its own package.
//
// # Records
//
// A [Record] describes one attempt: its tool, its lifecycle state and
// transitions, its output or error, a summary of its write-set and the ids
// of its audit events. Records that never enter a transaction (FAILED,
// DENIED, ABORTED before execution) are stored once with [Store.Put].
// [Store.List] returns records in execution id order, which for the
// runtime's time-ordered ids is creation order.
//
// # Transactions
//
// [Store.Begin] stores the EXECUTING record, the claim on the execution id,
// and returns a [Tx]. The Tx buffers the tool's puts and deletes in memory;
// its reads ([Tx.Get], [Tx.Scan]) see that buffer first, then committed
// state. [Tx.Commit] checks that nothing the Tx read has changed since
// (else [ErrConflict]), then applies the buffer, stores the terminal record
// and appends the audit events, in one bbolt update: all of it is durable or
// none is. [Tx.Rollback] discards the buffer and stores the terminal record.
// After either, every Tx method returns [ErrTxDone].
//
// The bbolt writer is never held while a tool runs: Begin, Commit and
// Rollback are each one short update, and reads are short read
// transactions. A slow or stuck tool therefore never blocks other
// executions, and a tool that outlives its deadline cannot write once its
// Tx has ended.
//
// # Group commit
//
// Writes are queued. A writer that finds no update in progress commits at
// once on its own goroutine; writers that arrive meanwhile are committed
// together by the next one, in one update and one fsync. There is no timer.
// A write whose checks fail fails alone; one whose changes fail is taken out
// and the rest redone. A failed update (an I/O error, a full disk) poisons
// the Store: every later call returns [ErrPoisoned] until it is reopened.
//
// # Recovery
//
// A claim left behind by a crash (Begin without Commit or Rollback) is
// finished by [Store.Recover], which the runtime calls when it opens the
// store. Nothing needs undoing: a Tx's writes reach the file only in its
// commit.
//
// # Audit log
//
// Put, Begin, Commit, Rollback and Recover append the audit events they are
// given in the same update. [AuditEntry] numbers them without gaps and links
// each to the one before with SHA-256; no method updates or deletes one.
//
// # Storage layout (format version 3)
//
//   - meta: the format version under key "format" (8-byte big-endian).
//   - executing: execution id -> Record of an attempt in EXECUTING.
//   - executions: execution id -> Record of a finished attempt.
//   - state: one nested bucket per namespace, key -> value.
//   - audit: 8-byte big-endian sequence of a write's first event -> JSON
//     array of its entries; key 0xff -> last sequence and hash.
//
// Records are stored in a compact binary form, about half the size of their
// JSON (see [EncodeRecord]); they read back as the value their JSON form
// reads back as.
//
// # Errors
//
// Errors wrap the package's sentinels ([ErrNotFound], [ErrExists],
// [ErrLocked], ...) and are tested with [errors.Is]. No bbolt type appears
// in the API, and the bbolt errors a caller can act on (lock timeout, closed
// or read-only database, foreign file) are translated to these sentinels.
//
// # Concurrency
//
// A [Store] is safe for concurrent use, and so is a [Tx]. Only one Store may
// open a file for writing at a time (bbolt takes an exclusive file lock);
// [Open] fails with [ErrLocked] after [Options.Timeout].
package txn
