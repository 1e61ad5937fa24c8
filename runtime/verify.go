package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/lifecycle"
	"github.com/toolgate/toolgate/txn"
)

// The audit log covers what the store shows people. The audit events of an
// attempt carry its state path, its principal, capabilities, input and
// output hashes and its error; those of an intent carry its proposal, the
// decision on it and every refused request to run it. A stored record that
// disagrees with its events, a record without events and events without a
// record are all tampering (or damage), and are reported as Discrepancy
// values: by [Reader.VerifyRecords] for a whole database, and by
// [Reader.ReadExecution], [Reader.VerifyExecution] and
// [Reader.VerifyIntent] for the one record shown.

// Discrepancy is a stored record that its audit events do not prove.
type Discrepancy struct {
	// Kind is what was checked: "execution", "intent" or "idempotency key".
	Kind string `json:"kind"`
	// ID identifies it: an execution id, an intent id, or a key.
	ID string `json:"id"`
	// Field names what disagrees, e.g. "output", "state", "record" (no
	// record for the events), "events" (no events for the record).
	Field string `json:"field"`
	// Detail says how, in the user's terms.
	Detail string `json:"detail"`
}

func (d Discrepancy) String() string {
	return fmt.Sprintf("%s %s: %s: %s", d.Kind, d.ID, d.Field, d.Detail)
}

// auditSlack widens the window of the log in which a record's events are
// searched for (see [txn.Store.AuditSearch]) on both sides of the times
// the record gives: events are committed after the time they carry, by at
// most a few fsyncs in practice. A clock set back by more than this, or a
// record whose times were changed, makes its events unfindable: the record
// is then reported as unproven, never as proven.
const auditSlack = 10 * time.Minute

// VerifyExecution checks one execution record against its audit events,
// searched for in the part of the log written while the record's attempt
// ran (its first to its last recorded time, widened by ten minutes each
// side): the cost does not grow with the log. It returns what disagrees (nothing when the log proves the
// record), or an error if the log cannot be read.
func (r *Reader) VerifyExecution(ctx context.Context, rec *txn.Record) ([]Discrepancy, error) {
	needle, from, to := executionWindow(rec)
	c := newEventCollector(rec.ExecutionID)
	if err := r.store.AuditSearch(ctx, needle, from, to, c.add); err != nil {
		return nil, err
	}
	return c.compare(rec), nil
}

// ReadExecution reads the record of an execution and checks it against its
// audit events, both from one state of the store (see
// [txn.Store.GetWithAudit]): what show and GET /v1/executions/{id} display.
// The error wraps txn.ErrNotFound or txn.ErrCorrupt for a record that is
// missing or does not decode (or names another execution).
func (r *Reader) ReadExecution(ctx context.Context, executionID string) (*txn.Record, []Discrepancy, error) {
	c := newEventCollector(executionID)
	rec, err := r.store.GetWithAudit(ctx, executionID, executionWindow, c.add)
	if err != nil {
		return nil, nil, err
	}
	return rec, c.compare(rec), nil
}

// executionWindow is where a record's events are searched for: its id, and
// its first to its last recorded time widened by auditSlack each side (to
// now while it is in flight: recovery may add events at any time).
func executionWindow(rec *txn.Record) (needle string, from, to int64) {
	first, last := rec.StartedAt, rec.StartedAt
	for _, t := range rec.Transitions {
		if t.At.Before(first) {
			first = t.At
		}
		if t.At.After(last) {
			last = t.At
		}
	}
	if rec.EndedAt.After(last) {
		last = rec.EndedAt
	}
	if !lifecycle.State(rec.State).Terminal() {
		last = time.Now()
	}
	return `"executionId":"` + rec.ExecutionID + `"`, first.Add(-auditSlack).UnixMilli(), last.Add(auditSlack).UnixMilli()
}

// eventCollector gathers the events of one execution found by a search.
type eventCollector struct {
	id   string
	evs  []audit.Event
	derr error
}

func newEventCollector(id string) *eventCollector { return &eventCollector{id: id} }

func (c *eventCollector) add(e txn.AuditEntry) bool {
	var ev audit.Event
	if err := json.Unmarshal(e.Event, &ev); err != nil {
		c.derr = fmt.Errorf("audit event %d does not decode: %w", e.Seq, err)
		return true
	}
	if ev.ExecutionID == c.id && ev.Intent == nil {
		c.evs = append(c.evs, ev)
	}
	return false
}

func (c *eventCollector) compare(rec *txn.Record) []Discrepancy {
	if c.derr != nil {
		return []Discrepancy{{Kind: "execution", ID: c.id, Field: "events", Detail: Message(c.derr)}}
	}
	return compareExecution(c.id, rec, c.evs)
}

// compareExecution compares the record stored under key with the audit
// events of its attempt, in log order.
func compareExecution(key string, rec *txn.Record, evs []audit.Event) []Discrepancy {
	var out []Discrepancy
	bad := func(field, format string, args ...any) {
		out = append(out, Discrepancy{Kind: "execution", ID: key, Field: field, Detail: fmt.Sprintf(format, args...)})
	}
	if rec == nil {
		bad("record", "the audit log holds %d events of this execution, but no record", len(evs))
		return out
	}
	if rec.ExecutionID != key {
		bad("executionId", "the record stored under this id names execution %s", rec.ExecutionID)
	}
	if len(evs) == 0 {
		bad("events", "the record (%s) has no audit events: it was not written by toolgate", rec.State)
		return out
	}
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.EventID
	}
	if !slices.Equal(ids, rec.AuditEvents) {
		bad("auditEvents", "the record lists %d event ids, the log holds %d events of this execution", len(rec.AuditEvents), len(evs))
	}
	last := evs[len(evs)-1]
	if rec.State != last.State {
		bad("state", "the record says %s, the audit log %s", rec.State, last.State)
	}
	for i, t := range rec.Transitions {
		prev := string(lifecycle.Declared)
		if i > 0 {
			prev = rec.Transitions[i-1].To
		}
		if t.From != prev || !lifecycle.Allowed(lifecycle.State(t.From), lifecycle.State(t.To)) {
			bad("transitions", "transition %d (%s -> %s) does not follow the lifecycle", i+1, t.From, t.To)
			break
		}
	}
	if n := len(evs); n > 0 && lifecycle.State(evs[n-1].State).Terminal() {
		end := evs[n-1]
		if rec.EndedAt.UnixMilli() != end.Timestamp {
			bad("endedAt", "the record ended at %s, the audit log at %s",
				rec.EndedAt.UTC().Format(time.RFC3339Nano), time.UnixMilli(end.Timestamp).UTC().Format(time.RFC3339Nano))
		}
		// The event's duration was measured on the monotonic clock, the
		// stored times are wall clock: they may differ by a slew, never by
		// a second.
		if d := rec.EndedAt.Sub(rec.StartedAt).Milliseconds(); end.Duration != nil && (d-*end.Duration > 1000 || *end.Duration-d > 1000) {
			bad("startedAt", "the record's duration is %v, the audit log's %v",
				rec.EndedAt.Sub(rec.StartedAt).Round(time.Millisecond), time.Duration(*end.Duration)*time.Millisecond)
		}
	}
	if len(rec.Transitions) != len(evs) {
		bad("transitions", "the record has %d transitions, the audit log %d", len(rec.Transitions), len(evs))
	} else {
		for i, t := range rec.Transitions {
			e := evs[i]
			if t.To != e.State {
				bad("transitions", "transition %d enters %s in the record, %s in the audit log", i+1, t.To, e.State)
				break
			}
			if t.At.UnixMilli() != e.Timestamp {
				bad("transitions", "transition %d to %s is at %s in the record, %s in the audit log", i+1, t.To,
					t.At.UTC().Format(time.RFC3339Nano), time.UnixMilli(e.Timestamp).UTC().Format(time.RFC3339Nano))
				break
			}
		}
	}
	for _, e := range evs {
		switch {
		case e.ToolID != rec.ToolID || e.ToolVersion != rec.ToolVersion:
			bad("tool", "the record names %s@%s, the audit log %s@%s", rec.ToolID, rec.ToolVersion, e.ToolID, e.ToolVersion)
		case e.CallID != rec.CallID:
			bad("callId", "the record names call %s, the audit log %s", rec.CallID, e.CallID)
		case e.Attempt != rec.Attempt:
			bad("attempt", "the record is attempt %d, the audit log %d", rec.Attempt, e.Attempt)
		case e.UserID != rec.Principal:
			bad("principal", "the record names %q, the audit log %q", rec.Principal, e.UserID)
		case !sameToken(rec.Token, e.Token):
			bad("token", "the record names the token %s, the audit log %s", showToken(auditToken(rec.Token)), showToken(e.Token))
		case !slices.Equal(e.Capabilities, nonNil(rec.Capabilities)):
			bad("capabilities", "the record lists %v, the audit log %v", rec.Capabilities, e.Capabilities)
		case e.InputHash != rec.InputHash:
			bad("inputHash", "the record's input hash is %s, the audit log's %s", short(rec.InputHash), short(e.InputHash))
		default:
			continue
		}
		break // one report per field is enough
	}
	if last.OutputHash != rec.OutputHash {
		bad("outputHash", "the record's output hash is %q, the audit log's %q", short(rec.OutputHash), short(last.OutputHash))
	}
	if len(rec.Output) > 0 || rec.OutputHash != "" {
		if h := hashJSON(rec.Output); h != last.OutputHash {
			bad("output", "the stored output hashes to %s, the audit log recorded %s", short(h), short(last.OutputHash))
		}
	}
	var recErr, evErr *audit.ErrorDetails
	if rec.Error != nil {
		recErr = &audit.ErrorDetails{Type: rec.Error.Type, Code: rec.Error.Code, Message: rec.Error.Message}
	}
	for _, e := range evs {
		if e.Error != nil {
			evErr = e.Error // the last one: the terminal event's
		}
	}
	switch {
	case (recErr == nil) != (evErr == nil):
		bad("error", "the record's error is %s, the audit log's %s", describeErr(recErr), describeErr(evErr))
	case recErr != nil && *recErr != *evErr:
		bad("error", "the record's error is %s, the audit log's %s", describeErr(recErr), describeErr(evErr))
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func describeErr(e *audit.ErrorDetails) string {
	if e == nil {
		return "none"
	}
	return fmt.Sprintf("%s/%s %q", e.Type, e.Code, runePrefix(e.Message, 80))
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// intentEvents are the audit events of one intent: its history, and the
// execution ids whose claim names it.
type intentEvents struct {
	history    []audit.Event
	executions []string
	execEvents []audit.Event // the EXECUTING event of each execution
}

// VerifyIntent checks one intent (as [Reader.Intent] returns it) against
// the audit events of its history: its proposal, the decision on it and its
// execution. It returns what disagrees, or an error if the log cannot be
// read.
func (r *Reader) VerifyIntent(ctx context.Context, in *Intent) ([]Discrepancy, error) {
	ie, err := readIntentEvents(ctx, r.store, in)
	if err != nil {
		return nil, err
	}
	return compareIntent(in, ie), nil
}

// readIntentEvents reads the audit events of in's history.
func readIntentEvents(ctx context.Context, store *txn.Store, in *Intent) (*intentEvents, error) {
	// Up to now: a decision or an execution the store no longer shows (a
	// mark removed to run it again) can be anywhere in the log after the
	// proposal; so can a refusal.
	to := time.Now()
	ie := &intentEvents{}
	err := store.AuditSearch(ctx, in.ID, in.ProposedAt.Add(-auditSlack).UnixMilli(), to.Add(auditSlack).UnixMilli(), func(e txn.AuditEntry) bool {
		var ev audit.Event
		if json.Unmarshal(e.Event, &ev) == nil {
			ie.add(in.ID, ev)
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	return ie, nil
}

// first returns the first proposal and the first decision of the history.
func (ie *intentEvents) first() (proposal, decision *audit.Event) {
	for i := range ie.history {
		e := &ie.history[i]
		switch e.Intent.Action {
		case audit.IntentProposed:
			if proposal == nil {
				proposal = e
			}
		case audit.IntentApproved, audit.IntentRejected:
			if decision == nil {
				decision = e
			}
		}
	}
	return proposal, decision
}

func (ie *intentEvents) add(id string, ev audit.Event) {
	switch {
	case ev.Intent != nil && ev.Intent.ID == id && ev.Intent.Action == audit.IntentExecuted:
		// An execution mark imported from an earlier version.
		ie.executions = append(ie.executions, ev.ExecutionID)
		ie.execEvents = append(ie.execEvents, ev)
	case ev.Intent != nil && ev.Intent.ID == id:
		ie.history = append(ie.history, ev)
	case ev.IntentID == id && ev.State == string(lifecycle.Executing):
		ie.executions = append(ie.executions, ev.ExecutionID)
		ie.execEvents = append(ie.execEvents, ev)
	}
}

// compareIntent compares a stored intent with its events.
func compareIntent(in *Intent, ie *intentEvents) []Discrepancy {
	var out []Discrepancy
	bad := func(field, format string, args ...any) {
		out = append(out, Discrepancy{Kind: "intent", ID: in.ID, Field: field, Detail: fmt.Sprintf(format, args...)})
	}
	proposal, decision := ie.first()
	if proposal == nil {
		bad("proposal", "the intent has no proposal in the audit log: it was not proposed through toolgate")
	} else {
		inputHash := hashJSON(in.Input)
		switch {
		case proposal.Intent.Hash != in.Hash:
			bad("hash", "the stored hash is %s, the proposal's %s", short(in.Hash), short(proposal.Intent.Hash))
		case proposal.ToolID != in.Tool || proposal.ToolVersion != in.Version:
			bad("tool", "the intent names %s@%s, its proposal %s@%s", in.Tool, in.Version, proposal.ToolID, proposal.ToolVersion)
		case proposal.InputHash != inputHash:
			bad("input", "the stored input hashes to %s, the proposal's to %s", short(inputHash), short(proposal.InputHash))
		case proposal.UserID != in.Proposer:
			bad("proposer", "the intent names %q, its proposal %q", in.Proposer, proposal.UserID)
		case proposal.CallID != in.CallID:
			bad("callId", "the intent says call %q proposed it, its proposal %q", in.CallID, proposal.CallID)
		case proposal.Timestamp != in.ProposedAt.UnixMilli():
			bad("proposedAt", "the intent says it was proposed at %s, its proposal %s",
				in.ProposedAt.UTC().Format(time.RFC3339Nano), time.UnixMilli(proposal.Timestamp).UTC().Format(time.RFC3339Nano))
		}
	}
	switch d := in.Decision; {
	case d == nil && decision != nil:
		bad("decision", "the audit log records it %s by %q, the store holds no decision", decision.Intent.Action, decision.UserID)
	case d != nil && decision == nil:
		verb := audit.IntentRejected
		if d.Approved {
			verb = audit.IntentApproved
		}
		bad("decision", "the store says %s by %q, the audit log holds no decision", verb, d.By)
	case d != nil:
		verb := audit.IntentRejected
		if d.Approved {
			verb = audit.IntentApproved
		}
		switch {
		case verb != decision.Intent.Action:
			bad("decision", "the store says %s, the audit log %s", verb, decision.Intent.Action)
		case d.By != decision.UserID:
			bad("decision", "the store names %q as the one who decided, the audit log %q", d.By, decision.UserID)
		case d.Reason != decision.Intent.Reason:
			bad("decision", "the stored reason differs from the audit log's")
		case d.Via != decision.Intent.Via:
			bad("decision", "the store says it was decided via %q, the audit log via %q", d.Via, decision.Intent.Via)
		case d.Signer != decision.Intent.Signer:
			bad("decision", "the store says it was signed by %q, the audit log by %q", d.Signer, decision.Intent.Signer)
		case d.At.UnixMilli() != decision.Timestamp:
			bad("decision", "the store says it was decided at %s, the audit log %s",
				d.At.UTC().Format(time.RFC3339Nano), time.UnixMilli(decision.Timestamp).UTC().Format(time.RFC3339Nano))
		case decision.Intent.Hash != in.Hash:
			bad("decision", "the decision in the audit log was on hash %s, the intent's is %s", short(decision.Intent.Hash), short(in.Hash))
		}
	}
	if decision != nil {
		// A signed decision must verify, whoever signed it: whether its
		// key counts is the policy's (approverKeys.trusted).
		if _, err := audit.VerifyDecision(decision); err != nil && !errors.Is(err, audit.ErrUnsigned) {
			bad("signature", "the decision's signature does not verify: %s", Message(err))
		}
	}
	switch x := in.Execution; {
	case x == nil && len(ie.executions) > 0:
		bad("execution", "the audit log records execution %s of it, the store none", ie.executions[0])
	case x != nil && !slices.Contains(ie.executions, x.ExecutionID):
		bad("execution", "the store says execution %s ran it, the audit log does not", x.ExecutionID)
	case len(ie.executions) > 1:
		bad("execution", "the audit log records %d executions of it", len(ie.executions))
	case x != nil:
		e := ie.execEvents[slices.Index(ie.executions, x.ExecutionID)]
		switch {
		case e.UserID != x.Principal:
			bad("execution", "the store says %q ran it, the audit log %q", x.Principal, e.UserID)
		case e.CallID != x.CallID:
			bad("execution", "the store says it ran as call %s, the audit log as call %s", x.CallID, e.CallID)
		case e.Timestamp != x.At.UnixMilli():
			bad("execution", "the store says it ran at %s, the audit log at %s",
				x.At.UTC().Format(time.RFC3339Nano), time.UnixMilli(e.Timestamp).UTC().Format(time.RFC3339Nano))
		}
	}
	// Every refused request, in order, as its event says.
	var refused []audit.Event
	for _, e := range ie.history {
		if e.Intent.Action == audit.IntentRefused {
			refused = append(refused, e)
		}
	}
	if len(refused) != len(in.Refusals) {
		bad("refusals", "the store lists %d refused requests, the audit log %d", len(in.Refusals), len(refused))
	} else {
		// Concurrent refusals may commit in another order than their
		// times: compare both sorted by time, who and why.
		refusals := slices.Clone(in.Refusals)
		slices.SortStableFunc(refusals, func(a, b IntentRefusal) int {
			return cmp.Or(cmp.Compare(a.At.UnixMilli(), b.At.UnixMilli()), strings.Compare(a.Principal, b.Principal), strings.Compare(a.Code, b.Code), strings.Compare(a.CallID, b.CallID))
		})
		slices.SortStableFunc(refused, func(a, b audit.Event) int {
			return cmp.Or(cmp.Compare(a.Timestamp, b.Timestamp), strings.Compare(a.UserID, b.UserID), strings.Compare(a.Intent.Code, b.Intent.Code), strings.Compare(a.CallID, b.CallID))
		})
		for i, r := range refusals {
			e := refused[i]
			if r.Principal != e.UserID || r.Code != e.Intent.Code || r.At.UnixMilli() != e.Timestamp || r.CallID != e.CallID {
				bad("refusals", "refused request %d (%s by %q) differs from the audit log's (%s by %q)", i+1, r.Code, r.Principal, e.Intent.Code, e.UserID)
				break
			}
		}
	}
	return out
}

// approvalProven checks, before an approved intent runs, that its proposal
// and approval are in the audit log as stored: an approval written below
// the store's API has no event, and is refused.
func (r *Runtime) approvalProven(ctx context.Context, in *Intent) *IntentError {
	ie, err := readIntentEvents(ctx, r.store, in)
	var ds []Discrepancy
	if err == nil {
		ds = compareIntent(in, ie)
	}
	// Refusals are history, recorded best effort and concurrently: not
	// what an approval rests on.
	ds = slices.DeleteFunc(ds, func(d Discrepancy) bool { return d.Field == "refusals" })
	if err == nil && slices.ContainsFunc(ds, func(d Discrepancy) bool { return d.Field == "execution" }) {
		// The log records an execution the intent as read does not have:
		// another call claimed it since it was read (the store has it now:
		// refused as such), or its executed mark was removed outside
		// toolgate to run it again (the store still lacks it: refused as
		// corrupt below, never run twice).
		if now, rerr := r.Intent(ctx, in.ID); rerr == nil && now.Execution != nil {
			return r.executedError(ctx, in.ID, now.Execution)
		}
	}
	if err == nil && len(ds) == 0 {
		// The approval is in the log as stored; with approval keys in the
		// policy, it must also be signed by one listed for its approver.
		if _, decision := ie.first(); decision != nil {
			if why := r.approvers.trusted(decision); why != "" {
				return &IntentError{Code: "intent_unsigned", IntentID: in.ID, Reason: why + "; it was not run"}
			}
		}
		return nil
	}
	reason := "its proposal and approval could not be read from the audit log"
	if err == nil {
		var parts []string
		for _, d := range ds {
			parts = append(parts, d.Field+": "+d.Detail)
		}
		reason = "the stored intent disagrees with the audit log (" + strings.Join(parts, "; ") + ")"
	} else if errors.Is(err, txn.ErrCorrupt) {
		reason = "the audit log is damaged: " + Message(err)
	}
	return &IntentError{Code: "intent_corrupt", IntentID: in.ID, Reason: reason + "; it was not run"}
}

// RecordsReport sums up [Reader.VerifyRecords].
type RecordsReport struct {
	Events      uint64 // audit events read
	Executions  int    // execution records checked
	Intents     int    // intents checked
	Keys        int    // idempotency keys checked
	Discrepancy int    // discrepancies reported
}

// verifyPage is how many audit entries VerifyRecords reads at once.
const verifyPage = 4096

// VerifyRecords checks every execution record and every intent of the
// store against the audit log, calling report for each discrepancy (an
// error from report stops it). It reads the log once, in pages; memory is
// bounded by the attempts in flight at any point of the log (an attempt's
// events are held from its first to its terminal event, when its record is
// read and compared) and by the number of intents, not by the size of the
// log. Records without events are found by counting, and named by a
// further pass in bounded chunks only when the counts differ.
//
// The Reader of a Runtime also reports each approval that the runtime's
// policy would not trust (see [Reader.VerifyRecordsUnder]); one made by
// [NewReader] checks no signature.
//
// It is meant for a store that no one writes to meanwhile (toolgate audit
// verify opens the database read-only): a call that runs during the check
// can leave records and events that one side of it saw and the other did
// not, reported as discrepancies. The store may be open read-only; the
// log's own chain is checked by [Reader.VerifyAuditLog], not here.
func (r *Reader) VerifyRecords(ctx context.Context, report func(Discrepancy) error) (*RecordsReport, error) {
	return verifyRecords(ctx, r.store, r.approvers, report)
}

// VerifyRecordsUnder is [Reader.VerifyRecords] under policy: when policy
// lists approval keys (capability.Policy.ApprovalKeys) it also reports each
// approval that is not signed by a key listed for its approver (field
// "signature"): an intent a runtime under that policy would refuse to run.
func (r *Reader) VerifyRecordsUnder(ctx context.Context, policy *capability.Policy, report func(Discrepancy) error) (*RecordsReport, error) {
	keys, err := approvalKeys(policy)
	if err != nil {
		return nil, err
	}
	return verifyRecords(ctx, r.store, keys, report)
}

func verifyRecords(ctx context.Context, store *txn.Store, approvers approverKeys, report func(Discrepancy) error) (*RecordsReport, error) {
	rep := &RecordsReport{}
	emit := func(ds []Discrepancy) error {
		for _, d := range ds {
			rep.Discrepancy++
			if err := report(d); err != nil {
				return err
			}
		}
		return nil
	}
	open := map[string][]audit.Event{}
	intents := map[string]*intentEvents{}
	intentOf := func(id string) *intentEvents {
		ie := intents[id]
		if ie == nil {
			ie = &intentEvents{}
			intents[id] = ie
		}
		return ie
	}
	matched := 0
	check := func(id string, evs []audit.Event) error {
		rec, err := store.Get(ctx, id)
		switch {
		case errors.Is(err, txn.ErrNotFound):
			rec = nil
		case errors.Is(err, txn.ErrCorrupt):
			return emit([]Discrepancy{{Kind: "execution", ID: id, Field: "record", Detail: Message(err)}})
		case err != nil:
			return err
		default:
			matched++
		}
		return emit(compareExecution(id, rec, evs))
	}
	err := auditPages(ctx, store, func(page []txn.AuditEntry) (bool, error) {
		var closed []string
		for _, e := range page {
			rep.Events++
			var ev audit.Event
			if json.Unmarshal(e.Event, &ev) != nil {
				continue // the chain verifier names an event that does not decode
			}
			if ev.Intent != nil {
				intentOf(ev.Intent.ID).add(ev.Intent.ID, ev)
				continue
			}
			if ev.ExecutionID == "" {
				continue
			}
			if ev.IntentID != "" {
				intentOf(ev.IntentID).add(ev.IntentID, ev)
			}
			open[ev.ExecutionID] = append(open[ev.ExecutionID], ev)
			if lifecycle.State(ev.State).Terminal() {
				closed = append(closed, ev.ExecutionID)
			}
		}
		for _, id := range closed {
			evs, ok := open[id]
			if !ok {
				continue // two terminal events in one page: compared once, with both
			}
			delete(open, id)
			if err := check(id, evs); err != nil {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return rep, err
	}
	// Attempts still in flight: their claims.
	ids := make([]string, 0, len(open))
	for id := range open {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := check(id, open[id]); err != nil {
			return rep, err
		}
	}
	rep.Executions = matched

	// Records that no event names (a record stored under an id its events
	// do not name is one of them), and records that do not decode.
	total := 0
	var misfiled []Discrepancy
	err = store.WalkRecords(ctx, "", func(key string, rec *txn.Record, err error) bool {
		total++
		switch {
		case err != nil:
			misfiled = append(misfiled, Discrepancy{Kind: "execution", ID: key, Field: "record", Detail: Message(err)})
		}
		return len(misfiled) < 1000
	})
	if err != nil {
		return rep, err
	}
	if err := emit(misfiled); err != nil {
		return rep, err
	}
	if total != matched {
		if err := unmatchedRecords(ctx, store, emit); err != nil {
			return rep, err
		}
	}

	if err := verifyIdempotency(ctx, store, rep, emit); err != nil {
		return rep, err
	}

	// Intents: the stored ones against their events, then events of
	// intents that are not stored.
	all, err := readIntents(ctx, store, IntentFilter{})
	if err != nil {
		return rep, err
	}
	for _, in := range all {
		rep.Intents++
		ie := intents[in.ID]
		if ie == nil {
			ie = &intentEvents{}
		}
		delete(intents, in.ID)
		ds := compareIntent(in, ie)
		if _, decision := ie.first(); decision != nil {
			if why := approvers.trusted(decision); why != "" {
				ds = append(ds, Discrepancy{Kind: "intent", ID: in.ID, Field: "signature", Detail: why})
			}
		}
		if err := emit(ds); err != nil {
			return rep, err
		}
	}
	gone := make([]string, 0, len(intents))
	for id := range intents {
		gone = append(gone, id)
	}
	slices.Sort(gone)
	for _, id := range gone {
		if err := emit([]Discrepancy{{Kind: "intent", ID: id, Field: "record",
			Detail: fmt.Sprintf("the audit log holds %d events of this intent, but no intent is stored", len(intents[id].history)+len(intents[id].executions))}}); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// auditPages reads the whole audit log, verifyPage entries at a time, each
// page in its own read, and passes each page to fn until fn returns false
// or an error: the walk of every check here, in bounded memory, and never
// inside a read transaction the checks' own reads would nest in.
func auditPages(ctx context.Context, store *txn.Store, fn func([]txn.AuditEntry) (bool, error)) error {
	for from := uint64(1); ; {
		page, err := store.AuditLog(ctx, from, verifyPage)
		if err != nil || len(page) == 0 {
			return err
		}
		if more, err := fn(page); err != nil || !more {
			return err
		}
		from = page[len(page)-1].Seq + 1
	}
}

// unmatchedChunk bounds how many record ids unmatchedRecords holds at once.
const unmatchedChunk = 1 << 16

// unmatchedRecords names the records that no audit event names: it takes
// the record ids a chunk at a time and reads the log once per chunk.
func unmatchedRecords(ctx context.Context, store *txn.Store, emit func([]Discrepancy) error) error {
	after := ""
	for {
		chunk := map[string]string{} // id -> state
		last := ""
		err := store.WalkRecords(ctx, after, func(key string, rec *txn.Record, err error) bool {
			if err == nil {
				chunk[key] = rec.State
			}
			last = key
			return len(chunk) < unmatchedChunk
		})
		if err != nil {
			return err
		}
		if last == "" {
			return nil
		}
		err = auditPages(ctx, store, func(page []txn.AuditEntry) (bool, error) {
			for _, e := range page {
				var ev struct {
					ExecutionID string `json:"executionId"`
				}
				if json.Unmarshal(e.Event, &ev) == nil {
					delete(chunk, ev.ExecutionID)
				}
			}
			return len(chunk) > 0, nil
		})
		if err != nil {
			return err
		}
		ids := make([]string, 0, len(chunk))
		for id := range chunk {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			if err := emit([]Discrepancy{{Kind: "execution", ID: id, Field: "events",
				Detail: fmt.Sprintf("the record (%s) has no audit events: it was not written by toolgate", chunk[id])}}); err != nil {
				return err
			}
		}
		after = last
	}
}

// verifyIdempotency checks every settled idempotency key against the audit
// events of the attempts whose result a replay returns: each must carry the
// key, its principal, tool and call. A key pointed at another call's
// attempts would replay someone else's result. Keys are read a chunk at a
// time, with one pass over the log per chunk.
func verifyIdempotency(ctx context.Context, store *txn.Store, rep *RecordsReport, emit func([]Discrepancy) error) error {
	type want struct {
		scope string
		rec   idemRecord
	}
	after := ""
	for {
		page, err := store.StatePage(ctx, nsIdem, after, unmatchedChunk)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
		after = page[len(page)-1].Key
		byExec := map[string][]*want{} // execution id -> the keys naming it
		var keys []*want
		for _, e := range page {
			rep.Keys++
			w := &want{scope: e.Key}
			if err := json.Unmarshal(e.Value, &w.rec); err != nil {
				if err := emit([]Discrepancy{{Kind: "idempotency key", ID: e.Key, Field: "record", Detail: "the stored key does not decode: " + Message(err)}}); err != nil {
					return err
				}
				continue
			}
			if w.rec.State != idemDone {
				continue // running: its call's records are checked as executions
			}
			if idemScope(w.rec.Principal, w.rec.Tool, w.rec.Key) != e.Key {
				if err := emit([]Discrepancy{{Kind: "idempotency key", ID: w.rec.Key, Field: "scope",
					Detail: fmt.Sprintf("the key of %q for %s is stored under another principal's or tool's entry", w.rec.Principal, w.rec.Tool)}}); err != nil {
					return err
				}
				continue
			}
			keys = append(keys, w)
			for _, id := range w.rec.ExecutionIDs {
				byExec[id] = append(byExec[id], w)
			}
		}
		seen := map[*want]map[string]bool{}
		bad := map[*want]string{}
		err = auditPages(ctx, store, func(page []txn.AuditEntry) (bool, error) {
			for _, e := range page {
				var ev audit.Event
				if json.Unmarshal(e.Event, &ev) != nil || ev.Intent != nil {
					continue
				}
				for _, w := range byExec[ev.ExecutionID] {
					if seen[w] == nil {
						seen[w] = map[string]bool{}
					}
					seen[w][ev.ExecutionID] = true
					switch {
					case ev.IdempotencyKey != w.rec.Key:
						bad[w] = fmt.Sprintf("execution %s was not made with this key", ev.ExecutionID)
					case ev.UserID != w.rec.Principal || ev.ToolID != w.rec.Tool:
						bad[w] = fmt.Sprintf("execution %s was made by %q with %s, the key is %q's for %s", ev.ExecutionID, ev.UserID, ev.ToolID, w.rec.Principal, w.rec.Tool)
					case ev.CallID != w.rec.CallID:
						bad[w] = fmt.Sprintf("execution %s belongs to call %s, the key to call %s", ev.ExecutionID, ev.CallID, w.rec.CallID)
					}
				}
			}
			return len(byExec) > 0, nil
		})
		if err != nil {
			return err
		}
		for _, w := range keys {
			detail, ok := bad[w]
			if !ok && len(seen[w]) != len(w.rec.ExecutionIDs) {
				detail, ok = "a replay would return attempts that have no audit events", true
			}
			if ok {
				if err := emit([]Discrepancy{{Kind: "idempotency key", ID: w.rec.Key, Field: "executions", Detail: detail}}); err != nil {
					return err
				}
			}
		}
	}
}

// nsMeta holds the runtime's own markers; intentsAudited is set once every
// stored intent is under the audit log.
const (
	nsMeta         = reservedPrefix + "meta"
	intentsAudited = "intents.audited"
	intentsIndexed = "intents.indexed" // the index of calls (IntentFor) covers every intent
)

// auditLegacyIntents brings the intents of a database written by a version
// that did not audit them under the audit log, once, at the first open by
// this version: each stored proposal, decision, execution mark and refused
// request gets its event (Code "imported", with its original time), in one
// update with the marker. Without it every such intent would be reported as
// changed outside toolgate, and an approved one would never run.
//
// It imports only a log that holds no intent event at all: a database that
// this version has written never imports again, even if the marker was
// removed, so intents written below the store's API later are never
// laundered into the log. Intents stored before the upgrade are trusted as
// they were found: nothing proved them before.
func (r *Runtime) auditLegacyIntents(ctx context.Context) error {
	if _, ok, err := r.store.StateValue(ctx, nsMeta, intentsAudited); err != nil || ok {
		return err
	}
	audited := false
	if err := r.store.AuditSearch(ctx, `"intent":{"id":`, -1<<62, 1<<62, func(txn.AuditEntry) bool {
		audited = true
		return true
	}); err != nil {
		return err
	}
	var events []txn.AuditEvent
	if !audited {
		all, err := readIntents(ctx, r.store, IntentFilter{})
		if err != nil {
			return err
		}
		for _, in := range all {
			events = append(events, r.intentEvent(in.ID, in.Hash, in.Tool, in.Version, in.Input, in.Proposer, in.CallID, in.ProposedAt,
				&audit.IntentAction{Action: audit.IntentProposed, Code: "imported"}))
			if d := in.Decision; d != nil {
				a := &audit.IntentAction{Action: audit.IntentRejected, Reason: d.Reason, Via: d.Via, Code: "imported"}
				if d.Approved {
					a.Action = audit.IntentApproved
				}
				events = append(events, r.intentEvent(in.ID, in.Hash, in.Tool, in.Version, in.Input, d.By, "", d.At, a))
			}
			for _, ref := range in.Refusals {
				events = append(events, r.intentEvent(in.ID, in.Hash, in.Tool, in.Version, in.Input, ref.Principal, ref.CallID, ref.At,
					&audit.IntentAction{Action: audit.IntentRefused, Code: ref.Code}))
			}
			if x := in.Execution; x != nil {
				e := audit.Event{EventID: r.ids.Ordered(), Timestamp: x.At.UnixMilli(), ToolID: in.Tool, ToolVersion: in.Version,
					ExecutionID: x.ExecutionID, CallID: x.CallID, State: "EXECUTED", UserID: x.Principal, InputHash: hashJSON(in.Input),
					Intent: &audit.IntentAction{ID: in.ID, Hash: in.Hash, Action: audit.IntentExecuted, Code: "imported"}}
				events = append(events, txn.AuditEvent{Data: e.AppendJSON(nil), Checked: true})
			}
		}
	}
	return r.store.UpdateState(ctx, func(v *txn.StateView) error {
		return v.Put(nsMeta, intentsAudited, []byte(r.opts.Now().UTC().Format(time.RFC3339Nano)))
	}, events...)
}

func sameToken(r *txn.TokenRef, e *audit.Token) bool {
	if r == nil || e == nil {
		return r == nil && e == nil
	}
	return r.Issuer == e.Issuer && r.Subject == e.Subject && r.SHA256 == e.SHA256
}

func showToken(t *audit.Token) string {
	if t == nil {
		return "(none)"
	}
	return fmt.Sprintf("of %s for %q (sha256 %s)", t.Issuer, t.Subject, short(t.SHA256))
}
