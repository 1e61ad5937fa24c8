package audit

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Event is one audit event (RFC-0001 section 8.1): a lifecycle transition of
// one attempt of one tool call. Its JSON field names are the RFC's.
//
// Seq and PrevHash chain the events of a log: Seq numbers them from the
// first, and PrevHash is the [Event.Hash] of the event before (empty for the
// first). Both are omitted when zero: toolgate's store keeps an event's
// place in the chain in the log entry that wraps it (txn.AuditEntry).
type Event struct {
	// Seq is the event's position in its chain.
	Seq uint64 `json:"seq,omitempty"`
	// PrevHash is the hash of the previous event in the chain.
	PrevHash string `json:"prevHash,omitempty"`

	// EventID identifies this event uniquely.
	EventID string `json:"eventId"`
	// Timestamp is when the transition happened, in Unix milliseconds.
	Timestamp int64 `json:"timestamp"`
	// ToolID names the tool.
	ToolID string `json:"toolId"`
	// ToolVersion is the declared version of the tool.
	ToolVersion string `json:"toolVersion"`
	// ExecutionID identifies the execution (one attempt's lifecycle).
	ExecutionID string `json:"executionId"`
	// CallID identifies the invocation that all its attempts share.
	CallID string `json:"callId"`
	// Attempt numbers the attempt within the call, from 1.
	Attempt int `json:"attempt"`
	// State is the lifecycle state entered, e.g. "EXECUTING".
	State string `json:"state"`
	// UserID names the user on whose behalf the tool ran, if any.
	UserID string `json:"userId,omitempty"`
	// Capabilities lists the capabilities granted. A nil slice is written
	// as [] (never null), so nil and empty hash alike.
	Capabilities []string `json:"capabilities"`
	// Duration is the execution time in milliseconds, when measured.
	Duration *int64 `json:"duration,omitempty"`
	// Error describes the failure, for a failed, denied or aborted attempt.
	Error *ErrorDetails `json:"error,omitempty"`
	// InputHash is the hex SHA-256 of the canonical input ([Hash]).
	InputHash string `json:"inputHash"`
	// OutputHash is the hex SHA-256 of the canonical output, when there is one.
	OutputHash string `json:"outputHash,omitempty"`
	// Decision is the capability decision (enforcement rule 2), on the
	// event of the transition it caused: AUTHORIZED or DENIED.
	Decision *Decision `json:"decision,omitempty"`
	// IdempotencyKey is the key the invocation was made with, if any.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// IdempotencyBypass marks an invocation that ran again although its
	// key held a result: the caller asked to bypass it.
	IdempotencyBypass bool `json:"idempotencyBypass,omitempty"`
	// IntentID names the approved intent an attempt executes, on every
	// event of that attempt.
	IntentID string `json:"intentId,omitempty"`
	// Intent is set on the events of an intent's own history, which are
	// not lifecycle transitions of an attempt: its proposal, the decision
	// on it, and each refused request to execute it. Such an event has no
	// executionId; its state is the intent's action in upper case
	// (PROPOSED, APPROVED, REJECTED or REFUSED), its userId the person who
	// acted, and its inputHash the hash of the proposed input. A Code of
	// "imported" marks an event written when a database of an earlier
	// version, whose intents were not audited, was first opened.
	Intent *IntentAction `json:"intent,omitempty"`
	// Token names the OAuth access token the call was made under, when it
	// came with one: its issuer, subject and SHA-256, never the token.
	Token *Token `json:"token,omitempty"`
}

// Token identifies an OAuth access token without holding it.
type Token struct {
	Issuer  string `json:"iss"`
	Subject string `json:"sub"`
	SHA256  string `json:"sha256"` // hex SHA-256 of the token
}

// The actions of an intent's history, in [IntentAction.Action].
const (
	IntentProposed = "proposed"
	IntentApproved = "approved"
	IntentRejected = "rejected"
	IntentRefused  = "refused"
	// IntentExecuted is only imported: the execution mark of an intent
	// stored by a version that did not audit intents (this version's
	// executions are named by their own events' intentId).
	IntentExecuted = "executed"
)

// IntentAction is one step of an intent's history (see [Event.Intent]).
type IntentAction struct {
	// ID is the intent's id, a UUID.
	ID string `json:"id"`
	// Hash is the intent's hash: the SHA-256 of its canonical tool,
	// version and input.
	Hash string `json:"hash"`
	// Action is what happened: proposed, approved, rejected or refused.
	Action string `json:"action"`
	// Code is why an execution request was refused (an intent error code).
	Code string `json:"code,omitempty"`
	// Reason is a rejection's reason.
	Reason string `json:"reason,omitempty"`
	// Via is how an approval reached toolgate when not out of band:
	// "elicitation" (the approver's own MCP client asked its user).
	Via string `json:"via,omitempty"`
	// Signer is the verifier key ([VerifierKey.String]) whose signing key
	// signed this decision, and Signature the signature, in standard
	// base64, of its [DecisionStatement]; both empty for an unsigned
	// decision (see [SigningKey.SignDecision]).
	Signer    string `json:"signer,omitempty"`
	Signature string `json:"signature,omitempty"`
}

// Decision records one capability decision: who (the event's userId) asked
// to run what (its toolId), when (its timestamp), under which policy, and
// what was required, granted and missing. Nil lists are written as [].
type Decision struct {
	// ID identifies the decision.
	ID string `json:"id"`
	// PolicyRevision is the SHA-256 of the policy decided under.
	PolicyRevision string `json:"policyRevision"`
	// Required lists the capabilities the tool declares.
	Required []string `json:"required"`
	// Granted lists the grants that met a requirement.
	Granted []string `json:"granted"`
	// Missing lists the requirements no grant met.
	Missing []string `json:"missing"`
	// Reason says why everything was denied regardless, e.g. an unreadable
	// policy.
	Reason string `json:"reason,omitempty"`
	// Cedar is the decision of the policy's Cedar policies over the call's
	// arguments, when it has any (absent in events written before them).
	Cedar *CedarDecision `json:"cedar,omitempty"`
}

// CedarDecision is the part of a decision the Cedar policies over a
// call's arguments made.
type CedarDecision struct {
	// Revision is the SHA-256 of the Cedar policy set's files and groups.
	Revision string `json:"revision"`
	// Effect is allow, deny or approval.
	Effect string `json:"effect"`
	// Policies are the ids of the policies that determined it.
	Policies []string `json:"policies,omitempty"`
	// Approvers are the groups whose member must approve (approval).
	Approvers []string `json:"approvers,omitempty"`
}

// ErrorDetails describes why an attempt did not complete.
type ErrorDetails struct {
	// Type is the failure class of RFC-0001 section 7.1, e.g.
	// "ValidationError" or "TimeoutError".
	Type string `json:"type"`
	// Code is a machine-readable reason within Type.
	Code string `json:"code"`
	// Message is a human-readable description.
	Message string `json:"message"`
}

// eventJSON has Event's fields and tags but not its methods.
type eventJSON Event

// MarshalJSON encodes e with the RFC field names, writing a nil
// Capabilities as [].
func (e Event) MarshalJSON() ([]byte, error) {
	if e.Capabilities == nil {
		e.Capabilities = []string{}
	}
	if d := e.Decision; d != nil && (d.Required == nil || d.Granted == nil || d.Missing == nil) {
		c := *d
		for _, l := range []*[]string{&c.Required, &c.Granted, &c.Missing} {
			if *l == nil {
				*l = []string{}
			}
		}
		e.Decision = &c
	}
	return json.Marshal(eventJSON(e))
}

// maxExactInt is 2^53: JSON numbers are read as doubles, which hold every
// integer up to it exactly.
const maxExactInt = 1 << 53

// Hash returns [Hash] of the event's JSON encoding, covering every field
// including Seq and PrevHash. It refuses, with an error wrapping
// [ErrNotCanonicalizable], an event the canonical form cannot hold
// faithfully: a string field that is not valid UTF-8 (encoding/json would
// replace the bad bytes, so distinct events could hash alike), or an integer
// beyond ±2^53 (it would be rounded to a double).
func (e *Event) Hash() (string, error) {
	if err := e.check(); err != nil {
		return "", err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return "", fmt.Errorf("audit: encoding event: %w", err)
	}
	return Hash(b)
}

func (e *Event) check() error {
	strs := []string{e.PrevHash, e.EventID, e.ToolID, e.ToolVersion, e.ExecutionID,
		e.CallID, e.State, e.UserID, e.InputHash, e.OutputHash, e.IdempotencyKey}
	strs = append(strs, e.Capabilities...)
	if e.Error != nil {
		strs = append(strs, e.Error.Type, e.Error.Code, e.Error.Message)
	}
	if d := e.Decision; d != nil {
		strs = append(strs, d.ID, d.PolicyRevision, d.Reason)
		strs = append(strs, d.Required...)
		strs = append(strs, d.Granted...)
		strs = append(strs, d.Missing...)
	}
	strs = append(strs, e.IntentID)
	if in := e.Intent; in != nil {
		strs = append(strs, in.ID, in.Hash, in.Action, in.Code, in.Reason, in.Via, in.Signer, in.Signature)
	}
	for _, s := range strs {
		if !utf8.ValidString(s) {
			return notCanon("event field value %q is not valid UTF-8", s)
		}
	}
	inexact := func(v int64) bool { return v > maxExactInt || v < -maxExactInt }
	switch {
	case e.Seq > maxExactInt:
		return notCanon("event seq %d is beyond 2^53", e.Seq)
	case inexact(e.Timestamp):
		return notCanon("event timestamp %d is beyond ±2^53", e.Timestamp)
	case inexact(int64(e.Attempt)):
		return notCanon("event attempt %d is beyond ±2^53", e.Attempt)
	case e.Duration != nil && inexact(*e.Duration):
		return notCanon("event duration %d is beyond ±2^53", *e.Duration)
	}
	return nil
}
