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
// # Telemetry
//
// With [Options.TracerProvider] set, each invocation is a span named
// "execute_tool {tool}" (kind INTERNAL, a child of the span in the caller's
// context, covering every attempt and the waits between them) with the
// OpenTelemetry GenAI attributes gen_ai.operation.name (execute_tool),
// gen_ai.tool.name, gen_ai.tool.call.id, gen_ai.tool.description and
// gen_ai.tool.type (function), and on failure error.type (the result's
// error code: timeout, invalid_input, capability_denied, tool_error, panic,
// ...) and an Error status. Under it, a span per attempt ("attempt {n}":
// toolgate.execution.id, toolgate.attempt, toolgate.lifecycle.state), and
// under each attempt a span per lifecycle phase that happened: validate,
// authorize, acquire, begin, execute (the tool's own spans are its
// children), validate_output, commit or rollback. A phase span carries the
// state it reached (toolgate.lifecycle.state) and, when it ends in a
// transition, that transition's audit event: toolgate.audit.event_id and
// toolgate.audit.event_hash, the hex SHA-256 of the event as stored. In
// order, the event ids are the record's AuditEvents. The input and output
// (gen_ai.tool.call.arguments, gen_ai.tool.call.result) and error messages
// go on spans only with [Options.RecordArguments].
//
// [Result.TraceID] and the record's TraceID name the trace of the span
// context in effect (the runtime's, or the caller's without a
// TracerProvider), if any.
//
// With [Options.MeterProvider] set, the runtime records (RFC-0001 8.2):
// gen_ai.execute_tool.duration (histogram, seconds, per invocation, with
// the GenAI buckets; gen_ai.tool.name, gen_ai.tool.type, error.type),
// toolgate.executions (attempts, by gen_ai.tool.name,
// toolgate.lifecycle.state and error.type), toolgate.capability.denials,
// toolgate.rollbacks and toolgate.retries (by gen_ai.tool.name and
// error.type).
//
// The runtime uses the OpenTelemetry API only; the application picks the
// SDK and exporters. Without providers (or with the no-op ones) it does
// none of this work. Telemetry never fails or blocks an invocation as far
// as the runtime is concerned; use a batching span processor, which drops
// spans rather than wait.
//
// # Concurrency
//
// A Runtime is safe for concurrent use. The bbolt writer is never held while
// a tool runs: a tool's writes are buffered and applied at commit.
package runtime
