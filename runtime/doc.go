// Package runtime executes tools under RFC-0001: every invocation is
// validated, authorized, executed inside a durable state transaction on
// bbolt, and recorded with every lifecycle transition.
//
// The package name shadows the standard library's runtime; import it under
// another name:
//
//	import tgruntime "github.com/toolgate/toolgate/runtime"
//
// # The single execution boundary
//
// [Runtime.Execute] is the only place a tool runs (the single execution
// boundary document (003)): nothing else in the module calls a tool's
// Execute method or its body, so every run is validated, authorized,
// transactional and recorded. The HTTP server, the CLI and the benchmark
// engine all go through it. internal/deps.TestExecutionBoundary holds the
// rule over the module's code; the tools package documentation says where
// its own code and tests are the exception.
//
// # Enforcement order
//
// [Runtime.Execute] applies the enforcement rules of RFC-0001 section 5 in
// order, one lifecycle per attempt:
//
//  1. input validation against the input schema (else FAILED);
//  2. capability authorization, deny by default (else DENIED);
//  3. resource availability: an execution slot (else ABORTED, ROLLED_BACK);
//  4. the state transaction begins: EXECUTING is persisted (the claim)
//     before the tool runs, except for a call of a read-only tool
//     ([tools.Declaration.ReadOnly]) without an idempotency key or an
//     intent, whose record is stored once, when it ends;
//  5. to 8. the tool runs under its max execution time, through handles
//     that expose only what was granted, writing state into the
//     transaction's buffer (a timeout or limit: ABORTED, ROLLED_BACK; an
//     error, a panic or a refused handle: ROLLED_BACK);
//  9. output validation against the output schema (else ROLLED_BACK);
//  10. commit, in one bbolt update with the final record (else ROLLED_BACK);
//  11. COMPLETED, with the record carrying every transition.
//
// # Capabilities, policies and trust
//
// [Options.Policy] (a [capability.Policy] from a Go value or a JSON file)
// grants capabilities to principals; everything else is denied. Rule 2
// decides once per attempt, and the decision is recorded on the AUTHORIZED
// or DENIED audit event: its id, the principal, the tool, what was
// required, granted and missing, the policy's revision (the SHA-256 of its
// content) and the time. A policy that failed to load denies everything,
// and each denial says why. [Invocation.Grants] add to the policy for one
// call (the CLI's --allow); they never replace it.
//
// A tool reaches the world through its [tools.Env]: the filesystem handle
// is rooted with os.Root at the granted scopes (no "..", absolute-path or
// symbolic-link escape, even one swapped in during the call), the state
// handle opens only the granted namespaces, and [tools.Env.Run] starts only
// the granted commands, in a working directory inside a granted scope, with
// the tool's limits on the process. The handles expose what the tool
// declared, narrowed to what the principal holds: a tool declaring
// filesystem.read:/srv/data reaches /srv/data even when the principal may
// read all of /srv. Asking for more is an AccessError, recorded, and the
// attempt rolls back.
//
// In-process Go tools are trusted code. Go cannot stop a function from
// calling os.Open, exec.Command or anything else directly, nor bound one
// goroutine's memory or CPU: the handles confine what a tool does through
// them, and only that. Register as Go tools only code you trust as much as
// the program embedding the runtime. Process tools are where isolation is
// enforced: the process runs in its own process group, killed as a whole at
// the deadline, under maxMemory (cgroup v2 memory.max where a writable
// cgroup exists, else prlimit RLIMIT_AS plus a resident-memory watchdog)
// and maxFileSize (RLIMIT_FSIZE), with bounded output capture and only the
// environment it is given. `toolgate doctor` reports which of these this
// machine can enforce.
//
// # Limits
//
// Every limit of the declaration ([tools.ResourceLimits]) is enforced, and
// an [Invocation] may lower one (never raise it):
//
//   - maxExecutionTime: the attempt's context deadline; Execute returns at
//     it even if the tool does not; a process tool's whole process group is
//     killed (error.type timeout);
//   - maxMemory: for process tools, as above (memory_limit); for
//     in-process tools, only what the runtime holds on the tool's behalf,
//     its buffered state writes, is bounded (memory_limit);
//   - maxFileSize: the filesystem handle writes up to it and refuses the
//     rest; RLIMIT_FSIZE for processes (file_size_limit);
//   - maxOutputBytes: the output is refused past it (output_limit), and a
//     process's captured streams are capped to it;
//   - maxConcurrent: the tool's own execution slots, taken before one of
//     the runtime's [Options.MaxConcurrent]; waiting for either is bounded
//     by [Options.SlotWait] and the caller's context (a transient
//     ResourceError, which the retry policy may retry).
//
// The result's error code, the audit event's error and the span's
// error.type name the limit that was hit.
//
// # Intents and idempotency keys
//
// [Runtime.Propose] stores an exact invocation for a human to approve
// ([Runtime.Approve], [Runtime.Reject]); [Runtime.Execute] with
// [Invocation.IntentID] and [Invocation.IntentHash] runs it at most once:
// the intent is marked executed in the same update that claims the
// attempt, and is never retried. An intent interrupted by a crash counts as
// executed and refuses to run again: a person decides. Every refusal is an
// [IntentError] and is kept in the intent's history.
//
// [Invocation.IdempotencyKey] (per principal and tool) returns the stored
// result of the key's first call that began to run, failures included (a
// call refused before its tool ran frees the key), for the same
// canonical request within [Options.IdempotencyTTL], marked
// [Result.Replayed]; a different request with the key is an
// [IdempotencyError]. A replayed failure returns a [ReplayedError] of the
// original class.
//
// # Records, audit events and recovery
//
// Every attempt is recorded with each transition and its time; every
// transition is also an audit event (RFC-0001 8.1), written in the same
// update as the change it records ([Reader.Execution], [Reader.Executions],
// [Reader.AuditLog]; a [Reader] reads a store open read-only too).
// [Open] and [New] finish any attempt a crash left EXECUTING:
// ABORTED, then ROLLED_BACK with the reason "interrupted"; it is never run
// again. A read-only call that a crash interrupted left nothing: it had
// changed nothing and answered nobody.
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
