package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

var (
	pathCompleted = []string{"DECLARED", "VALIDATED", "AUTHORIZED", "EXECUTING", "COMPLETED"}
	pathFailed    = []string{"DECLARED", "FAILED"}
	pathDenied    = []string{"DECLARED", "VALIDATED", "DENIED"}
	pathAborted   = []string{"DECLARED", "VALIDATED", "AUTHORIZED", "EXECUTING", "ABORTED", "ROLLED_BACK"}
	pathRolled    = []string{"DECLARED", "VALIDATED", "AUTHORIZED", "EXECUTING", "ROLLED_BACK"}
	pathNoSlot    = []string{"DECLARED", "VALIDATED", "AUTHORIZED", "ABORTED", "ROLLED_BACK"}
)

// checkAttempt asserts the result's single attempt ended in want after
// going through path, and that the stored record agrees.
func checkAttempt(t *testing.T, rt *tgruntime.Runtime, res *tgruntime.Result, want lifecycle.State, wantPath []string) *txn.Record {
	t.Helper()
	if res == nil {
		t.Fatal("nil result")
	}
	if res.State != want {
		t.Fatalf("state = %s, want %s (error %+v)", res.State, want, res.Error)
	}
	last := res.Attempts[len(res.Attempts)-1]
	if last.ExecutionID != res.ExecutionID || last.State != want {
		t.Fatalf("last attempt %+v does not match result", last)
	}
	rec := record(t, rt, res.ExecutionID)
	if got := statePath(rec); !slices.Equal(got, wantPath) {
		t.Fatalf("recorded path %v, want %v", got, wantPath)
	}
	if rec.State != string(want) || rec.CallID != res.CallID || rec.ToolID != res.Tool {
		t.Fatalf("record %+v does not match result %+v", rec, res)
	}
	for i, tr := range rec.Transitions {
		if tr.At.IsZero() || i > 0 && tr.At.Before(rec.Transitions[i-1].At) {
			t.Fatalf("transition %d has time %v", i, tr.At)
		}
		// RFC 3.2.6-3.2.8: error details, denial and abort reasons are recorded.
		switch tr.To {
		case "FAILED", "DENIED", "ABORTED", "ROLLED_BACK":
			if tr.Reason == "" {
				t.Fatalf("transition to %s recorded without a reason", tr.To)
			}
		}
	}
	if want != lifecycle.Completed && (rec.Error == nil || rec.Error.Message == "") {
		t.Fatalf("state %s recorded without error details", want)
	}
	checkAudit(t, rt, rec)
	return rec
}

// checkAudit asserts that the audit log holds one event per recorded
// transition of rec, in order, with the ids the record lists (RFC 8.1,
// DESIGN: every transition is an audit event).
func checkAudit(t *testing.T, rt *tgruntime.Runtime, rec *txn.Record) {
	t.Helper()
	log, err := rt.AuditLog(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var states, ids []string
	for _, e := range log {
		var ev audit.Event
		if err := json.Unmarshal(e.Event, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.ExecutionID != rec.ExecutionID {
			continue
		}
		states = append(states, ev.State)
		ids = append(ids, ev.EventID)
		if ev.ToolID != rec.ToolID || ev.InputHash != rec.InputHash || ev.CallID != rec.CallID || ev.Timestamp == 0 {
			t.Fatalf("audit event %+v does not describe record %s", ev, rec.ExecutionID)
		}
		if tgState := lifecycle.State(ev.State); tgState.Terminal() && tgState != lifecycle.Completed && ev.Error == nil {
			t.Fatalf("terminal audit event %s without error details", ev.State)
		}
	}
	if want := statePath(rec)[1:]; !slices.Equal(states, want) {
		t.Fatalf("audit events %v, want one per transition %v", states, want)
	}
	if !slices.Equal(ids, rec.AuditEvents) {
		t.Fatalf("record lists audit events %v, log has %v", rec.AuditEvents, ids)
	}
}

func TestExecute_Completed(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	res, err := rt.Execute(context.Background(), invoke("test.echo", `{"msg":"hi"}`))
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	rec := checkAttempt(t, rt, res, lifecycle.Completed, pathCompleted)
	if string(res.Output) != `{"msg":"hi"}` || string(rec.Output) != `{"msg":"hi"}` {
		t.Fatalf("output %s, recorded %s", res.Output, rec.Output)
	}
	if rec.InputHash == "" || rec.OutputHash == "" || res.Error != nil {
		t.Fatalf("record lacks hashes or result has error: %+v %+v", rec, res.Error)
	}
	if v, ok := stateOf(t, rt); !ok || v != "hi" {
		t.Fatalf("committed state = %q, %v; want hi", v, ok)
	}
	if !slices.Equal(rec.Capabilities, []string{"state.write:test"}) {
		t.Fatalf("recorded grants %v", rec.Capabilities)
	}
}

// Rule 1: bad input ends FAILED, the tool never runs, nothing changes but
// the (complete) record of the attempt.
func TestExecute_InvalidInput(t *testing.T) {
	var ran atomic.Int32
	tl := tool(decl("test.count"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		ran.Add(1)
		return in, env.State.Put("test", "last", []byte("ran"))
	})
	rt, _ := openRuntime(t, &tgruntime.Options{MaxInputBytes: 1024}, tl)
	for name, input := range map[string]string{
		"malformed":     `{"msg":`,
		"empty":         ``,
		"trailing data": `{"msg":"a"} {}`,
		"wrong type":    `{"msg":42}`,
		"missing field": `{}`,
		"extra field":   `{"msg":"a","x":1}`,
		"nested limit":  `{"msg":"` + strings.Repeat("x", 65) + `"}`,
		"too large":     `{"msg":"` + strings.Repeat("x", 2000) + `"}`,
		"not an object": `[1,2]`,
		"invalid utf8":  "{\"msg\":\"\xff\"}",
	} {
		t.Run(name, func(t *testing.T) {
			res, err := rt.Execute(context.Background(), invoke("test.count", input))
			var ve *tgruntime.ValidationError
			if !errors.Is(err, tgruntime.ErrValidation) || !errors.As(err, &ve) || ve.Phase != "input" {
				t.Fatalf("err = %v, want input ValidationError", err)
			}
			rec := checkAttempt(t, rt, res, lifecycle.Failed, pathFailed)
			if rec.Error.Type != "ValidationError" || res.Error.Code != "invalid_input" || len(res.Attempts) != 1 {
				t.Fatalf("error %+v, attempts %d", rec.Error, len(res.Attempts))
			}
		})
	}
	if ran.Load() != 0 {
		t.Fatalf("tool ran %d times on invalid input", ran.Load())
	}
	if _, ok := stateOf(t, rt); ok {
		t.Fatal("state changed")
	}
}

// Rule 2: deny by default; grants from options or the invocation.
func TestExecute_Denied(t *testing.T) {
	var ran atomic.Int32
	tl := tool(decl("test.cap"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		ran.Add(1)
		return in, nil
	})
	rt, _ := openRuntime(t, &tgruntime.Options{Grants: map[string][]capability.Capability{
		"reader": {capability.MustParse("state.read:test")},
		"writer": {capability.MustParse("state.write:test")},
		"other":  {capability.MustParse("state.write:other")},
	}}, tl)
	for _, principal := range []string{"", "nobody", "reader", "other"} {
		t.Run("principal="+principal, func(t *testing.T) {
			inv := invoke("test.cap", `{"msg":"x"}`)
			inv.Principal = principal
			res, err := rt.Execute(context.Background(), inv)
			var ae *tgruntime.AuthorizationError
			if !errors.Is(err, tgruntime.ErrAuthorization) || !errors.As(err, &ae) {
				t.Fatalf("err = %v, want AuthorizationError", err)
			}
			if len(ae.Missing) != 1 || ae.Missing[0].String() != "state.write:test" {
				t.Fatalf("missing = %v", ae.Missing)
			}
			rec := checkAttempt(t, rt, res, lifecycle.Denied, pathDenied)
			if !strings.Contains(rec.Error.Message, "state.write:test") {
				t.Fatalf("denial reason does not name the capability: %q", rec.Error.Message)
			}
		})
	}
	if ran.Load() != 0 {
		t.Fatal("a denied tool ran")
	}
	inv := invoke("test.cap", `{"msg":"x"}`)
	inv.Principal = "writer"
	if res, err := rt.Execute(context.Background(), inv); err != nil || res.State != lifecycle.Completed {
		t.Fatalf("policy grant: %v %v", res, err)
	}
	inv.Principal = "nobody"
	inv.Grants = []capability.Capability{capability.MustParse("state.write:test")}
	if res, err := rt.Execute(context.Background(), inv); err != nil || res.State != lifecycle.Completed {
		t.Fatalf("invocation grant: %v %v", res, err)
	}
}

// RFC 6.1.1: validation happens before authorization.
func TestExecute_ValidationBeforeAuthorization(t *testing.T) {
	rt, _ := openRuntime(t, &tgruntime.Options{Grants: map[string][]capability.Capability{}}, echo("test.echo"))
	res, err := rt.Execute(context.Background(), invoke("test.echo", `{"msg":1}`))
	if !errors.Is(err, tgruntime.ErrValidation) || errors.Is(err, tgruntime.ErrAuthorization) {
		t.Fatalf("err = %v, want only ValidationError", err)
	}
	checkAttempt(t, rt, res, lifecycle.Failed, pathFailed)
}

// failing tools write state first, then fail in their own way; the write
// must never be visible.
func TestExecute_RolledBack(t *testing.T) {
	// The tools write before failing. The write's error is kept, not
	// reported from the tool's goroutine: a timed-out tool may outlive the test.
	var wrote atomic.Value
	write := func(env *tools.Env) {
		err := env.State.Put("test", "last", []byte("dirty"))
		wrote.Store(&err)
	}
	cases := []struct {
		name     string
		fn       func(ctx context.Context, env *tools.Env, in msg) (msg, error)
		is       error
		code     string
		wantPath []string
	}{
		{"tool error", func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			write(env)
			return msg{}, errors.New("boom")
		}, tgruntime.ErrExecution, "tool_error", pathRolled},
		{"panic", func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			write(env)
			panic("kaboom")
		}, tgruntime.ErrExecution, "panic", pathRolled},
		{"invalid output", func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			write(env)
			return msg{Msg: strings.Repeat("y", 100)}, nil // maxLength 64
		}, tgruntime.ErrValidation, "invalid_output", pathRolled},
		{"timeout", func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			write(env)
			<-ctx.Done()
			return msg{}, ctx.Err()
		}, tgruntime.ErrTimeout, "timeout", pathAborted},
		{"handle refusal", func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			write(env)
			_, err := env.FS("filesystem.read").Open("/etc/hostname")
			return msg{}, err
		}, tgruntime.ErrAuthorization, "capability_boundary", pathRolled},
		{"limit", func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			write(env)
			return msg{}, &tools.LimitError{Limit: "file_size_limit", Max: 1, Got: 2}
		}, tgruntime.ErrResource, "file_size_limit", pathAborted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lim := 5 * time.Second
			if tc.is == tgruntime.ErrTimeout {
				lim = 50 * time.Millisecond
			}
			rt, _ := openRuntime(t, nil, tool(decl("test.bad", limit(lim)), tc.fn))
			res, err := rt.Execute(context.Background(), invoke("test.bad", `{"msg":"x"}`))
			if !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			rec := checkAttempt(t, rt, res, lifecycle.RolledBack, tc.wantPath)
			if res.Error.Code != tc.code || rec.Error.Code != tc.code {
				t.Fatalf("error code %q (recorded %q), want %q", res.Error.Code, rec.Error.Code, tc.code)
			}
			if v, ok := stateOf(t, rt); ok {
				t.Fatalf("rolled back attempt left state %q", v)
			}
			if rec.Output != nil || res.Output != nil {
				t.Fatal("a rolled back attempt has output")
			}
			if tc.is != tgruntime.ErrTimeout { // a timed-out tool may not have reached its write
				if err, _ := wrote.Load().(*error); err == nil || *err != nil {
					t.Fatalf("the tool's write failed: %v", err)
				}
				if rec.WriteSet == nil || rec.WriteSet.Committed || rec.WriteSet.Puts != 1 {
					t.Fatalf("write-set summary %+v", rec.WriteSet)
				}
			}
		})
	}
}

func TestExecute_PanicCarriesStack(t *testing.T) {
	rt, _ := openRuntime(t, nil, tool(decl("test.panic"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		var m map[string]int
		m["x"]++ // nil map write: a runtime panic
		return in, nil
	}))
	res, err := rt.Execute(context.Background(), invoke("test.panic", `{"msg":"x"}`))
	var ee *tgruntime.ExecutionError
	if !errors.As(err, &ee) || ee.Panic == nil {
		t.Fatalf("err = %v, want ExecutionError with Panic", err)
	}
	if !strings.Contains(string(ee.Stack), "TestExecute_PanicCarriesStack") {
		t.Fatalf("stack does not show the panicking function:\n%s", ee.Stack)
	}
	if rec := record(t, rt, res.ExecutionID); !strings.Contains(rec.Error.Stack, "TestExecute_PanicCarriesStack") {
		t.Fatal("recorded error lacks the stack")
	}
}

// A tool that ignores its context: Execute returns at the deadline, the
// abort is recorded, and the abandoned goroutine can no longer write.
// Every wait is bounded, so a broken rule fails the test in seconds rather
// than hanging it until the test binary's timeout; and the stubborn tool is
// released however the test ends.
func TestExecute_ToolIgnoresContext(t *testing.T) {
	release := make(chan struct{})
	free := sync.OnceFunc(func() { close(release) })
	late := make(chan error, 1)
	rt, _ := openRuntime(t, nil, tool(decl("test.stubborn", limit(50*time.Millisecond)),
		func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			<-release // ignores ctx
			late <- env.State.Put("test", "last", []byte("late"))
			return in, nil
		}))
	t.Cleanup(free) // runs before the runtime's Close
	done := make(chan struct{})
	var res *tgruntime.Result
	var err error
	go func() {
		res, err = rt.Execute(context.Background(), invoke("test.stubborn", `{"msg":"x"}`))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("Execute did not return at the deadline of a tool that ignores its context")
	}
	if !errors.Is(err, tgruntime.ErrTimeout) {
		t.Fatalf("err = %v, want TimeoutError", err)
	}
	checkAttempt(t, rt, res, lifecycle.RolledBack, pathAborted)
	free()
	select {
	case err := <-late:
		if !errors.Is(err, txn.ErrTxDone) {
			t.Fatalf("abandoned tool's write = %v, want ErrTxDone", err)
		}
	case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("the abandoned tool did not get to its write within 10s of its release: it never ran, or the write blocks")
	}
	if _, ok := stateOf(t, rt); ok {
		t.Fatal("abandoned tool changed state")
	}
}

func TestExecute_Canceled(t *testing.T) {
	started := make(chan struct{})
	rt, _ := openRuntime(t, nil, tool(decl("test.wait", idempotent), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		close(started)
		<-ctx.Done()
		return msg{}, ctx.Err()
	}))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	res, err := rt.Execute(ctx, invoke("test.wait", `{"msg":"x"}`))
	var ee *tgruntime.ExecutionError
	if !errors.As(err, &ee) || !ee.Canceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want canceled ExecutionError", err)
	}
	checkAttempt(t, rt, res, lifecycle.RolledBack, pathAborted)
	if len(res.Attempts) != 1 {
		t.Fatalf("a canceled invocation was retried: %d attempts", len(res.Attempts))
	}
}

func TestExecute_UnknownToolOrVersion(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	for _, tc := range []struct {
		inv  tgruntime.Invocation
		want error
	}{
		{tgruntime.Invocation{Tool: "nope", Input: []byte(`{}`)}, tools.ErrToolNotFound},
		{tgruntime.Invocation{Tool: "test.echo", Version: "9.9.9", Input: []byte(`{"msg":"x"}`)}, tools.ErrVersionNotFound},
	} {
		res, err := rt.Execute(context.Background(), tc.inv)
		if res != nil || !errors.Is(err, tc.want) {
			t.Fatalf("Execute(%+v) = %v, %v; want nil, %v", tc.inv, res, err, tc.want)
		}
	}
	recs, err := rt.Executions(context.Background(), txn.Filter{})
	if err != nil || len(recs) != 0 {
		t.Fatalf("unknown tools left records: %d, %v", len(recs), err)
	}
}

func TestExecute_Versions(t *testing.T) {
	v2 := tool(decl("test.v", func(d *tools.Declaration) { d.Version = "2.0.0" }), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		return msg{Msg: "v2"}, nil
	})
	v1 := tool(decl("test.v"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) { return msg{Msg: "v1"}, nil })
	rt, _ := openRuntime(t, nil, v2, v1)
	for version, want := range map[string]string{"": "v2", "2.0.0": "v2", "1.0.0": "v1"} {
		inv := invoke("test.v", `{"msg":"x"}`)
		inv.Version = version
		res, err := rt.Execute(context.Background(), inv)
		if err != nil || string(res.Output) != `{"msg":"`+want+`"}` {
			t.Fatalf("version %q: %s %v", version, res.Output, err)
		}
	}
}

// A long error message (one that quotes a large input, say) is stored
// capped, in the record, its audit events and the result, at a rune
// boundary; the error returned to the caller keeps all of it.
func TestExecute_LongErrorMessageIsCapped(t *testing.T) {
	long := strings.Repeat("é", 300_000) // 600,000 bytes
	tl := tool(decl("test.long"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		return msg{}, errors.New("no such file: " + long)
	})
	rt, _ := openRuntime(t, nil, tl)
	res, err := rt.Execute(context.Background(), invoke("test.long", `{"msg":"a"}`))
	if err == nil || !strings.Contains(err.Error(), long) {
		t.Fatalf("the returned error lost its message: %.100v", err)
	}
	rec := checkAttempt(t, rt, res, lifecycle.RolledBack, pathRolled)
	for what, m := range map[string]string{"result": res.Error.Message, "record": rec.Error.Message} {
		if len(m) > 2048 || !utf8.ValidString(m) || !strings.HasSuffix(m, fmt.Sprintf("(%d bytes in all)", len(tgruntime.Message(err)))) || !strings.Contains(m, "no such file: éé") {
			t.Errorf("%s message: %d bytes, valid UTF-8 %v, ends %q", what, len(m), utf8.ValidString(m), m[max(0, len(m)-40):])
		}
	}
	log, err := rt.AuditLog(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range log {
		if len(e.Event) > 8192 {
			t.Errorf("audit event %d is %d bytes", e.Seq, len(e.Event))
		}
	}
}

// A principal or call id that cannot be recorded as it is (too long, or
// with control characters that would forge lines in listings) is refused
// before anything is recorded; the tool never runs.
func TestExecute_InvocationIdentity(t *testing.T) {
	var ran atomic.Int32
	tl := tool(decl("test.ident", func(d *tools.Declaration) { d.RequiredCapabilities = nil }), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		ran.Add(1)
		return in, nil
	})
	rt, _ := openRuntime(t, nil, tl)
	ctx := context.Background()
	for name, set := range map[string]func(*tgruntime.Invocation){
		"principal with a newline": func(inv *tgruntime.Invocation) { inv.Principal = "alice\nCOMPLETED bob" },
		"principal too long":       func(inv *tgruntime.Invocation) { inv.Principal = strings.Repeat("a", tgruntime.MaxPrincipal+1) },
		"principal not UTF-8":      func(inv *tgruntime.Invocation) { inv.Principal = "a\xff" },
		"call id too long":         func(inv *tgruntime.Invocation) { inv.CallID = strings.Repeat("c", tgruntime.MaxCallID+1) },
		"call id with a space":     func(inv *tgruntime.Invocation) { inv.CallID = "call 1" },
	} {
		inv := invoke("test.ident", `{"msg":"a"}`)
		set(&inv)
		res, err := rt.Execute(ctx, inv)
		var ve *tgruntime.ValidationError
		if res != nil || !errors.As(err, &ve) || ve.Phase != "invocation" || len(err.Error()) > 200 {
			t.Errorf("%s: Execute = %+v, %v; want a ValidationError of phase invocation, briefly", name, res, err)
		}
	}
	if recs, err := rt.Executions(ctx, txn.Filter{}); err != nil || len(recs) != 0 {
		t.Fatalf("records: %d, %v", len(recs), err)
	}
	if ran.Load() != 0 {
		t.Fatalf("the tool ran %d times", ran.Load())
	}
	// At the bounds, and printable text with spaces and accents, it runs.
	inv := invoke("test.ident", `{"msg":"a"}`)
	inv.Principal, inv.CallID = "cli:José Ñúñez "+strings.Repeat("x", tgruntime.MaxPrincipal-len("cli:José Ñúñez ")), strings.Repeat("c", tgruntime.MaxCallID)
	if _, err := rt.Execute(ctx, inv); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.ident", Input: json.RawMessage(`{"msg":"a"}`), Principal: "bob\r"}); !errors.Is(err, tgruntime.ErrValidation) {
		t.Errorf("Propose by a principal with a control character = %v", err)
	}
	// Not even an intent's refusal history records it.
	it, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.ident", Input: json.RawMessage(`{"msg":"a"}`), Principal: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Execute(ctx, tgruntime.Invocation{IntentID: it.ID, IntentHash: it.Hash, Principal: "alice\nCOMPLETED by bob"}); !errors.Is(err, tgruntime.ErrValidation) {
		t.Errorf("executing an intent with a forged principal = %v", err)
	}
	if it, err := rt.Intent(ctx, it.ID); err != nil || len(it.Refusals) != 0 {
		t.Errorf("the intent's history: %+v, %v", it.Refusals, err)
	}
}
