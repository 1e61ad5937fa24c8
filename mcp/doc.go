// Package mcp serves a toolgate runtime to agents over the Model Context
// Protocol, with the official Go SDK (github.com/modelcontextprotocol/go-sdk).
// Every tools/call runs through runtime.Execute: the same lifecycle, the same
// records, audit events and hashes as any other front end; what this package
// adds is what identifies the MCP request (see "Call ids").
//
//	srv, err := mcp.New(rt, &mcp.Options{Principal: "mcp:alice"})
//	err = srv.Run(ctx, &sdkmcp.StdioTransport{})       // one agent over stdio
//	http.Handle("/mcp", srv.Handler(&mcp.HTTPOptions{...})) // streamable HTTP
//
// The server does not own its runtime: neither Run nor the Handler closes
// it. The caller opened it and closes it, once its sessions have ended and
// its HTTP server has shut down; other front ends may serve the same
// runtime meanwhile.
//
// # Tools and versions
//
// tools/list lists every tool of the runtime's registry: under its plain id
// (file.read), the version a call without a version runs (the highest
// release; a pre-release only when the tool has nothing else, as
// tools.Registry.Lookup resolves ""), and every version, that one
// included, as ID--VERSION (file.read--1.0.0; a "+" of build
// metadata is written "_"): "@" is not allowed in an MCP tool name, and no
// tool id contains "--", so the two forms never collide. A tool's
// description, inputSchema and outputSchema are its declaration's; its
// annotations follow from the declaration: idempotentHint from idempotent,
// readOnlyHint when every capability a call of it may require (its input
// capabilities included) is a read (filesystem.read, state.read), destructiveHint when it is not read-only,
// openWorldHint when it requires process.exec or a capability outside the
// filesystem and state. A tool whose input schema is not of type "object"
// (which MCP requires) is left out, with a warning in the log.
//
// The SDK does no validation of its own here (Server.AddTool, the raw form):
// toolgate's validator and error mapping are the only ones.
//
// # Results
//
// COMPLETED: structuredContent is the tool's output ({"result": OUTPUT} for
// a tool whose output is not an object: MCP's structured content is an
// object), and one text block holds the output's JSON. Every answer that is
// not an error conforms to the outputSchema tools/list advertised: for a
// tool that requires approval, anyOf its output and the approval_required
// object (see schemas.go). FAILED, DENIED, ROLLED_BACK (ABORTED included): isError, and
// the text block holds {"state", "executionId", "error": {"type", "code",
// "message"}} so that the model can correct itself. A call refused before it
// ran (an intent that may not run, an idempotency key in conflict, arguments
// of toolgate.execute_intent that are not {"id", "hash"}, the message naming
// the field) is isError with
// state REFUSED and the refusal's type and code (IntentError,
// IdempotencyError, ValidationError). An unknown tool or version is the
// protocol's invalid-params error (-32602). The result's _meta carries
// io.toolgate/executionId, io.toolgate/callId, io.toolgate/traceId (when
// traced), io.toolgate/state, io.toolgate/replayed when the outcome is a
// stored one, and io.toolgate/intentId when the call ran an intent.
//
// # Approvals
//
// A tool that requires approval does not run when called: the call (once
// its input is valid and its principal holds the capabilities) becomes an
// intent for exactly that call, and the result (not an error) holds its id,
// hash and what a person runs to approve it, as structuredContent {"status":
// "approval_required", "intentId", "hash", ...} and in _meta. Once approved,
// the agent runs it with the tool toolgate.execute_intent {"id", "hash"}
// ("intentId" is taken for "id"), or by repeating
// the identical call; it runs at most once, and a later run returns the
// stored outcome, marked replayed.
//
// With Options.ApproveViaElicitation (toolgate mcp
// --approve-via-elicitation) and a client that declared the elicitation
// capability, the call instead asks the client's user: the result is an
// input request (multi round-trip requests of protocol 2026-07-28; for an
// older client the SDK sends elicitation/create itself) showing the exact
// canonical call, {"input", "tool", "version"} in RFC 8785 form, and its
// SHA-256, the intent's hash. The call made again with an accept whose
// "approve" is true, and the request state this server signed for that
// intent and principal, approves the intent as the session's principal,
// recorded via elicitation (runtime.IntentDecision.Via and the audit
// event's intent.via), and runs it once. A decline, a cancel, or an answer
// without that state leaves the intent pending. The approval passes
// through the agent's own client, so it proves less than one made out of
// band: it is the operator's choice, off by default.
//
// # Request metadata
//
// A call's _meta may carry io.toolgate/idempotencyKey (as Idempotency-Key
// on the HTTP boundary), a W3C trace context (traceparent, tracestate) that
// the invocation's spans continue, and a progressToken: while the call runs,
// progress notifications report the elapsed time. notifications/cancelled
// cancels the invocation: it ends ABORTED, then ROLLED_BACK, recorded. A
// client that leaves mid-call over stdio (its input ends) cancels its calls
// the same way, since nobody is left to receive their results; so does a
// stateless HTTP request (protocol 2026-07-28) whose connection drops. This
// differs from toolgate serve's HTTP API, where a call whose client left
// runs to its end so that a retry with the same Idempotency-Key collects the
// result.
//
// # Call ids
//
// The call id of an invocation made over MCP is mcp:SESSION:ID, the MCP
// session and the JSON-RPC request id (each replaced by a hash when it holds
// characters a call id may not), so that the records and audit events name
// the MCP request. Over stdio the session is a random id per connection; over
// stateless HTTP, per request. Server.Run and Server.Handler read the request
// id off the wire; a server connected to a transport another way records a
// new call id instead. The request id travels in the call's _meta under a
// key random per Server, placed last, so that a client's own copy of the
// key (in any spelling) loses to it; a tools/call whose params the SDK could
// not decode (its message would quote them, the key with them, and name Go
// types) is answered here with invalid params, and one whose id is a number
// but not an integer with invalid request (the SDK would run it as another
// id), over stdio and HTTP alike.
//
// # Stdio framing
//
// Server.Run reads the lines of an *sdkmcp.StdioTransport or
// *sdkmcp.IOTransport itself, one JSON-RPC message per line, and hands the
// SDK decoded messages: everything above the framing is the SDK's. A line
// that is not a message (not JSON, a batch, an object that is not
// JSON-RPC, a line longer than MaxLineLength, 16 MiB by default) is answered
// with the protocol's error, with the line's id when one can be read, and
// the session goes on; the SDK's own reader ends the session on such a
// line.
package mcp
