// Package runtime executes tools under RFC-0001: every invocation is
// validated, authorized, executed inside a durable state transaction on
// bbolt, and recorded with every lifecycle transition.
//
// The package name shadows the standard library's runtime; import it under
// another name:
//
//	import tgruntime "github.com/toolgate/toolgate/runtime"
//
// # Enforcement order
//
// [Runtime.Execute] applies the enforcement rules of RFC-0001 section 5 in
// order, one lifecycle per attempt:
//
//  1. input validation against the input schema (else FAILED);
//  2. capability authorization, deny by default (else DENIED);
//  3. resource availability: an execution slot (else ABORTED, ROLLED_BACK);
//  4. the state transaction begins: EXECUTING is persisted before the tool
//     runs;
//  5. to 8. the tool runs under its max execution time, through handles
//     that expose only what was granted, writing state into the
//     transaction's buffer (a timeout or limit: ABORTED, ROLLED_BACK; an
//     error, a panic or a refused handle: ROLLED_BACK);
//  9. output validation against the output schema (else ROLLED_BACK);
//  10. commit, in one bbolt update with the final record (else ROLLED_BACK);
//  11. COMPLETED, with the record carrying every transition.
//
// # Records, audit events and recovery
//
// Every attempt is recorded with each transition and its time; every
// transition is also an audit event (RFC-0001 8.1), written in the same
// update as the change it records ([Runtime.Execution], [Runtime.Executions],
// [Runtime.AuditLog]). [Open] finishes any attempt a crash left EXECUTING:
// ABORTED, then ROLLED_BACK with the reason "interrupted"; it is never run
// again.
//
// # Errors and retries
//
// Failures are classified as in RFC-0001 7.1 (see [ErrValidation] and its
// siblings). Only idempotent tools are retried, only after a transient
// [ResourceError] or a [TimeoutError], at most [RetryPolicy.MaxRetries]
// times, with exponential backoff and jitter. Each attempt has its own
// execution id and lifecycle, and the [Result] lists them all.
//
// # Abandoned tools
//
// Go cannot stop a goroutine. A tool that ignores its context past the
// deadline is abandoned: Execute returns at the deadline with a
// [TimeoutError], the attempt is recorded ABORTED then ROLLED_BACK, its
// transaction refuses further reads and writes, and its Env can open nothing
// more (files it already opened stay open). The goroutine runs on until the
// tool returns, and keeps its execution slot until then. Tools that must be
// stoppable belong in a separate process.
//
// # Concurrency
//
// A Runtime is safe for concurrent use. The bbolt writer is never held while
// a tool runs: a tool's writes are buffered and applied at commit.
package runtime
