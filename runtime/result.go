package runtime

import (
	"encoding/json"
	"github.com/toolgate/toolgate/audit"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/lifecycle"
	"github.com/toolgate/toolgate/tools"
)

// Invocation is one call of one tool.
type Invocation struct {
	Tool      string          // tool id
	Version   string          // "" means the highest registered version
	Input     json.RawMessage // the arguments, validated against the input schema
	CallID    string          // shared by every attempt; "" means a new UUID
	Principal string          // who asks; "" means "anonymous"
	// Token names the OAuth access token the call came with, if any (its
	// issuer, subject and SHA-256, never the token): kept in every record
	// and audit event of the call. A front end that authenticates OAuth
	// tokens sets it (see package oauth).
	Token *audit.Token
	// Scopes and Claims are the OAuth token's scopes and grant claims, if
	// any: what the policy's Cedar policies see of the caller (package
	// rules). Not recorded; a front end that authenticates OAuth tokens
	// sets them with Token.
	Scopes []string
	Claims map[string][]string
	// Grants are capabilities granted for this call only, on top of what
	// Options.Grants gives the principal (the CLI's --allow).
	Grants []capability.Capability
	// Limits lower the tool's declared resource limits for this call only:
	// a zero field keeps the declared limit. A limit can only be lowered; a
	// higher (or negative) value fails the invocation at rule 1 with a
	// ValidationError (Phase "limits"), recorded FAILED.
	Limits *tools.ResourceLimits

	// IntentID and IntentHash execute an approved intent: the call runs
	// the intent's tool, version and input (Tool, Version and Input may be
	// left empty; if set they must match), once, never retried. See
	// Runtime.Propose.
	IntentID   string
	IntentHash string

	// IdempotencyKey, scoped to Principal and Tool: the first call with a
	// key runs; a later one with the same key and the same canonical
	// request (tool, version, input), within Options.IdempotencyTTL,
	// returns the first one's stored result, failures included, marked
	// Replayed, and runs nothing. The same key with a different request is
	// an IdempotencyError (idempotency_conflict) and runs nothing. While
	// the first call still runs, a second waits for it (bounded by its
	// context), or with IdempotencyNoWait fails at once
	// (idempotency_in_flight).
	IdempotencyKey    string
	IdempotencyNoWait bool
	// BypassIdempotency runs the call even though its key holds a result,
	// and makes it the key's result; its audit events say so.
	BypassIdempotency bool
}

// Result is the outcome of an invocation: its final state, and every
// attempt, each with its own execution id and lifecycle.
type Result struct {
	ExecutionID string          `json:"executionId"` // of the last attempt
	CallID      string          `json:"callId"`
	TraceID     string          `json:"traceId,omitempty"` // the trace the invocation's spans belong to, if any
	Tool        string          `json:"tool"`
	Version     string          `json:"version"`
	State       lifecycle.State `json:"state"` // of the last attempt
	Output      json.RawMessage `json:"output,omitempty"`
	Error       *ErrorInfo      `json:"error,omitempty"`
	Attempts    []Attempt       `json:"attempts"`
	IntentID    string          `json:"intentId,omitempty"` // the approved intent the call executed
	// Replayed marks a stored outcome returned without running anything:
	// the execution of an intent that ran already, or the first call made
	// with an idempotency key. Its attempts say when it ran.
	Replayed       bool   `json:"replayed,omitempty"`
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}

// Attempt is one run through the lifecycle.
type Attempt struct {
	ExecutionID string                 `json:"executionId"`
	Number      int                    `json:"number"` // 1 for the first attempt
	State       lifecycle.State        `json:"state"`
	Error       *ErrorInfo             `json:"error,omitempty"`
	StartedAt   time.Time              `json:"startedAt"`
	EndedAt     time.Time              `json:"endedAt"`
	Transitions []lifecycle.Transition `json:"transitions"`
}

// Aborted reports whether the attempt went through ABORTED (a timeout, a
// limit, or a cancel) on its way to ROLLED_BACK.
func (a *Attempt) Aborted() bool {
	for _, t := range a.Transitions {
		if t.To == lifecycle.Aborted {
			return true
		}
	}
	return false
}
