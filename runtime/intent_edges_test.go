package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// A decision says what was decided, by whom, how (via, and the name of the
// key that signed it: the part of the signer before its "+"), and, for a
// rejection only, why.
func TestIntentDecision_String(t *testing.T) {
	for _, tc := range []struct {
		d    tgruntime.IntentDecision
		want string
	}{
		{tgruntime.IntentDecision{Approved: true, By: "alice"}, "approved by alice"},
		{tgruntime.IntentDecision{By: "bob", Reason: "not now"}, "rejected by bob: not now"},
		{tgruntime.IntentDecision{Approved: true, By: "alice", Reason: "fine", Via: "elicitation"}, "approved by alice via elicitation"},
		{tgruntime.IntentDecision{Approved: true, By: "alice", Via: "elicitation", Signer: "alice+AAAA"}, "approved by alice via elicitation, signed with key alice"},
		{tgruntime.IntentDecision{By: "bob", Reason: "no", Signer: "ops+BBBB"}, "rejected by bob, signed with key ops: no"},
		{tgruntime.IntentDecision{Approved: true, By: "alice", Signer: "no-plus"}, "approved by alice"},
	} {
		if got := tc.d.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.d, got, tc.want)
		}
	}
}

// Propose refuses an empty input and one over MaxInputBytes with a
// ValidationError, storing nothing; an input of exactly MaxInputBytes is
// proposed.
func TestPropose_InputBounds(t *testing.T) {
	const input = `{"msg":"exactly"}`
	rt, _ := openRuntime(t, &tgruntime.Options{MaxInputBytes: len(input)}, echo("test.echo"))
	ctx := context.Background()
	for _, bad := range []string{"", `{"msg":"exactly!"}`} {
		in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(bad), Principal: "agent"})
		var ve *tgruntime.ValidationError
		if in != nil || !errors.As(err, &ve) || ve.Phase != "input" {
			t.Fatalf("propose %q: %+v, %v; want an input ValidationError", bad, in, err)
		}
	}
	if all, err := rt.Intents(ctx, tgruntime.IntentFilter{}); err != nil || len(all) != 0 {
		t.Fatalf("refused proposals stored intents: %v, %v", all, err)
	}
	in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(input), Principal: "agent"})
	if err != nil || in.Status != tgruntime.IntentPending || string(in.Input) != input {
		t.Fatalf("an input of MaxInputBytes: %+v, %v", in, err)
	}
}

// An invocation that names an approved intent may repeat its tool, version
// and input, and runs only if they are the intent's: another tool, another
// version, another input, or the same input over MaxInputBytes is refused
// (intent_hash_mismatch, recorded) without running; the same input in
// another JSON form, up to MaxInputBytes, runs.
func TestIntent_InvocationMustMatchTheIntent(t *testing.T) {
	var runs atomic.Int32
	counted := tool(decl("test.counted"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		runs.Add(1)
		return in, nil
	})
	rt, _ := openRuntime(t, &tgruntime.Options{MaxInputBytes: 32}, counted, echo("test.echo"))
	ctx := context.Background()
	in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.counted", Input: json.RawMessage(`{"msg":"go"}`), Principal: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	call := func(tool, version, input string) (*tgruntime.Result, error) {
		return rt.Execute(ctx, tgruntime.Invocation{IntentID: in.ID, IntentHash: in.Hash, Principal: "tester",
			Tool: tool, Version: version, Input: json.RawMessage(input)})
	}
	for _, tc := range []struct{ name, tool, version, input string }{
		{"another tool", "test.echo", "", ""},
		{"another version", "", "2.0.0", ""},
		{"another input", "", "", `{"msg":"stop"}`},
		{"the input over MaxInputBytes", "", "", `{"msg":"go"}` + strings.Repeat(" ", 32)},
		{"the tool, another version", "test.counted", "1.0.1", `{"msg":"go"}`},
	} {
		if _, err := call(tc.tool, tc.version, tc.input); intentCode(err) != "intent_hash_mismatch" {
			t.Fatalf("%s: %v; want intent_hash_mismatch", tc.name, err)
		}
	}
	if runs.Load() != 0 {
		t.Fatalf("the tool ran %d times", runs.Load())
	}
	got, _ := rt.Intent(ctx, in.ID)
	if len(got.Refusals) != 5 {
		t.Fatalf("%d refusals recorded, want 5", len(got.Refusals))
	}
	exact := ` { "msg" : "go" }` + strings.Repeat(" ", 15) // MaxInputBytes exactly
	if len(exact) != 32 {
		t.Fatalf("%d bytes", len(exact))
	}
	res, err := call("test.counted", "1.0.0", exact)
	if err != nil || res.State != "COMPLETED" || runs.Load() != 1 {
		t.Fatalf("the intent's own call, its input in another form: %+v, %v", res, err)
	}
}

// An intent hash is 64 lowercase hex digits; anything else is refused as
// intent_malformed before the intent is read (and nothing is recorded).
func TestIntent_HashForm(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	ctx := context.Background()
	in, err := rt.Propose(ctx, invoke("test.echo", `{"msg":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{in.Hash[:63], in.Hash + "0", strings.ToUpper(in.Hash), in.Hash[:63] + "g"} {
		if _, err := execIntent(rt, in.ID, h); intentCode(err) != "intent_malformed" {
			t.Errorf("hash %q: %v; want intent_malformed", h, err)
		}
	}
	if got, _ := rt.Intent(ctx, in.ID); len(got.Refusals) != 0 {
		t.Fatalf("malformed requests recorded as refusals: %+v", got.Refusals)
	}
	if _, err := execIntent(rt, in.ID, in.Hash); intentCode(err) != "intent_pending" {
		t.Fatalf("the well-formed hash: %v", err)
	}
}

// An approval's via is a lowercase word (letters and hyphens) of at most 32
// bytes; a second decision is refused, saying which decision was made.
func TestIntent_ViaAndSecondDecision(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	ctx := context.Background()
	a, _ := rt.Propose(ctx, invoke("test.echo", `{"msg":"a"}`))
	b, _ := rt.Propose(ctx, invoke("test.echo", `{"msg":"b"}`))
	for _, via := range []string{"", strings.Repeat("a", 33), "Elicitation", "web ui", "cli2"} {
		if _, err := rt.ApproveVia(ctx, a.ID, "alice", via); intentCode(err) != "intent_malformed" {
			t.Errorf("via %q: %v; want intent_malformed", via, err)
		}
	}
	via := strings.Repeat("a", 30) + "-b"
	got, err := rt.ApproveVia(ctx, a.ID, "alice", via)
	if err != nil || got.Decision.Via != via {
		t.Fatalf("a via of 32 bytes: %+v, %v", got, err)
	}
	if _, err := rt.Reject(ctx, b.ID, "bob", "no"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id, says string
	}{{a.ID, "already approved by alice at "}, {b.ID, "already rejected by bob at "}} {
		_, err := rt.Approve(ctx, tc.id, "carol")
		if intentCode(err) != "intent_decided" || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("a second decision: %v; want intent_decided saying %q", err, tc.says)
		}
	}
}

// Intents are listed oldest proposal first, and those proposed at the same
// instant by id.
func TestIntents_Order(t *testing.T) {
	clk := &clock{now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	rt, _ := openRuntime(t, &tgruntime.Options{Now: clk.Now}, echo("test.echo"))
	ctx := context.Background()
	propose := func(msg string) string {
		in, err := rt.Propose(ctx, invoke("test.echo", `{"msg":"`+msg+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		return in.ID
	}
	var same []string
	for i := range 3 {
		same = append(same, propose("same"+strconv.Itoa(i)))
	}
	slices.Sort(same)
	// Six more, each a minute before the one before it: random ids, whose
	// order is not their time's (but for one chance in 720).
	var earlier []string
	for i := range 6 {
		clk.Add(-time.Minute)
		earlier = append([]string{propose("earlier" + strconv.Itoa(i))}, earlier...)
	}
	want := append(earlier, same...)
	all, err := rt.Intents(ctx, tgruntime.IntentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range all {
		got = append(got, in.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// An intent refusal matches ErrIntent and ErrAuthorization (the invocation
// is not authorized to run) and no other class.
func TestIntentError_Classes(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	ctx := context.Background()
	in, err := rt.Propose(ctx, invoke("test.echo", `{"msg":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = execIntent(rt, in.ID, in.Hash)
	if intentCode(err) != "intent_pending" || !errors.Is(err, tgruntime.ErrIntent) || !errors.Is(err, tgruntime.ErrAuthorization) {
		t.Fatalf("a pending intent: %v; want an IntentError matching ErrIntent and ErrAuthorization", err)
	}
	for _, other := range []error{tgruntime.ErrValidation, tgruntime.ErrResource, tgruntime.ErrExecution, tgruntime.ErrTimeout,
		tgruntime.ErrState, tgruntime.ErrIdempotency, tgruntime.ErrClosed} {
		if errors.Is(err, other) {
			t.Errorf("an intent refusal matches %v", other)
		}
	}
}

// While an intent's execution runs, another request to run it is refused
// as intent_in_flight, naming that execution, and gets no result; once it
// has ended, as intent_already_executed, with the stored result replayed.
// (The first execution holds the intent through its durable claim, which
// carries the executed mark.)
func TestIntent_InFlightThenAlreadyExecuted(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	blocking := tool(decl("test.blocking"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		close(started)
		<-release
		return in, env.State.Put("test", "last", []byte(in.Msg))
	})
	rt, _ := openRuntime(t, nil, blocking)
	in := approved(t, rt, "test.blocking", `{"msg":"once"}`)
	done := make(chan *tgruntime.Result, 1)
	go func() {
		res, err := execIntent(rt, in.ID, in.Hash)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-started
	res, err := execIntent(rt, in.ID, in.Hash)
	var ie *tgruntime.IntentError
	if res != nil || !errors.As(err, &ie) || ie.Code != "intent_in_flight" || ie.Execution == nil {
		close(release)
		t.Fatalf("while it runs: %+v, %v; want intent_in_flight naming the execution", res, err)
	}
	close(release)
	first := <-done
	if first == nil || ie.Execution.ExecutionID != first.ExecutionID {
		t.Fatalf("the in-flight refusal named %+v; the execution was %+v", ie.Execution, first)
	}
	again, err := execIntent(rt, in.ID, in.Hash)
	if intentCode(err) != "intent_already_executed" || again == nil || !again.Replayed || again.ExecutionID != first.ExecutionID {
		t.Fatalf("after it ended: %+v, %v; want intent_already_executed with the result replayed", again, err)
	}
}
