package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/uuid"
	"github.com/toolgate/toolgate/lifecycle"
	"github.com/toolgate/toolgate/rules"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// An intent is an exact invocation proposed for a human to approve: a tool,
// a version and a validated input, identified by a random UUID and by a
// SHA-256 hash of the three. It runs only with both, only once approved,
// only if unchanged, and at most once. Intents are append-only: nothing
// modifies or deletes one; a decision and an execution are added to it.
//
// The records live in state namespaces no tool reaches.
const (
	nsIntents    = reservedPrefix + "intents"          // id -> intentRecord, written once
	nsDecisions  = reservedPrefix + "intent.decisions" // id -> IntentDecision, written once
	nsExecuted   = reservedPrefix + "intent.executed"  // id -> IntentExecution, written with the claim
	nsIntentLogs = reservedPrefix + "intent.refusals"  // id/seq -> IntentEvent, a refused execution
	nsPending    = reservedPrefix + "intent.pending"   // "p:"+proposer -> its pending intents, decimal (MaxPendingIntents)
	nsByCall     = reservedPrefix + "intent.bycall"    // hash+"/"+proposer -> the newest intent id (IntentFor)
)

// The statuses of an intent.
const (
	IntentPending  = "pending"
	IntentApproved = "approved"
	IntentRejected = "rejected"
	IntentExecuted = "executed"
)

// Intent is a proposed invocation and what happened to it.
type Intent struct {
	ID         string          `json:"id"`
	Hash       string          `json:"hash"` // hex SHA-256 of the canonical {"input", "tool", "version"}
	Tool       string          `json:"tool"`
	Version    string          `json:"version"`
	Input      json.RawMessage `json:"input"`
	Proposer   string          `json:"proposer"`
	ProposedAt time.Time       `json:"proposedAt"`
	// CallID is the call id of the request that proposed it, when it gave
	// one: over MCP, mcp:SESSION:ID names the MCP request.
	CallID    string           `json:"callId,omitempty"`
	Status    string           `json:"status"` // pending, approved, rejected or executed
	Decision  *IntentDecision  `json:"decision,omitempty"`
	Execution *IntentExecution `json:"execution,omitempty"`
	// Refusals are the execution requests refused after the intent existed
	// (pending, rejected, hash mismatch, already executed, ...), oldest
	// first.
	Refusals []IntentRefusal `json:"refusals,omitempty"`
}

// IntentDecision is a human's approval or rejection.
type IntentDecision struct {
	Approved bool      `json:"approved"`
	By       string    `json:"by"`
	At       time.Time `json:"at"`
	Reason   string    `json:"reason,omitempty"`
	// Via is how an approval reached toolgate when not out of band (the
	// CLI, the HTTP API): "elicitation" when the MCP client of the
	// approver's own session asked its user (see ApproveVia).
	Via string `json:"via,omitempty"`
	// Signer is the verifier key that signed the decision (Options.
	// ApprovalKey; its signature is in the decision's audit event), empty
	// for an unsigned one.
	Signer string `json:"signer,omitempty"`
}

// String says what was decided, by whom, how, and why: "approved by
// alice via elicitation, signed with key alice", "rejected by bob: not
// now".
func (d *IntentDecision) String() string {
	what := "rejected by " + d.By
	if d.Approved {
		what = "approved by " + d.By
	}
	if d.Via != "" {
		what += " via " + d.Via
	}
	if name, _, ok := strings.Cut(d.Signer, "+"); ok {
		what += ", signed with key " + name
	}
	if !d.Approved {
		what += ": " + d.Reason
	}
	return what
}

// IntentExecution is the one execution of an approved intent: written in
// the same update that claimed it, before the tool ran.
type IntentExecution struct {
	ExecutionID string    `json:"executionId"`
	CallID      string    `json:"callId"`
	Principal   string    `json:"principal"`
	At          time.Time `json:"at"`
}

// IntentRefusal is an execution request that was refused.
type IntentRefusal struct {
	At        time.Time `json:"at"`
	Principal string    `json:"principal"`
	Code      string    `json:"code"`             // the IntentError code
	CallID    string    `json:"callId,omitempty"` // the refused request's call id, when it gave one
}

// intentRecord is the stored proposal.
type intentRecord struct {
	ID         string          `json:"id"`
	Hash       string          `json:"hash"`
	Tool       string          `json:"tool"`
	Version    string          `json:"version"`
	Input      json.RawMessage `json:"input"`
	Proposer   string          `json:"proposer"`
	ProposedAt time.Time       `json:"proposedAt"`
	CallID     string          `json:"callId,omitempty"`
}

// ErrIntent is matched (errors.Is) by every *IntentError.
var ErrIntent = errors.New("runtime: intent refused")

// IntentError is an intent that cannot be executed (or decided), and why.
// Code is one of: intent_malformed, intent_not_found, intent_corrupt, intent_pending,
// intent_rejected, intent_hash_mismatch, intent_tool_changed,
// intent_already_executed, intent_in_flight, intent_decided,
// intent_approver_not_allowed (an approver outside the group a Cedar
// policy names, see package rules). It also
// matches ErrAuthorization: the invocation is not authorized to run.
type IntentError struct {
	Code      string
	IntentID  string
	Reason    string
	Execution *IntentExecution // for intent_already_executed and intent_in_flight: the one execution
}

func (e *IntentError) Error() string {
	return fmt.Sprintf("runtime: intent %s: %s: %s", e.IntentID, strings.TrimPrefix(e.Code, "intent_"), e.Reason)
}
func (e *IntentError) Is(target error) bool { return target == ErrIntent || target == ErrAuthorization }
func (e *IntentError) code() string         { return e.Code }

// IntentHash is the hash an intent of tool@version with input has: the hex
// SHA-256 of the RFC 8785 canonical form of {"input", "tool", "version"}.
func IntentHash(tool, version string, input json.RawMessage) (string, error) {
	b, err := json.Marshal(struct {
		Input   json.RawMessage `json:"input"`
		Tool    string          `json:"tool"`
		Version string          `json:"version"`
	}{input, tool, version})
	if err != nil {
		return "", fmt.Errorf("runtime: intent input: %w", err)
	}
	return hashJSON(b), nil
}

// Propose stores inv as an intent awaiting approval, after validating its
// input against the tool's schema (a *ValidationError otherwise, and
// nothing is stored). The version is pinned: "" becomes the highest
// registered one. inv.Principal is recorded as the proposer.
func (r *Runtime) Propose(ctx context.Context, inv Invocation) (*Intent, error) {
	if err := r.enter(); err != nil {
		return nil, err
	}
	defer r.leave()
	entry, err := r.reg.Lookup(inv.Tool, inv.Version)
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	decl := entry.Declaration()
	switch {
	case len(inv.Input) == 0:
		return nil, &ValidationError{Phase: "input", Err: errors.New("no input; pass a JSON object such as {}")}
	case len(inv.Input) > r.opts.MaxInputBytes:
		return nil, &ValidationError{Phase: "input", Err: fmt.Errorf("input is %d bytes, more than the %d allowed", len(inv.Input), r.opts.MaxInputBytes)}
	}
	if err := entry.ValidateInput(inv.Input); err != nil {
		return nil, &ValidationError{Phase: "input", Err: err}
	}
	if err := checkPrincipal(principalOf(inv)); err != nil {
		return nil, err
	}
	hash, err := IntentHash(decl.ID, decl.Version, inv.Input)
	if err != nil {
		return nil, &ValidationError{Phase: "input", Err: err}
	}
	if inv.CallID != "" {
		if err := CheckIdentity(principalOf(inv), inv.CallID); err != nil {
			return nil, err
		}
	}
	rec := intentRecord{
		ID: uuid.New(), Hash: hash, Tool: decl.ID, Version: decl.Version,
		Input: append(json.RawMessage(nil), inv.Input...), Proposer: principalOf(inv), ProposedAt: r.opts.Now().UTC(),
		CallID: inv.CallID,
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	ev := r.intentEvent(rec.ID, rec.Hash, rec.Tool, rec.Version, rec.Input, rec.Proposer, rec.CallID, rec.ProposedAt,
		&audit.IntentAction{Action: audit.IntentProposed})
	err = r.store.UpdateState(ctx, func(v *txn.StateView) error {
		if _, ok := v.Get(nsIntents, rec.ID); ok {
			return errors.New("runtime: intent id collision") // a random UUID: never in practice
		}
		if n := pendingOf(v, rec.Proposer); r.opts.MaxPendingIntents > 0 && n >= r.opts.MaxPendingIntents {
			return &IntentError{Code: "intent_limit", Reason: fmt.Sprintf("%s has %d intents pending, the most allowed: nothing was proposed; they count again once approved or rejected", rec.Proposer, n)}
		} else if err := v.Put(nsPending, pendingKey(rec.Proposer), strconv.AppendInt(nil, int64(n+1), 10)); err != nil {
			return err
		}
		if err := v.Put(nsByCall, byCallKey(rec.Hash, rec.Proposer), []byte(rec.ID)); err != nil {
			return err
		}
		return v.Put(nsIntents, rec.ID, b)
	}, ev)
	var ie *IntentError
	if errors.As(err, &ie) {
		return nil, ie
	}
	if err != nil {
		return nil, &StateError{Op: "record", Err: err}
	}
	in, err := r.Intent(ctx, rec.ID)
	if err == nil && r.opts.OnPropose != nil {
		r.proposed(in)
	}
	return in, err
}

func pendingKey(proposer string) string { return "p:" + proposer }

// byCallKey is the index key of the calls proposer proposed with hash (a
// hash is 64 hex digits: the first "/" after it ends it).
func byCallKey(hash, proposer string) string { return hash + "/" + proposer }

// IntentFor returns the newest intent proposer proposed for the call whose
// intent hash is hash (see IntentHash), from an index written with each
// proposal: what a front end needs to find the intent of a call made again
// (MCP's identical call) without reading every intent. An
// *IntentError with code intent_not_found when there is none.
func (r *Runtime) IntentFor(ctx context.Context, proposer, hash string) (*Intent, error) {
	id, ok, err := r.store.StateValue(ctx, nsByCall, byCallKey(hash, proposer))
	switch {
	case err != nil:
		return nil, &StateError{Op: "read", Err: err}
	case !ok:
		return nil, &IntentError{Code: "intent_not_found", Reason: "no intent of " + proposer + " for that call"}
	}
	in, err := r.Intent(ctx, string(id))
	if err != nil {
		return nil, err
	}
	if in.Hash != hash || in.Proposer != proposer {
		// The index disagrees with the intent it names: it was changed
		// outside toolgate. Never hand out another call's intent.
		return nil, &IntentError{Code: "intent_corrupt", IntentID: in.ID, Reason: "the index of calls names an intent of another call"}
	}
	return in, nil
}

// indexIntents writes the index of calls (IntentFor) for the intents of a
// database written before it existed, once, with a marker.
func (r *Runtime) indexIntents(ctx context.Context) error {
	if _, ok, err := r.store.StateValue(ctx, nsMeta, intentsIndexed); err != nil || ok {
		return err
	}
	all, err := readIntents(ctx, r.store, IntentFilter{})
	if err != nil {
		return err
	}
	slices.SortStableFunc(all, func(a, b *Intent) int { return a.ProposedAt.Compare(b.ProposedAt) }) // the newest last, so it stays
	return r.store.UpdateState(ctx, func(v *txn.StateView) error {
		if _, ok := v.Get(nsMeta, intentsIndexed); ok {
			return nil // another node did it meanwhile
		}
		written := map[string]bool{}
		for _, in := range all {
			key := byCallKey(in.Hash, in.Proposer)
			if _, ok := v.Get(nsByCall, key); ok && !written[key] {
				continue // proposed again since, by this version (another node): that one is the newest
			}
			if err := v.Put(nsByCall, key, []byte(in.ID)); err != nil {
				return err
			}
			written[key] = true
		}
		return v.Put(nsMeta, intentsIndexed, []byte("1"))
	})
}

// pendingOf is how many intents proposer has pending, as counted since
// this version (a missing or damaged count is none).
func pendingOf(v *txn.StateView, proposer string) int {
	b, ok := v.Get(nsPending, pendingKey(proposer))
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(string(b))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// proposed calls Options.OnPropose with a copy of in; a panic in it does
// not fail the proposal, which is committed.
func (r *Runtime) proposed(in *Intent) {
	c := *in
	c.Input = append(json.RawMessage(nil), in.Input...)
	c.Refusals = nil // a new intent has no history
	defer func() { recover() }()
	r.opts.OnPropose(&c)
}

// Approve records approver's approval of a pending intent. Rejected,
// approved and executed intents cannot be decided again (an *IntentError
// with code intent_decided).
func (r *Runtime) Approve(ctx context.Context, id, approver string) (*Intent, error) {
	return r.decide(ctx, id, IntentDecision{Approved: true, By: approver})
}

// ApproveVia is Approve, recording how the approval reached toolgate
// (IntentDecision.Via, in the decision and its audit event): "elicitation"
// for an approval the MCP client of the approver's session asked its user
// for. via is a short lowercase word.
func (r *Runtime) ApproveVia(ctx context.Context, id, approver, via string) (*Intent, error) {
	if via == "" || strings.Trim(via, "abcdefghijklmnopqrstuvwxyz-") != "" || len(via) > 32 {
		return nil, &IntentError{Code: "intent_malformed", IntentID: id, Reason: fmt.Sprintf("via %q is not a short lowercase word", via)}
	}
	return r.decide(ctx, id, IntentDecision{Approved: true, By: approver, Via: via})
}

// Reject records approver's rejection of a pending intent, with a reason.
func (r *Runtime) Reject(ctx context.Context, id, approver, reason string) (*Intent, error) {
	if strings.TrimSpace(reason) == "" {
		return nil, &IntentError{Code: "intent_malformed", IntentID: id, Reason: "a rejection needs a reason"}
	}
	return r.decide(ctx, id, IntentDecision{Approved: false, By: approver, Reason: reason})
}

func (r *Runtime) decide(ctx context.Context, id string, d IntentDecision) (*Intent, error) {
	if err := r.enter(); err != nil {
		return nil, err
	}
	defer r.leave()
	if !uuid.Valid(id) {
		return nil, &IntentError{Code: "intent_malformed", IntentID: id, Reason: "not a lowercase UUID v4"}
	}
	if strings.TrimSpace(d.By) == "" {
		return nil, &IntentError{Code: "intent_malformed", IntentID: id, Reason: "no approver named"}
	}
	if err := checkPrincipal(d.By); err != nil {
		return nil, err
	}
	if d.Approved {
		if e := r.canSign(id, d.By); e != nil {
			return nil, e
		}
	}
	// The intent's proposal is immutable: read it first, for the event.
	in, err := r.Intent(ctx, id)
	if err != nil {
		return nil, err
	}
	if d.Approved {
		if e := r.approverAllowed(in, d.By); e != nil {
			return nil, e
		}
	}
	d.At = r.opts.Now().UTC()
	action := &audit.IntentAction{Action: audit.IntentRejected, Reason: d.Reason, Via: d.Via}
	if d.Approved {
		action.Action = audit.IntentApproved
	}
	e := r.intentAuditEvent(in.ID, in.Hash, in.Tool, in.Version, in.Input, d.By, "", d.At, action)
	if k := r.opts.ApprovalKey; k != nil {
		if err := k.SignDecision(&e); err != nil {
			return nil, &IntentError{Code: "intent_malformed", IntentID: id, Reason: Message(err)}
		}
		d.Signer = e.Intent.Signer
	}
	ev := txn.AuditEvent{Data: e.AppendJSON(nil), Checked: true}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	err = r.store.UpdateState(ctx, func(v *txn.StateView) error {
		if _, ok := v.Get(nsIntents, id); !ok {
			return &IntentError{Code: "intent_not_found", IntentID: id, Reason: "no such intent"}
		}
		if prev, ok := v.Get(nsDecisions, id); ok {
			var p IntentDecision
			json.Unmarshal(prev, &p)
			verb := "rejected"
			if p.Approved {
				verb = "approved"
			}
			return &IntentError{Code: "intent_decided", IntentID: id,
				Reason: fmt.Sprintf("already %s by %s at %s; a decision is final", verb, p.By, p.At.Format(time.RFC3339))}
		}
		if n := pendingOf(v, in.Proposer); n > 0 {
			if err := v.Put(nsPending, pendingKey(in.Proposer), strconv.AppendInt(nil, int64(n-1), 10)); err != nil {
				return err
			}
		}
		return v.Put(nsDecisions, id, b)
	}, ev)
	if err != nil {
		var ie *IntentError
		if errors.As(err, &ie) {
			return nil, ie
		}
		return nil, &StateError{Op: "record", Err: err}
	}
	return r.Intent(ctx, id)
}

// approverAllowed refuses an approval by someone outside the approver
// groups the policy's Cedar policies name for the intent's call (decided
// for its proposer, as Execute decides it; a token's claims are not
// stored with an intent, so a policy that reads them is checked again when
// the intent runs).
func (r *Runtime) approverAllowed(in *Intent, approver string) *IntentError {
	if r.policy.Rules() == nil {
		return nil
	}
	entry, err := r.reg.Lookup(in.Tool, in.Version)
	if err != nil {
		return nil // it cannot run anyway: the execution says why
	}
	decl := entry.Declaration()
	rd := r.authorize(tools.Caller{Principal: in.Proposer}, &decl, in.Input, nil).Rules
	if rd == nil || rd.Effect != rules.Approval {
		return nil
	}
	if g := r.outsideGroups(approver, rd.Approvers); g != "" {
		return &IntentError{Code: "intent_approver_not_allowed", IntentID: in.ID,
			Reason: fmt.Sprintf("%s is not a member of %s, whom Cedar policy %s asks to approve this call (policy set %s); nothing was recorded",
				approver, g, strings.Join(rd.Policies, ", "), rd.Revision)}
	}
	return nil
}

// Intent returns the intent id with its status and history, or an
// *IntentError (intent_malformed, intent_not_found).
func (r *Reader) Intent(ctx context.Context, id string) (*Intent, error) {
	return readIntent(ctx, r.store, id)
}

func readIntent(ctx context.Context, store *txn.Store, id string) (*Intent, error) {
	if !ValidIntentID(id) {
		return nil, &IntentError{Code: "intent_malformed", IntentID: id, Reason: "not a lowercase UUID v4"}
	}
	b, ok, err := store.StateValue(ctx, nsIntents, id)
	if err != nil {
		return nil, &StateError{Op: "read", Err: err}
	}
	if !ok {
		return nil, &IntentError{Code: "intent_not_found", IntentID: id, Reason: "no such intent"}
	}
	return loadIntent(ctx, store, b)
}

// ValidIntentID reports whether id has the form of an intent id, a
// lowercase UUID version 4; any other is refused as intent_malformed.
func ValidIntentID(id string) bool { return uuid.Valid(id) }

func loadIntent(ctx context.Context, store *txn.Store, b []byte) (*Intent, error) {
	var id struct {
		ID string `json:"id"`
	}
	json.Unmarshal(b, &id)
	recs, err := readIntentRecords(func(ns string) (map[string][]byte, error) {
		if ns == nsIntentLogs { // refusals are keyed id/seq
			es, err := store.StateScan(ctx, ns, id.ID+"/")
			m := make(map[string][]byte, len(es))
			for _, e := range es {
				m[e.Key] = e.Value
			}
			return m, err
		}
		v, ok, err := store.StateValue(ctx, ns, id.ID)
		if err != nil || !ok {
			return nil, err
		}
		return map[string][]byte{id.ID: v}, nil
	})
	if err != nil {
		return nil, err
	}
	return recs.intent(b)
}

// intentRecords are the decisions, executions and refusals of intents.
type intentRecords struct {
	decisions, executed map[string][]byte
	refusals            map[string][]IntentRefusal // by intent id, oldest first
}

func readIntentRecords(read func(ns string) (map[string][]byte, error)) (*intentRecords, error) {
	var recs intentRecords
	var err error
	if recs.decisions, err = read(nsDecisions); err != nil {
		return nil, &StateError{Op: "read", Err: err}
	}
	if recs.executed, err = read(nsExecuted); err != nil {
		return nil, &StateError{Op: "read", Err: err}
	}
	logs, err := read(nsIntentLogs)
	if err != nil {
		return nil, &StateError{Op: "read", Err: err}
	}
	keys := make([]string, 0, len(logs))
	for k := range logs {
		keys = append(keys, k)
	}
	slices.Sort(keys) // id/<zero-padded unix nanos>-<rand>: time order within an id
	recs.refusals = make(map[string][]IntentRefusal)
	for _, k := range keys {
		id, _, _ := strings.Cut(k, "/")
		var ref IntentRefusal
		if json.Unmarshal(logs[k], &ref) == nil {
			recs.refusals[id] = append(recs.refusals[id], ref)
		}
	}
	return &recs, nil
}

// intent assembles one intent from its stored proposal and the records.
func (recs *intentRecords) intent(b []byte) (*Intent, error) {
	var rec intentRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, &StateError{Op: "read", Err: fmt.Errorf("intent record is corrupt: %w", err)}
	}
	in := &Intent{ID: rec.ID, Hash: rec.Hash, Tool: rec.Tool, Version: rec.Version, Input: rec.Input,
		Proposer: rec.Proposer, ProposedAt: rec.ProposedAt, CallID: rec.CallID, Status: IntentPending, Refusals: recs.refusals[rec.ID]}
	if d, ok := recs.decisions[rec.ID]; ok {
		in.Decision = new(IntentDecision)
		if err := json.Unmarshal(d, in.Decision); err != nil {
			return nil, &StateError{Op: "read", Err: fmt.Errorf("intent decision is corrupt: %w", err)}
		}
		in.Status = IntentRejected
		if in.Decision.Approved {
			in.Status = IntentApproved
		}
	}
	if x, ok := recs.executed[rec.ID]; ok {
		in.Execution = new(IntentExecution)
		if err := json.Unmarshal(x, in.Execution); err != nil {
			return nil, &StateError{Op: "read", Err: fmt.Errorf("intent execution record is corrupt: %w", err)}
		}
		in.Status = IntentExecuted
	}
	return in, nil
}

// IntentFilter selects intents; zero fields match all.
type IntentFilter struct {
	Status string
}

// Intents returns the intents matching f, oldest proposal first.
func (r *Reader) Intents(ctx context.Context, f IntentFilter) ([]*Intent, error) {
	return readIntents(ctx, r.store, f)
}

func readIntents(ctx context.Context, store *txn.Store, f IntentFilter) ([]*Intent, error) {
	all, err := store.StateValues(ctx, nsIntents)
	if err != nil {
		return nil, &StateError{Op: "read", Err: err}
	}
	recs, err := readIntentRecords(func(ns string) (map[string][]byte, error) { return store.StateValues(ctx, ns) })
	if err != nil {
		return nil, err
	}
	var out []*Intent
	for _, b := range all {
		in, err := recs.intent(b)
		if err != nil {
			return nil, err
		}
		if f.Status == "" || in.Status == f.Status {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b *Intent) int {
		if c := a.ProposedAt.Compare(b.ProposedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// intentFor checks, in order, that inv names an intent that may run now:
// the id and hash are well formed, the intent exists, it is approved, the
// hash matches, its tool version is still registered, and it was never
// executed. It returns the intent (whose tool, version and input the
// invocation takes) or an *IntentError; every refusal of an existing
// intent is recorded in its history.
func (r *Runtime) intentFor(ctx context.Context, inv *Invocation) (*Intent, *tools.Entry, error) {
	refuse := func(in *Intent, e *IntentError) (*Intent, *tools.Entry, error) {
		if in != nil {
			r.recordRefusal(ctx, in, principalOf(*inv), inv.CallID, e.Code)
		}
		return in, nil, e
	}
	id, hash := inv.IntentID, inv.IntentHash
	if !uuid.Valid(id) {
		return refuse(nil, &IntentError{Code: "intent_malformed", IntentID: id, Reason: "the intent id is not a lowercase UUID v4"})
	}
	if len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" {
		return refuse(nil, &IntentError{Code: "intent_malformed", IntentID: id, Reason: "the hash is not 64 lowercase hex digits (SHA-256)"})
	}
	in, err := r.Intent(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	// The stored hash is not trusted: the intent must still hash to it.
	if h, err := IntentHash(in.Tool, in.Version, in.Input); err != nil || h != in.Hash {
		return refuse(in, &IntentError{Code: "intent_corrupt", IntentID: id,
			Reason: "the stored intent no longer hashes to its hash: it was changed outside toolgate; it was not run"})
	}
	switch in.Status {
	case IntentPending:
		return refuse(in, &IntentError{Code: "intent_pending", IntentID: id, Reason: "not approved yet"})
	case IntentRejected:
		return refuse(in, &IntentError{Code: "intent_rejected", IntentID: id,
			Reason: fmt.Sprintf("rejected by %s at %s: %s", in.Decision.By, in.Decision.At.Format(time.RFC3339), in.Decision.Reason)})
	}
	if hash != in.Hash {
		return refuse(in, &IntentError{Code: "intent_hash_mismatch", IntentID: id, Reason: "the hash does not match the approved intent; it was not run"})
	}
	if (inv.Tool != "" && inv.Tool != in.Tool) || (inv.Version != "" && inv.Version != in.Version) || (len(inv.Input) > 0 && (len(inv.Input) > r.opts.MaxInputBytes || !sameJSON(inv.Input, in.Input))) {
		return refuse(in, &IntentError{Code: "intent_hash_mismatch", IntentID: id, Reason: "the invocation differs from the approved intent; it was not run"})
	}
	entry, err := r.reg.Lookup(in.Tool, in.Version)
	if err != nil {
		return refuse(in, &IntentError{Code: "intent_tool_changed", IntentID: id,
			Reason: fmt.Sprintf("%s@%s is no longer registered: %s", in.Tool, in.Version, Message(err))})
	}
	if in.Execution != nil {
		return refuse(in, r.executedError(ctx, in.ID, in.Execution))
	}
	// The approval must be proven by the audit log, not only stored: a
	// decision written below the store's API has no event (001 rule 3).
	if e := r.approvalProven(ctx, in); e != nil {
		return refuse(in, e)
	}
	return in, entry, nil
}

// executedError says an intent ran already: in flight while its execution
// is still EXECUTING, else already executed.
func (r *Runtime) executedError(ctx context.Context, id string, x *IntentExecution) *IntentError {
	if rec, err := r.store.Get(ctx, x.ExecutionID); err == nil && rec.State == string(lifecycle.Executing) {
		return &IntentError{Code: "intent_in_flight", IntentID: id, Execution: x,
			Reason: fmt.Sprintf("its execution %s started at %s and is still running", x.ExecutionID, x.At.Format(time.RFC3339Nano))}
	}
	return &IntentError{Code: "intent_already_executed", IntentID: id, Execution: x,
		Reason: fmt.Sprintf("executed at %s (execution %s); an intent runs at most once", x.At.Format(time.RFC3339Nano), x.ExecutionID)}
}

// recordRefusal adds a refused execution request to the intent's history,
// with its audit event in the same update. It is best effort: the refusal
// itself does not depend on it.
func (r *Runtime) recordRefusal(ctx context.Context, in *Intent, principal, callID, code string) {
	now := r.opts.Now().UTC()
	b, _ := json.Marshal(IntentRefusal{At: now, Principal: principal, Code: code, CallID: callID})
	key := fmt.Sprintf("%s/%020d-%s", in.ID, now.UnixNano(), uuid.New()[:8])
	ev := r.intentEvent(in.ID, in.Hash, in.Tool, in.Version, in.Input, principal, callID, now,
		&audit.IntentAction{Action: audit.IntentRefused, Code: code})
	r.store.UpdateState(context.WithoutCancel(ctx), func(v *txn.StateView) error {
		return v.Put(nsIntentLogs, key, b)
	}, ev)
}

// intentEvent is the audit event of one step of an intent's history.
func (r *Runtime) intentEvent(id, hash, tool, version string, input json.RawMessage, who, callID string, at time.Time, action *audit.IntentAction) txn.AuditEvent {
	e := r.intentAuditEvent(id, hash, tool, version, input, who, callID, at, action)
	return txn.AuditEvent{Data: e.AppendJSON(nil), Checked: true}
}

func (r *Runtime) intentAuditEvent(id, hash, tool, version string, input json.RawMessage, who, callID string, at time.Time, action *audit.IntentAction) audit.Event {
	action.ID, action.Hash = id, hash
	return audit.Event{
		EventID:     r.ids.Ordered(),
		Timestamp:   at.UnixMilli(),
		ToolID:      tool,
		ToolVersion: version,
		CallID:      callID,
		State:       strings.ToUpper(action.Action),
		UserID:      who,
		InputHash:   hashJSON(input),
		Intent:      action,
	}
}

// claimGuard is the BeginWith guard of an intent's execution: it marks
// the intent executed by this attempt in the claim's own update, or fails
// if another attempt marked it first.
func (r *Runtime) claimGuard(in *Intent, x IntentExecution) func(*txn.StateView) error {
	b, _ := json.Marshal(x)
	return func(v *txn.StateView) error {
		if prev, ok := v.Get(nsExecuted, in.ID); ok {
			var p IntentExecution
			json.Unmarshal(prev, &p)
			return &IntentError{Code: "intent_in_flight", IntentID: in.ID, Execution: &p,
				Reason: fmt.Sprintf("another execution (%s) claimed it first; an intent runs at most once", p.ExecutionID)}
		}
		return v.Put(nsExecuted, in.ID, b)
	}
}

// intentRefused answers an execution request refused before any attempt:
// for an intent that ran already, the stored outcome of its execution,
// marked replayed, with the refusal.
func (r *Runtime) intentRefused(ctx context.Context, err error) (*Result, error) {
	var ie *IntentError
	if errors.As(err, &ie) && ie.Code == "intent_already_executed" && ie.Execution != nil {
		if res, rerr := r.resultOf(ctx, []string{ie.Execution.ExecutionID}); rerr == nil {
			res.IntentID, res.Replayed = ie.IntentID, true
			return res, ie
		}
	}
	return nil, err
}

// resultOf rebuilds the Result of a call from the stored records of its
// attempts, in order: exactly these, by id, never by a call id a caller
// may have chosen to collide with someone else's.
func (r *Runtime) resultOf(ctx context.Context, executionIDs []string) (*Result, error) {
	if len(executionIDs) == 0 {
		return nil, errors.New("runtime: no attempts to replay")
	}
	res := &Result{}
	for _, id := range executionIDs {
		rec, err := r.store.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		a := Attempt{ExecutionID: rec.ExecutionID, Number: rec.Attempt, State: lifecycle.State(rec.State),
			StartedAt: rec.StartedAt, EndedAt: rec.EndedAt}
		if rec.Error != nil {
			a.Error = &ErrorInfo{Type: rec.Error.Type, Code: rec.Error.Code, Message: rec.Error.Message, Stack: rec.Error.Stack}
		}
		for _, t := range rec.Transitions {
			a.Transitions = append(a.Transitions, lifecycle.Transition{From: lifecycle.State(t.From), To: lifecycle.State(t.To),
				Event: lifecycle.Event(t.Event), At: t.At, Reason: t.Reason})
		}
		res.Attempts = append(res.Attempts, a)
		res.CallID, res.ExecutionID, res.Tool, res.Version, res.State, res.Error = rec.CallID, rec.ExecutionID, rec.ToolID, rec.ToolVersion, a.State, a.Error
		res.Output, res.TraceID = rec.Output, rec.TraceID
	}
	return res, nil
}

func principalOf(inv Invocation) string {
	if inv.Principal == "" {
		return "anonymous"
	}
	return inv.Principal
}

// sameJSON reports whether two JSON values are equal in canonical form.
func sameJSON(a, b json.RawMessage) bool { return hashJSON(a) == hashJSON(b) }
