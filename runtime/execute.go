package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/uuid"
	"github.com/toolgate/toolgate/lifecycle"
	"github.com/toolgate/toolgate/rules"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// errLimit is the cancel cause of an attempt's context when the tool's max
// execution time passes.
var errLimit = errors.New("runtime: max execution time reached")

// Execute runs one invocation through the RFC-0001 lifecycle and returns its
// result. Each attempt is recorded in the database with every transition.
//
// When the invocation ends in any state but COMPLETED, Execute returns the
// result and an error of one of the RFC-0001 7.1 classes (ErrValidation,
// ErrAuthorization, ErrResource, ErrExecution, ErrTimeout, ErrState; match
// with errors.Is, unpack with errors.As). An unknown tool or version returns
// a nil result and an error wrapping tools.ErrToolNotFound or
// tools.ErrVersionNotFound, and records nothing, since there is no
// declaration to hold the invocation to. So does a principal or call id
// that cannot be recorded as it is (see [MaxPrincipal] and [MaxCallID]): a
// *ValidationError of phase "invocation". After Close it returns ErrClosed.
//
// Execute returns when the attempt's deadline passes even if the tool
// ignores its context; such a tool's goroutine is abandoned (Go cannot stop
// it), its state transaction is already rolled back and refuses further
// use, and its Env opens nothing more. See "Abandoned tools" in the package
// documentation.
func (r *Runtime) Execute(ctx context.Context, inv Invocation) (_ *Result, err error) {
	if err := r.enter(); err != nil {
		return nil, err
	}
	defer r.leave()
	if err := r.store.Err(); err != nil {
		return nil, &StateError{Op: "open", Err: err} // poisoned: refuse rather than guess what is durable
	}
	if inv.Principal == "" {
		inv.Principal = "anonymous"
	}
	if inv.CallID == "" {
		inv.CallID = uuid.New()
	}
	if err := checkIdentity(inv.Principal, inv.CallID); err != nil {
		return nil, err // before anything is recorded, an intent's refusal included
	}
	if err := checkToken(inv.Token); err != nil {
		return nil, err
	}
	var (
		intent *Intent
		entry  *tools.Entry
	)
	if inv.IntentID != "" || inv.IntentHash != "" {
		if intent, entry, err = r.intentFor(ctx, &inv); err != nil {
			return r.intentRefused(ctx, err)
		}
		inv.Tool, inv.Version, inv.Input = intent.Tool, intent.Version, intent.Input
	} else if entry, err = r.reg.Lookup(inv.Tool, inv.Version); err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopAbort := context.AfterFunc(r.stop, func() { cancel(ErrClosed) })
	defer stopAbort()

	c := &call{r: r, entry: entry, decl: entry.Declaration(), inv: &inv, inputHash: inputHash(inv.Input, r.opts.MaxInputBytes), intent: intent}
	if inv.Limits != nil {
		c.limitsErr = lowerLimits(&c.decl.ResourceLimits, inv.Limits)
	}
	if inv.IdempotencyKey != "" {
		h, replayed, err := c.claimKey(ctx)
		if replayed != nil || err != nil {
			return replayed, err // nothing ran, nothing to trace; a replayed failure keeps its error
		}
		c.idem = h
	}
	tel := r.tel.on()
	if tel {
		ctx = c.startTelemetry(ctx)
	}
	res := &Result{CallID: inv.CallID, Tool: c.decl.ID, Version: c.decl.Version, IntentID: inv.IntentID, IdempotencyKey: inv.IdempotencyKey}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		c.traceID = sc.TraceID().String()
		res.TraceID = c.traceID
	}
	if tel {
		defer c.finishTelemetry(ctx, res) // deferred: spans end even if a bug panics here
	}
	if c.idem != nil {
		defer func() {
			if kerr := c.finishKey(ctx, res); kerr != nil && err == nil {
				// The result stands; the key is settled when the database
				// is next opened.
				err = &StateError{Op: "record idempotency key", Err: kerr}
			}
		}()
	}
	err = c.invoke(ctx, res)
	return res, err
}

// Decide makes rule 2's capability decision for a call of e's tool with
// input (valid against its input schema) as Execute would, and records
// nothing: on what the input requires (tools.Declaration.Decide, relative
// paths taken from the runtime's working directory), under the runtime's
// policy plus grants. It is for a caller that checks ahead of Execute (an
// approval flow); Execute decides again.
func (r *Runtime) Decide(principal string, e *tools.Entry, input json.RawMessage, grants []capability.Capability) capability.Decision {
	return r.DecideFor(tools.Caller{Principal: principal}, e, input, grants).Decision
}

// DecideFor is [Runtime.Decide] for a caller with an OAuth token's scopes
// and claims, returning the whole decision: with the policy's Cedar
// policies' part (Rules), which says whether the call needs a person's
// approval (tools.Decision.NeedsApproval).
func (r *Runtime) DecideFor(caller tools.Caller, e *tools.Entry, input json.RawMessage, grants []capability.Capability) tools.Decision {
	decl := e.Declaration()
	return r.authorize(caller, &decl, input, grants)
}

// authorize is rule 2's decision on what input requires
// (tools.Declaration.Decide): the declared capabilities, those its
// validated fields scope (tools.InputCapability), and where its
// filesystem paths lead, looked up as the handles will look them up. Its
// Reach is what the tool's handles may then reach. An input that cannot
// name a scope denies, saying why.
func (r *Runtime) authorize(caller tools.Caller, decl *tools.Declaration, input json.RawMessage, grants []capability.Capability) tools.Decision {
	return decl.DecideFor(r.policy, caller, decl.ID, input, grants, r.opts.WorkDir, r.opts.Now())
}

// callerOf is who makes inv, as the policy's Cedar policies see it.
func callerOf(inv *Invocation) tools.Caller {
	return tools.Caller{Principal: inv.Principal, Scopes: inv.Scopes, Claims: inv.Claims}
}

// extras are the attempt's audit event extras; decided says whether the
// events include the capability decision's.
func (c *call) extras(decided bool) eventExtras {
	x := eventExtras{idemKey: c.inv.IdempotencyKey, bypass: c.inv.BypassIdempotency && c.inv.IdempotencyKey != ""}
	if c.intent != nil {
		x.intentID = c.intent.ID
	}
	if decided {
		x.decision = c.decision
	}
	return x
}

// invoke runs attempts until one completes or the retry policy gives up,
// filling res.
func (c *call) invoke(ctx context.Context, res *Result) error {
	r := c.r
	for n := 1; ; n++ {
		att, out, err := c.attempt(ctx, n)
		res.Attempts = append(res.Attempts, att)
		res.ExecutionID, res.State, res.Error, res.Output = att.ExecutionID, att.State, att.Error, out
		if err == nil {
			return nil
		}
		if c.intent != nil || !r.retryable(&c.decl, err, n) || !sleep(ctx, r.backoff(n)) { // an intent runs once: never retried
			return err
		}
	}
}

// lowerLimits applies an invocation's limits to the declared ones. A limit
// may only be lowered: a zero field keeps the declared limit, and a value
// above the declared one (or negative) is a ValidationError.
func lowerLimits(declared *tools.ResourceLimits, inv *tools.ResourceLimits) error {
	l := *declared
	var errs []error
	errs = lower(errs, "maxExecutionTime", &l.MaxExecutionTime, inv.MaxExecutionTime, time.Duration.String)
	errs = lower(errs, "maxMemory", &l.MaxMemory, inv.MaxMemory, byteCount)
	errs = lower(errs, "maxFileSize", &l.MaxFileSize, inv.MaxFileSize, byteCount)
	errs = lower(errs, "maxOutputBytes", &l.MaxOutputBytes, inv.MaxOutputBytes, byteCount)
	if inv.MaxConcurrent != 0 {
		errs = append(errs, errors.New("maxConcurrent is the tool's own limit; an invocation cannot set it"))
	}
	if err := errors.Join(errs...); err != nil {
		return &ValidationError{Phase: "limits", Err: err}
	}
	*declared = l
	return nil
}

// lower sets *limit to v if v lowers it (0 keeps it), or appends why not.
func lower[T ~int64](errs []error, name string, limit *T, v T, show func(T) string) []error {
	switch {
	case v == 0:
	case v < 0:
		errs = append(errs, fmt.Errorf("%s %s is negative", name, show(v)))
	case *limit > 0 && v > *limit:
		errs = append(errs, fmt.Errorf("%s %s is more than the declared %s; an invocation may only lower a limit", name, show(v), show(*limit)))
	default:
		*limit = v
	}
	return errs
}

func byteCount(n int64) string { return strconv.FormatInt(n, 10) + " bytes" }

// retryable applies RFC-0001 7.3: idempotent tools only, transient
// ResourceErrors and TimeoutErrors only, fewer than MaxRetries retries so
// far, and never once the caller has given up.
func (r *Runtime) retryable(decl *tools.Declaration, err error, attempt int) bool {
	if !decl.Idempotent || attempt-1 >= r.opts.Retry.MaxRetries || errors.Is(err, ErrState) {
		return false // a StateError joined to the cause (the record could not be written) is never retried
	}
	switch c := classOf(err).(type) {
	case *TimeoutError:
		return true
	case *ResourceError:
		return c.Transient
	}
	return false
}

// backoff returns the wait before retry number n (1-based): exponential,
// capped, with jitter over its upper half so concurrent callers spread out.
func (r *Runtime) backoff(n int) time.Duration {
	base, max := r.opts.Retry.BaseDelay, r.opts.Retry.MaxDelay
	d := max
	if n < 63 && base <= max>>(n-1) { // no overflow: base<<(n-1) <= max
		d = base << (n - 1)
	}
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits d or until ctx ends, reporting whether it waited the full d.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// call is one invocation in progress.
type call struct {
	r         *Runtime
	entry     *tools.Entry
	decl      tools.Declaration // with the invocation's lowered limits
	inv       *Invocation
	limitsErr error   // the invocation's limits are refused (rule 1)
	inputHash string  // of the canonical input, the same for every attempt
	intent    *Intent // the approved intent this call executes, if any
	idem      *idem   // the call's hold on its idempotency key, if any

	// Set by rule 2 for the attempt in progress.
	decision *audit.Decision         // the capability decision, for the audit log
	grants   []capability.Capability // what the attempt's handles expose
	stage    *stager                 // the attempt's staged files, once it executes

	// Telemetry, set only when the runtime has it.
	start   time.Time     // when the invocation began
	span    trace.Span    // the invocation's span, when it is recording
	traceID string        // of the span context in effect, when valid
	spans   *attemptSpans // the attempt in progress's spans, when traced
}

// attempt is one run through the lifecycle, traced when the invocation is.
func (c *call) attempt(ctx context.Context, n int) (att Attempt, out json.RawMessage, err error) {
	r := c.r
	m := lifecycle.New(r.opts.Now)
	rec := &txn.Record{
		ExecutionID: r.ids.Ordered(),
		CallID:      c.inv.CallID,
		TraceID:     c.traceID,
		Attempt:     n,
		ToolID:      c.decl.ID,
		ToolVersion: c.decl.Version,
		Principal:   c.inv.Principal,
		InputHash:   c.inputHash,
		StartedAt:   m.Created(),
		Token:       tokenRef(c.inv.Token),
	}
	c.decision, c.grants, c.stage = nil, nil, nil // decided afresh by each attempt
	if c.span == nil {
		return c.enforce(ctx, m, rec)
	}
	ctx, c.spans = c.startAttempt(ctx, rec.ExecutionID, n)
	defer func() {
		c.spans.finish(&att)
		c.spans = nil
	}()
	return c.enforce(ctx, m, rec)
}

// enforce applies enforcement rules 1 to 11 in RFC order. Each phase is
// traced (c.spans; nil-safe) from its start to the transition it ends in.
func (c *call) enforce(ctx context.Context, m *lifecycle.Machine, rec *txn.Record) (Attempt, json.RawMessage, error) {
	r, sp := c.r, c.spans

	// Rule 1: input validation, before anything else.
	sp.phase("validate")
	if err := c.validateInput(); err != nil {
		return c.end(ctx, m, rec, lifecycle.EventInvalid, err)
	}
	m.Fire(lifecycle.EventValid, "")
	sp.transitioned(m, nil)

	// Rule 2: capability authorization, deny by default.
	sp.phase("authorize")
	td := r.authorize(callerOf(c.inv), &c.decl, c.inv.Input, c.inv.Grants)
	d := td.Decision
	rec.Capabilities = capability.Strings(d.Granted)
	if td.NeedsApproval(&c.decl) && d.Allowed() {
		switch why := approvalWhy(&c.decl, td.Rules); {
		case c.intent == nil:
			d.Reason = c.decl.Key() + " requires an approved intent" + why + ": propose it, have it approved, and run it with the intent's id and hash"
		case td.Rules != nil:
			if g := r.outsideGroups(c.intent.Decision.By, td.Rules.Approvers); g != "" {
				d.Reason = fmt.Sprintf("intent %s was approved by %s, who is not a member of %s, whom Cedar policy %s asks to approve it", c.intent.ID, c.intent.Decision.By, g, strings.Join(td.Rules.Policies, ", "))
			}
		}
	}
	c.decision = decisionRecord(d, td.Rules)
	c.grants = td.Reach
	if !d.Allowed() {
		// A path the handle would refuse is refused here, before anything
		// runs, with the handle's own error (td.Err).
		return c.end(ctx, m, rec, lifecycle.EventDenied, &AuthorizationError{Principal: d.Principal, Tool: d.Tool,
			Missing: d.Missing, Err: td.Err, DecisionID: d.ID, PolicyRevision: d.PolicyRevision, Reason: d.Reason, Cedar: td.Rules})
	}
	m.Fire(lifecycle.EventGranted, "")
	sp.transitioned(m, nil)

	// Rule 3: resource availability.
	sp.phase("acquire")
	release, err := c.acquire(ctx)
	if err != nil {
		return c.end(ctx, m, rec, lifecycle.EventAbort, err)
	}
	sp.ended(lifecycle.Authorized, nil)
	handedOff := false // once the tool runs, its goroutine releases the slot
	defer func() {
		if !handedOff {
			release()
		}
	}()

	// Rule 4: the state transaction begins; persisting EXECUTING is the claim.
	sp.phase("begin")
	if ctx.Err() != nil {
		return c.end(ctx, m, rec, lifecycle.EventAbort, c.ctxError(ctx, ctx))
	}
	start, _ := m.Next(lifecycle.EventStart, "", r.opts.Now())
	hist := append(m.History(), start)
	claim := *rec
	claim.State = string(lifecycle.Executing)
	claim.Transitions = transitions(hist)
	claimEvents := auditEvents(&r.ids, &claim, hist, 0, m.Created(), nil, c.extras(true), sp)
	var tx *txn.Tx
	switch {
	case c.intent != nil:
		// The intent is marked executed in the update that claims the
		// attempt: of two executions, at most one can claim it.
		x := IntentExecution{ExecutionID: claim.ExecutionID, CallID: claim.CallID, Principal: claim.Principal, At: start.At.UTC()}
		tx, err = r.store.BeginWith(ctx, &claim, r.claimGuard(c.intent, x), claimEvents...)
	case c.idem == nil && c.decl.ReadOnly():
		// A read-only tool changes nothing outside its transaction, and
		// without a key or an intent nothing asks that it run at most
		// once: it runs unclaimed, and its record, with every transition's
		// event, is stored once, when it ends. A crash before then leaves
		// no trace of a call that had no effect and gave no answer.
		tx, err = r.store.BeginUnclaimed(ctx, &claim, claimEvents...)
	default:
		tx, err = r.store.Begin(ctx, &claim, claimEvents...)
	}
	if err != nil {
		// Nothing was written and nothing ran.
		var ie *IntentError
		if errors.As(err, &ie) {
			r.recordRefusal(ctx, c.intent, c.inv.Principal, c.inv.CallID, ie.Code)
			return c.end(ctx, m, rec, lifecycle.EventAbort, ie)
		}
		return c.end(ctx, m, rec, lifecycle.EventAbort, &StateError{Op: "begin", Err: err})
	}
	rec.AuditEvents = claim.AuditEvents
	m.FireAt(lifecycle.EventStart, "", start.At)
	sp.transitioned(m, nil)
	sp.flush(true)
	if !tx.Active() {
		return c.rollback(m, rec, tx, &StateError{Op: "begin", Err: errors.New("no active transaction")})
	}

	// Rules 5 to 8: execute under the deadline, through the granted handles.
	sp.phase("execute")
	c.stage = &stager{ctx: ctx, store: r.store, tx: tx}
	handedOff = true
	out, err := c.run(sp.context(ctx), rec.Attempt, tx, release)
	if err != nil {
		return c.rollback(m, rec, tx, err)
	}
	sp.ended(lifecycle.Executing, nil)

	// Rule 9: output validation.
	sp.phase("validate_output")
	if max := c.decl.ResourceLimits.MaxOutputBytes; max > 0 && int64(len(out)) > max {
		return c.rollback(m, rec, tx, &ResourceError{Resource: "output_limit",
			Err: &tools.LimitError{Limit: "output_limit", Max: max, Got: int64(len(out))}})
	}
	if err := c.entry.ValidateOutput(out); err != nil {
		return c.rollback(m, rec, tx, &ValidationError{Phase: "output", Err: err})
	}
	sp.ended(lifecycle.Executing, nil)

	// Rule 10: commit; COMPLETED only once the commit is durable.
	sp.phase("commit")
	rec.Output = out
	rec.OutputHash = hashJSON(out)
	ok, _ := m.Next(lifecycle.EventOK, "", r.opts.Now())
	hist = append(m.History(), ok)
	final := c.final(rec, hist, nil)
	events := auditEvents(&r.ids, final, hist, len(hist)-1, m.Created(), nil, c.extras(false), sp)
	if err := tx.Commit(context.WithoutCancel(ctx), final, events...); err != nil {
		rec.Output, rec.OutputHash = nil, ""
		return c.rollback(m, rec, tx, &StateError{Op: "commit", Err: err})
	}
	m.FireAt(lifecycle.EventOK, "", ok.At) // Commit ended the transaction: rule 10 holds
	sp.transitioned(m, nil)
	sp.flush(true)

	// Staged files become visible now that their intents are committed.
	if intents, keys := c.stage.staged(); len(intents) > 0 && !r.skipStagedApply {
		if err := r.applyStaged(ctx, intents, keys); err != nil {
			// Durably COMPLETED; the renames are retried when the database
			// is next opened.
			return c.attemptOf(m, rec, nil), out, &StateError{Op: "apply staged writes", Err: err}
		}
	}

	// Rule 11: the record just committed carries every transition.
	return c.attemptOf(m, rec, nil), out, nil
}

func (c *call) validateInput() error {
	if c.limitsErr != nil {
		return c.limitsErr
	}
	in := c.inv.Input
	switch {
	case len(in) == 0:
		return &ValidationError{Phase: "input", Err: errors.New("no input; pass a JSON object such as {}")}
	case len(in) > c.r.opts.MaxInputBytes:
		return &ValidationError{Phase: "input", Err: fmt.Errorf("input is %d bytes, more than the %d allowed", len(in), c.r.opts.MaxInputBytes)}
	}
	if err := c.entry.ValidateInput(in); err != nil {
		return &ValidationError{Phase: "input", Err: err}
	}
	return nil
}

// acquire takes an execution slot of the tool (when it declares
// maxConcurrent) and one of the runtime, waiting up to SlotWait for both.
// The returned release must be called exactly once.
func (c *call) acquire(ctx context.Context) (release func(), err error) {
	r := c.r
	if ctx.Err() != nil {
		return nil, c.ctxError(ctx, ctx)
	}
	pools := []chan struct{}{r.slots}
	if ts := r.toolSlots[c.decl.Key()]; ts != nil {
		pools = []chan struct{}{ts, r.slots} // the tool's first: waiting for it must not hold a global slot
	}
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	taken := 0
	release = func() {
		for _, p := range pools[:taken] {
			<-p
		}
	}
	for _, p := range pools {
		select {
		case p <- struct{}{}:
			taken++
			continue
		default:
		}
		busy := &ResourceError{Resource: "concurrency", Transient: true, Err: fmt.Errorf("all %d execution slots are busy", cap(p))}
		if p != r.slots {
			busy.Err = fmt.Errorf("all %d execution slots of %s are busy (its maxConcurrent)", cap(p), c.decl.Key())
		}
		if r.opts.SlotWait < 0 {
			release()
			return nil, busy
		}
		if t == nil {
			t = time.NewTimer(r.opts.SlotWait)
		}
		select {
		case p <- struct{}{}:
			taken++
		case <-t.C:
			release()
			return nil, busy
		case <-ctx.Done():
			release()
			return nil, c.ctxError(ctx, ctx)
		}
	}
	return release, nil
}

type outcome struct {
	out json.RawMessage
	err error
}

// run executes the tool body in its own goroutine under the max execution
// time, recovering a panic, and returns at the deadline whether or not the
// tool does. The goroutine releases the execution slot when the tool
// actually returns, so an abandoned tool keeps its slot.
func (c *call) run(ctx context.Context, n int, tx *txn.Tx, release func()) (json.RawMessage, error) {
	limit := c.decl.ResourceLimits.MaxExecutionTime
	tctx, cancel := context.WithTimeoutCause(ctx, limit, errLimit)
	defer cancel()
	grants := slices.Clone(c.grants)
	env := &tools.Env{
		ExecutionID: tx.ID(),
		CallID:      c.inv.CallID,
		Attempt:     n,
		Principal:   c.inv.Principal,
		Grants:      grants,
		Limits:      c.decl.ResourceLimits,
		State:       &stateHandle{tx: tx, grants: slices.Clone(c.grants), maxBytes: c.decl.ResourceLimits.MaxMemory},
		WorkDir:     c.r.opts.WorkDir,
		OnProcess:   c.r.procs.observer(c.decl.ID),
		Stager:      c.stage,
	}
	procs := &procRecord{r: c.r, tx: tx, tool: c.decl.ID}
	env.OnProcessStart = procs.started
	defer env.Close()

	done := make(chan outcome, 1) // buffered: an abandoned tool's send must not block
	c.r.pool.run(func() {
		var o outcome
		returned := false
		defer func() {
			if !returned {
				if p := recover(); p != nil {
					o = outcome{err: &ExecutionError{Tool: c.decl.ID, Panic: p, Stack: debug.Stack(), Err: fmt.Errorf("panic: %v", p)}}
				} else {
					o = outcome{err: &ExecutionError{Tool: c.decl.ID, Err: errors.New("the tool called runtime.Goexit")}}
				}
			}
			procs.returned()
			release() // before the send, so a caller that got the outcome finds the slot free
			done <- o
		}()
		o.out, o.err = c.entry.Tool().Execute(tctx, env, c.inv.Input)
		if o.err != nil {
			o.err = c.toolError(o.err)
		}
		returned = true
	})

	select {
	case o := <-done:
		if tctx.Err() != nil {
			// Finished, but not within the limit (or after a cancel).
			return nil, c.ctxError(ctx, tctx)
		}
		return o.out, o.err
	case <-tctx.Done():
		return nil, c.ctxError(ctx, tctx)
	}
}

// ctxError classifies the end of an attempt's context.
func (c *call) ctxError(ctx, tctx context.Context) error {
	if context.Cause(tctx) == errLimit {
		return &TimeoutError{Tool: c.decl.ID, Limit: c.decl.ResourceLimits.MaxExecutionTime}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &TimeoutError{Tool: c.decl.ID, Caller: true}
	}
	return &ExecutionError{Tool: c.decl.ID, Canceled: true, Err: context.Cause(ctx)}
}

// toolError classifies an error the tool returned. Only the handles' own
// errors change the class; anything else, even an error of this package
// that the tool passed on, is the tool's failure: an ExecutionError.
func (c *call) toolError(err error) error {
	var le *tools.LimitError
	var ue *tools.UnavailableError
	switch {
	case errors.Is(err, tools.ErrAccessDenied):
		return &AuthorizationError{Principal: c.inv.Principal, Tool: c.decl.ID, Err: err}
	case errors.As(err, &le):
		return &ResourceError{Resource: le.Limit, Err: err}
	case errors.As(err, new(*tools.UnenforceableError)):
		return &ResourceError{Resource: "limit_unenforceable", Err: err}
	case errors.As(err, &ue): // transient: retried for idempotent tools only
		return &ResourceError{Resource: ue.Resource, Transient: true, Err: err}
	}
	ee := &ExecutionError{Tool: c.decl.ID, Err: err}
	if pe := (*tools.ProcessError)(nil); errors.As(err, &pe) {
		ee.Code = pe.Kind
	}
	return ee
}

// aborts reports whether err ends an attempt through ABORTED (timeout,
// limit, cancel) rather than straight to ROLLED_BACK.
func aborts(err error) bool {
	switch c := classOf(err).(type) {
	case *TimeoutError, *ResourceError:
		return true
	case *ExecutionError:
		return c.Canceled
	}
	return false
}

// end finishes an attempt that never started executing: it fires ev (and,
// for an abort, the rollback that follows it; there is nothing to undo) and
// stores the record.
func (c *call) end(ctx context.Context, m *lifecycle.Machine, rec *txn.Record, ev lifecycle.Event, cause error) (Attempt, json.RawMessage, error) {
	sp := c.spans
	m.Fire(ev, Message(cause))
	sp.transitioned(m, cause)
	if ev == lifecycle.EventAbort {
		sp.phase("rollback")
		m.Fire(lifecycle.EventRollback, "nothing to undo: the tool did not run")
		sp.transitioned(m, nil)
	}
	err := cause
	hist := m.History()
	final := c.final(rec, hist, cause)
	events := auditEvents(&c.r.ids, final, hist, 0, m.Created(), errorInfo(cause), c.extras(true), sp)
	perr := c.r.store.Put(context.WithoutCancel(ctx), final, events...)
	if perr != nil {
		err = errors.Join(cause, &StateError{Op: "record", Err: perr})
	}
	sp.flush(perr == nil)
	return c.attemptOf(m, rec, cause), nil, err
}

// rollback ends an executing attempt: ABORTED then ROLLED_BACK for a
// timeout, limit or cancel, straight to ROLLED_BACK otherwise; the write-set
// is discarded and the record stored.
func (c *call) rollback(m *lifecycle.Machine, rec *txn.Record, tx *txn.Tx, cause error) (Attempt, json.RawMessage, error) {
	sp := c.spans
	executed := len(m.History()) // the transitions up to EXECUTING, audited with the claim
	if aborts(cause) {
		m.Fire(lifecycle.EventAbort, Message(cause))
		sp.transitioned(m, cause) // the phase in progress ends ABORTED
		sp.phase("rollback")
		m.Fire(lifecycle.EventRollback, "state restored to the pre-execution snapshot")
	} else {
		sp.ended(lifecycle.Executing, cause)
		sp.phase("rollback")
		m.Fire(lifecycle.EventFail, Message(cause))
	}
	if c.r.store.Err() == nil {
		c.stage.discard() // before the rollback is recorded: the files are as they were
	} // else the commit's fate is unknown: the next Open renames or removes by what was committed
	err := cause
	hist := m.History()
	final := c.final(rec, hist, cause)
	events := auditEvents(&c.r.ids, final, hist, executed, m.Created(), errorInfo(cause), c.extras(false), sp)
	var serr error
	if rerr := tx.Rollback(context.Background(), final, events...); rerr != nil {
		serr = &StateError{Op: "rollback", Err: rerr}
		err = errors.Join(cause, serr)
	}
	sp.transitioned(m, serr)
	sp.flush(serr == nil)
	return c.attemptOf(m, rec, cause), nil, err
}

// final returns the record as it stands at the end of the attempt.
func (c *call) final(rec *txn.Record, hist []lifecycle.Transition, cause error) *txn.Record {
	f := *rec
	f.Transitions = transitions(hist)
	f.State = string(hist[len(hist)-1].To)
	f.EndedAt = hist[len(hist)-1].At
	if info := errorInfo(cause); info != nil {
		f.Error = &txn.ErrorInfo{Type: info.Type, Code: info.Code, Message: info.Message, Stack: info.Stack}
	}
	return &f
}

func (c *call) attemptOf(m *lifecycle.Machine, rec *txn.Record, cause error) Attempt {
	h := m.History()
	return Attempt{
		ExecutionID: rec.ExecutionID,
		Number:      rec.Attempt,
		State:       m.State(),
		Error:       errorInfo(cause),
		StartedAt:   m.Created(),
		EndedAt:     h[len(h)-1].At,
		Transitions: h,
	}
}

// decisionRecord is d as the audit log records it.
func decisionRecord(d capability.Decision, rd *rules.Decision) *audit.Decision {
	out := &audit.Decision{
		ID:             d.ID,
		PolicyRevision: d.PolicyRevision,
		Required:       capability.Strings(d.Required),
		Granted:        capability.Strings(d.Granted),
		Missing:        capability.Strings(d.Missing),
		Reason:         d.Reason,
	}
	if rd != nil {
		out.Cedar = &audit.CedarDecision{Revision: rd.Revision, Effect: rd.Effect, Policies: slices.Clone(rd.Policies), Approvers: slices.Clone(rd.Approvers)}
	}
	return out
}

// approvalWhy says, after "requires an approved intent", why a call does:
// the Cedar policies that ask for a person, and whom.
func approvalWhy(decl *tools.Declaration, rd *rules.Decision) string {
	if rd == nil || rd.Effect != rules.Approval {
		return ""
	}
	why := " (Cedar policy " + strings.Join(rd.Policies, ", ")
	if len(rd.Approvers) > 0 {
		why += ", approved by a member of " + strings.Join(rd.Approvers, " and ")
	}
	return why + ")"
}

// outsideGroups names the groups of groups approver is not a member of
// under the runtime's policy ("" when it is in all of them).
func (r *Runtime) outsideGroups(approver string, groups []string) string {
	set := r.policy.Rules()
	var out []string
	for _, g := range groups {
		if set == nil || !set.InGroup(approver, g) {
			out = append(out, g)
		}
	}
	return strings.Join(out, " and ")
}

func transitions(h []lifecycle.Transition) []txn.Transition {
	out := make([]txn.Transition, len(h))
	for i, t := range h {
		out[i] = txn.Transition{From: string(t.From), To: string(t.To), Event: string(t.Event), At: t.At, Reason: t.Reason}
	}
	return out
}

// inputHash is an invocation's input hash: hashJSON of an input within
// max bytes; an input over it, which rule 1 refuses, is hashed as its bytes
// are, without being parsed: refusing it costs no memory in its size.
func inputHash(in []byte, max int) string {
	if len(in) > max {
		sum := sha256.Sum256(in)
		return hex.EncodeToString(sum[:])
	}
	return hashJSON(in)
}

// hashJSON is the SHA-256 of the canonical form of a JSON value, so equal
// values hash equally; bytes that are not JSON hash as they are.
func hashJSON(b []byte) string {
	if h, err := audit.Hash(b); err == nil {
		return h
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// tokenRef is the record's form of an invocation's token.
func tokenRef(t *audit.Token) *txn.TokenRef {
	if t == nil {
		return nil
	}
	return &txn.TokenRef{Issuer: t.Issuer, Subject: t.Subject, SHA256: t.SHA256}
}

// auditToken is the audit event's form of a record's token.
func auditToken(t *txn.TokenRef) *audit.Token {
	if t == nil {
		return nil
	}
	return &audit.Token{Issuer: t.Issuer, Subject: t.Subject, SHA256: t.SHA256}
}
