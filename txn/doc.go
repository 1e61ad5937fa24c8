// Package txn is toolgate's bbolt-backed execution store. It persists the
// record of each execution attempt, with its state history, and provides
// the state transaction (Tx) through which a tool reads and writes its
// key-value state.
//
// # Records
//
// A [Record] describes one attempt: its tool, its lifecycle state and
// transitions, its output or error, and a summary of its write-set. Records
// that never enter a transaction (FAILED, DENIED, ABORTED before execution)
// are stored once with [Store.Put]. Records are never overwritten except by
// the Tx that claimed them. [Store.List] returns them in creation order.
//
// # Transactions
//
// [Store.Begin] stores the EXECUTING record, which claims the execution id,
// and returns a [Tx]. The Tx buffers the tool's puts and deletes in memory;
// its reads see that buffer first, then committed state. [Tx.Commit] applies
// the buffer and the terminal record in one bbolt update, so either both are
// durable or neither is. [Tx.Rollback] discards the buffer and stores the
// terminal record. After either, every Tx method returns [ErrTxDone].
//
// The bbolt writer is never held while a tool runs: Begin, Commit and
// Rollback are each one short update, and reads are short read
// transactions. A slow or stuck tool therefore never blocks other
// executions, and a tool that outlives its deadline cannot write once its
// Tx has ended.
//
// # Storage layout
//
// The database holds four top-level buckets:
//
//   - meta: the format version under key "format" (8-byte big-endian).
//   - executions: execution id -> JSON-encoded Record.
//   - exec_index: 8-byte big-endian sequence -> execution id, in creation order.
//   - state: one nested bucket per namespace, key -> value.
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
