// Package audit holds the RFC-0001 audit event (section 8.1) and the
// canonical encoding its hashes are computed over.
//
// # Canonical encoding
//
// [Canonicalize] rewrites one JSON value in the JSON Canonicalization Scheme
// of RFC 8785: no insignificant whitespace, object members sorted by the
// UTF-16 code units of their names, strings with the minimal escapes, and
// numbers written the way ECMAScript writes an IEEE-754 double. Two inputs
// that mean the same JSON value canonicalize to the same bytes, whatever
// their member order, spacing or number spelling ("1.0", "1", "10e-1").
// [Hash] is the lowercase hex SHA-256 of those bytes, so equal values hash
// equally.
//
// Canonicalization refuses, with an error wrapping [ErrNotCanonicalizable],
// anything that is not exactly one well-formed I-JSON value: trailing data,
// invalid UTF-8, lone surrogate escapes, duplicate member names (compared
// after unescaping), numbers that overflow a double, and nesting deeper than
// [MaxDepth]. Numbers are read as doubles, so integers beyond 2^53 lose
// precision exactly as they would in JavaScript.
//
// # Events
//
// [Event] is the audit event of RFC-0001 section 8.1 with its JSON field
// names, plus the two chain fields (seq and prevHash) that link each event
// to the one before it. [Event.Hash] is [Hash] of the event's JSON, so an
// event read back from storage hashes to the same value it was written with.
// toolgate's store keeps an event's place in the chain in the entry around
// it instead, and [Event.AppendJSON] encodes events on the hot path.
//
// # Verification and checkpoints
//
// The store's log numbers entries from 1 and links each to the one before:
// hash = SHA-256(previous hash || SHA-256(event bytes)) ([ChainHash]). A
// [Verifier] replays the stored groups in order and reports the first bad
// entry as a [*VerifyError]. Replay alone cannot see a deleted tail or a log
// rewritten consistently from some entry on; a checkpoint (the size and head
// hash, signed with ed25519 in the sumdb signed-note format) taken earlier
// and kept elsewhere can: the log must still contain every entry it covers.
package audit
