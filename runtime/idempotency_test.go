package runtime_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// clock is a settable time for Options.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func keyed(tool, input, key string) tgruntime.Invocation {
	inv := invoke(tool, input)
	inv.IdempotencyKey = key
	return inv
}

func idemCode(err error) string {
	var ie *tgruntime.IdempotencyError
	if errors.As(err, &ie) {
		return ie.Code
	}
	return ""
}

// countingTool counts its runs; it fails when the message is "fail".
func countingTool(id string, runs *atomic.Int32, opts ...func(*tools.Declaration)) tools.Tool {
	opts = append([]func(*tools.Declaration){func(d *tools.Declaration) { d.RequiredCapabilities = nil }}, opts...)
	return tool(decl(id, opts...), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		runs.Add(1)
		if in.Msg == "fail" {
			return msg{}, errors.New("boom")
		}
		return in, nil
	})
}

func TestIdempotency_ReplayAndConflict(t *testing.T) {
	var runs atomic.Int32
	rt, _ := openRuntime(t, nil, countingTool("test.count", &runs))
	ctx := context.Background()

	first, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, "k1"))
	if err != nil || first.Replayed {
		t.Fatal(err)
	}
	// The same request, written differently (canonical JSON): a replay.
	second, err := rt.Execute(ctx, keyed("test.count", `{ "msg" : "a" }`, "k1"))
	if err != nil || !second.Replayed || second.ExecutionID != first.ExecutionID || string(second.Output) != string(first.Output) ||
		second.State != lifecycle.Completed || second.IdempotencyKey != "k1" {
		t.Fatalf("replay: %v, %+v", err, second)
	}
	if _, err := rt.Execute(ctx, keyed("test.count", `{"msg":"b"}`, "k1")); idemCode(err) != "idempotency_conflict" || !errors.Is(err, tgruntime.ErrIdempotency) {
		t.Fatalf("same key, other request: %v", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times", runs.Load())
	}

	// Failures are stored and replayed too, with their class.
	res, err := rt.Execute(ctx, keyed("test.count", `{"msg":"fail"}`, "k2"))
	if !errors.Is(err, tgruntime.ErrExecution) || res.State != lifecycle.RolledBack {
		t.Fatal(err)
	}
	again, err := rt.Execute(ctx, keyed("test.count", `{"msg":"fail"}`, "k2"))
	var re *tgruntime.ReplayedError
	if !errors.As(err, &re) || !errors.Is(err, tgruntime.ErrExecution) || !again.Replayed || again.ExecutionID != res.ExecutionID {
		t.Fatalf("replayed failure: %v, %+v", err, again)
	}
	if runs.Load() != 2 {
		t.Fatalf("ran %d times", runs.Load())
	}

	// Keys are scoped to principal and tool.
	other := keyed("test.count", `{"msg":"a"}`, "k1")
	other.Principal = "someone-else"
	if res, err := rt.Execute(ctx, other); err != nil || res.Replayed {
		t.Fatalf("another principal's key: %v, replayed %v", err, res.Replayed)
	}
	if runs.Load() != 3 {
		t.Fatalf("ran %d times", runs.Load())
	}
	if _, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, string(make([]byte, 300)))); idemCode(err) != "idempotency_invalid" {
		t.Errorf("a 300-byte key: %v", err)
	}
}

// A key whose first invocation still runs makes the second wait and take
// its result, or (NoWait) fail at once; the tool never runs twice.
func TestIdempotency_InFlight(t *testing.T) {
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	slow := tool(decl("test.slow"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		runs.Add(1)
		close(started)
		<-release
		return in, nil
	})
	rt, _ := openRuntime(t, nil, slow)
	ctx := context.Background()
	firstDone := make(chan *tgruntime.Result, 1)
	go func() {
		res, err := rt.Execute(ctx, keyed("test.slow", `{"msg":"x"}`, "k"))
		if err != nil {
			t.Error(err)
		}
		firstDone <- res
	}()
	<-started

	noWait := keyed("test.slow", `{"msg":"x"}`, "k")
	noWait.IdempotencyNoWait = true
	if _, err := rt.Execute(ctx, noWait); idemCode(err) != "idempotency_in_flight" {
		t.Fatalf("NoWait: %v", err)
	}
	// A waiter whose context ends gets in_flight; on a loaded machine its
	// context may end before the key was even checked, and the call is then
	// aborted before it runs. Either way nothing runs and nothing is a
	// store failure.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	res, err := rt.Execute(short, keyed("test.slow", `{"msg":"x"}`, "k"))
	var te *tgruntime.TimeoutError
	switch {
	case idemCode(err) == "idempotency_in_flight":
	case errors.As(err, &te) && te.Caller && res != nil && res.State == lifecycle.RolledBack:
	default:
		t.Fatalf("a waiter whose context ends: %v", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("a waiter whose context ended ran the tool: %d runs", runs.Load())
	}
	// A context that ended before the call: the key is never checked, the
	// call is aborted and recorded, and it is not a store failure.
	gone, cancelGone := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancelGone()
	res, err = rt.Execute(gone, keyed("test.slow", `{"msg":"x"}`, "k"))
	if !errors.As(err, &te) || !te.Caller || res == nil || res.State != lifecycle.RolledBack || runs.Load() != 1 {
		t.Fatalf("a call whose context had ended: %+v, %v", res, err)
	}
	waited := make(chan *tgruntime.Result, 1)
	go func() {
		res, err := rt.Execute(ctx, keyed("test.slow", `{"msg":"x"}`, "k"))
		if err != nil {
			t.Error(err)
		}
		waited <- res
	}()
	time.Sleep(20 * time.Millisecond) // let the waiter find the key running (the outcome does not depend on it)
	close(release)
	first, second := <-firstDone, <-waited
	if !second.Replayed || second.ExecutionID != first.ExecutionID || runs.Load() != 1 {
		t.Fatalf("waiter: replayed %v, %s vs %s, runs %d", second.Replayed, second.ExecutionID, first.ExecutionID, runs.Load())
	}
}

// After the TTL the key is free; a bypass runs again, is audited as such,
// and becomes the key's result.
func TestIdempotency_TTLAndBypass(t *testing.T) {
	var runs atomic.Int32
	clk := &clock{now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	rt, _ := openRuntime(t, &tgruntime.Options{Now: clk.Now, IdempotencyTTL: time.Hour}, countingTool("test.count", &runs))
	ctx := context.Background()
	first, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, "k"))
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(59 * time.Minute)
	if res, _ := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, "k")); !res.Replayed {
		t.Fatal("within the TTL: not replayed")
	}
	clk.Add(2 * time.Minute)
	second, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, "k"))
	if err != nil || second.Replayed || runs.Load() != 2 {
		t.Fatalf("after the TTL: %v, replayed %v, runs %d", err, second.Replayed, runs.Load())
	}
	// An expired key may even take a different request.
	clk.Add(2 * time.Hour)
	if res, err := rt.Execute(ctx, keyed("test.count", `{"msg":"b"}`, "k")); err != nil || res.Replayed {
		t.Fatalf("expired key, new request: %v", err)
	}

	bypass := keyed("test.count", `{"msg":"b"}`, "k")
	bypass.BypassIdempotency = true
	third, err := rt.Execute(ctx, bypass)
	if err != nil || third.Replayed || runs.Load() != 4 {
		t.Fatalf("bypass: %v, replayed %v, runs %d", err, third.Replayed, runs.Load())
	}
	for _, e := range auditEventsOf(t, rt, third.ExecutionID) {
		if !e.IdempotencyBypass || e.IdempotencyKey != "k" {
			t.Errorf("%s event does not record the bypass: %+v", e.State, e)
		}
	}
	if res, _ := rt.Execute(ctx, keyed("test.count", `{"msg":"b"}`, "k")); !res.Replayed || res.ExecutionID != third.ExecutionID {
		t.Errorf("after the bypass, the key holds the bypass's result: %+v", res)
	}
	_ = first
}

// Without Options.IdempotencyTTL a key holds its result for 24 hours
// (the execution boundary document's 60 s is a departure: see
// docs/conformance.md): a minute before the end the call is replayed, a
// second after it the call runs again.
func TestIdempotency_DefaultTTL(t *testing.T) {
	var runs atomic.Int32
	clk := &clock{now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	rt, _ := openRuntime(t, &tgruntime.Options{Now: clk.Now}, countingTool("test.count", &runs))
	ctx := context.Background()
	first, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, "k"))
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(23*time.Hour + 59*time.Minute)
	if res, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, "k")); err != nil || !res.Replayed || res.ExecutionID != first.ExecutionID || runs.Load() != 1 {
		t.Fatalf("23h59m after the first call: %v, replayed %v, runs %d; want the first call's result replayed", err, res != nil && res.Replayed, runs.Load())
	}
	clk.Add(time.Minute + time.Second) // 24h and one second after the first call
	res, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, "k"))
	if err != nil || res.Replayed || res.ExecutionID == first.ExecutionID || runs.Load() != 2 {
		t.Fatalf("24h1s after the first call: %v, replayed %v, runs %d; want the call to run again", err, res != nil && res.Replayed, runs.Load())
	}
}

// Expired keys are purged a few at a time by the writes of new keys, never
// all at once.
func TestIdempotency_PurgeIsBounded(t *testing.T) {
	var runs atomic.Int32
	clk := &clock{now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	rt, _ := openRuntime(t, &tgruntime.Options{Now: clk.Now, IdempotencyTTL: time.Minute}, countingTool("test.count", &runs))
	ctx := context.Background()
	for i := range 40 {
		if _, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, "old-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		vals, err := tgruntime.StoreOf(rt).StateValues(ctx, "toolgate.idempotency")
		if err != nil {
			t.Fatal(err)
		}
		return len(vals)
	}
	if n := count(); n != 40 {
		t.Fatalf("%d keys stored", n)
	}
	clk.Add(time.Hour)
	prev := 40
	for i := range 3 {
		if _, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, "new-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		n := count()
		if removed := prev + 1 - n; removed < 1 || removed > 16 {
			t.Fatalf("one new key removed %d expired ones; want 1 to 16", removed)
		}
		prev = n
	}
}

// A key whose invocation a crash interrupted is settled on Open: its
// records are its result, or, with none, the key is free.
func TestIdempotency_RecoveredOnOpen(t *testing.T) {
	var runs atomic.Int32
	rt, path := openRuntime(t, nil, countingTool("test.count", &runs))
	ctx := context.Background()
	done, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, "ran"))
	if err != nil {
		t.Fatal(err)
	}
	store := tgruntime.StoreOf(rt)
	vals, _ := store.StateValues(ctx, "toolgate.idempotency")
	// Mark every key running again, as a crash before the end would leave
	// it, and add one whose call left no record.
	for scope, b := range vals {
		store.PutState(ctx, "toolgate.idempotency", scope, []byte(replaceState(string(b), "running")))
	}
	store.PutState(ctx, "toolgate.idempotency", "orphan", []byte(`{"principal":"tester","tool":"test.count","key":"orphan","requestHash":"x","callId":"no-such-call","state":"running","createdAt":"2026-11-22T12:00:00Z","expiresAt":"2999-01-01T00:00:00Z"}`))
	rt.Close(ctx)

	reg := tools.NewRegistry()
	if err := reg.Register(countingTool("test.count", &runs)); err != nil {
		t.Fatal(err)
	}
	rt2, err := tgruntime.Open(path, &tgruntime.Options{Registry: reg, Grants: grantAll, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close(ctx)
	noWait := keyed("test.count", `{"msg":"a"}`, "ran")
	noWait.IdempotencyNoWait = true
	if res, err := rt2.Execute(ctx, noWait); err != nil || !res.Replayed || res.ExecutionID != done.ExecutionID {
		t.Fatalf("recovered key: %v, %+v", err, res)
	}
	if vals, _ := tgruntime.StoreOf(rt2).StateValues(ctx, "toolgate.idempotency"); vals["orphan"] != nil {
		t.Errorf("the key of a call that left no record was not freed")
	}
}

func replaceState(rec, state string) string {
	const done = `"state":"done"`
	for i := 0; i+len(done) <= len(rec); i++ {
		if rec[i:i+len(done)] == done {
			return rec[:i] + `"state":"` + state + `"` + rec[i+len(done):]
		}
	}
	return rec
}

// A replay returns the key's own attempts, never records another caller
// made with the same (caller-chosen) call id.
func TestIdempotency_ReplayIsTheKeysOwnCall(t *testing.T) {
	var runs atomic.Int32
	rt, _ := openRuntime(t, nil, countingTool("test.count", &runs))
	ctx := context.Background()
	alice := keyed("test.count", `{"msg":"alice"}`, "k1")
	alice.Principal, alice.CallID = "alice", "job-43"
	first, err := rt.Execute(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	bob := invoke("test.count", `{"msg":"bob-secret"}`)
	bob.Principal, bob.CallID = "bob", "job-43"
	if _, err := rt.Execute(ctx, bob); err != nil {
		t.Fatal(err)
	}
	again, err := rt.Execute(ctx, alice)
	if err != nil || !again.Replayed || string(again.Output) != `{"msg":"alice"}` || again.ExecutionID != first.ExecutionID || len(again.Attempts) != 1 {
		t.Fatalf("replay: %v, %s, %+v", err, again.Output, again.Attempts)
	}
}

// A call that never ran its tool and failed for a passing reason (no free
// slot) frees its key: the retry runs instead of replaying "busy".
func TestIdempotency_TransientFailureFreesTheKey(t *testing.T) {
	var runs atomic.Int32
	started, release := make(chan struct{}, 1), make(chan struct{})
	rt, _ := openRuntime(t, &tgruntime.Options{MaxConcurrent: 1, SlotWait: -1, Retry: tgruntime.RetryPolicy{MaxRetries: -1}},
		blocker(started, release), countingTool("test.count", &runs))
	ctx := context.Background()
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		rt.Execute(ctx, invoke("test.block", `{"msg":"x"}`))
	}()
	<-started
	if _, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, "k")); !errors.Is(err, tgruntime.ErrResource) {
		t.Fatalf("no slot: %v", err)
	}
	close(release)
	<-blocked // the blocker released its slot before its call returned
	res, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, "k"))
	if err != nil || res.Replayed || runs.Load() != 1 {
		t.Fatalf("retry after a transient failure: %v, replayed %v, runs %d", err, res.Replayed, runs.Load())
	}
}

// An input that is not JSON fails rule 1 and is recorded as FAILED, with or
// without a key: the key guards nothing that ran.
func TestIdempotency_MalformedInputIsRecorded(t *testing.T) {
	var runs atomic.Int32
	rt, _ := openRuntime(t, nil, countingTool("test.keyed", &runs))
	for _, key := range []string{"", "k"} {
		res, err := rt.Execute(context.Background(), keyed("test.keyed", `{"msg":`, key))
		if !errors.Is(err, tgruntime.ErrValidation) || res == nil {
			t.Fatalf("key %q: Execute = %+v, %v; want a FAILED result and a ValidationError", key, res, err)
		}
		checkAttempt(t, rt, res, lifecycle.Failed, pathFailed)
	}
	if runs.Load() != 0 {
		t.Fatalf("the tool ran %d times", runs.Load())
	}
}

// A call refused before its tool ran does not occupy its key (a key holds a
// result only once execution began): DENIED for want of a grant, then, with
// the grant, the same key and request run and complete. A call that ran
// keeps its key, failures included (TestIdempotency_ReplayAndConflict).
func TestIdempotency_RefusedCallFreesKey(t *testing.T) {
	var runs atomic.Int32
	rt, _ := openRuntime(t, nil, countingTool("test.guarded", &runs, func(d *tools.Declaration) {
		d.RequiredCapabilities = []capability.Capability{capability.MustParse("state.write:guarded")}
	}))
	ctx := context.Background()
	inv := keyed("test.guarded", `{"msg":"a"}`, "k")
	res, err := rt.Execute(ctx, inv)
	if !errors.Is(err, tgruntime.ErrAuthorization) || res == nil || res.State != lifecycle.Denied || runs.Load() != 0 {
		t.Fatalf("without the grant: %+v, %v; want DENIED, not run", res, err)
	}
	denied := res.ExecutionID
	// Invalid input is refused before it runs too: it frees the key as well.
	if res, err := rt.Execute(ctx, keyed("test.guarded", `{"msg":"a","x":1}`, "k2")); !errors.Is(err, tgruntime.ErrValidation) || res.State != lifecycle.Failed {
		t.Fatalf("invalid input: %+v, %v", res, err)
	}
	if res, err := rt.Execute(ctx, keyed("test.guarded", `{"msg":"b"}`, "k2")); idemCode(err) == "idempotency_conflict" {
		t.Fatalf("a key refused at validation was kept: %+v, %v", res, err)
	}

	inv.Grants = []capability.Capability{capability.MustParse("state.write:guarded")}
	res, err = rt.Execute(ctx, inv)
	if err != nil || res.Replayed || res.State != lifecycle.Completed || res.ExecutionID == denied || runs.Load() != 1 {
		t.Fatalf("after the grant: %+v, %v, runs %d; want a fresh COMPLETED run", res, err, runs.Load())
	}
	// Now the key holds the run: a repeat replays it.
	again, err := rt.Execute(ctx, inv)
	if err != nil || !again.Replayed || again.ExecutionID != res.ExecutionID || runs.Load() != 1 {
		t.Fatalf("repeat: %+v, %v, runs %d", again, err, runs.Load())
	}
	// The refused attempt is still on record.
	if rec := record(t, rt, denied); rec.State != string(lifecycle.Denied) {
		t.Fatalf("the DENIED record: %s", rec.State)
	}
}

// After a crash, a key whose call left only an attempt refused before it
// ran is freed on Open, as finishKey would have done.
func TestIdempotency_RecoveredRefusedCallFreesKey(t *testing.T) {
	var runs atomic.Int32
	guarded := func() tools.Tool {
		return countingTool("test.guarded", &runs, func(d *tools.Declaration) {
			d.RequiredCapabilities = []capability.Capability{capability.MustParse("state.write:guarded")}
		})
	}
	rt, path := openRuntime(t, nil, guarded())
	ctx := context.Background()
	inv := keyed("test.guarded", `{"msg":"a"}`, "k")
	inv.CallID = "refused-call"
	if res, err := rt.Execute(ctx, inv); !errors.Is(err, tgruntime.ErrAuthorization) || res.State != lifecycle.Denied {
		t.Fatalf("without the grant: %+v, %v", res, err)
	}
	// The key as a crash before finishKey would leave it: running, for the
	// DENIED call.
	store := tgruntime.StoreOf(rt)
	scope := "crashed"
	store.PutState(ctx, "toolgate.idempotency", scope, []byte(`{"principal":"tester","tool":"test.guarded","key":"k","requestHash":"x","callId":"refused-call","state":"running","createdAt":"2026-11-22T12:00:00Z","expiresAt":"2999-01-01T00:00:00Z"}`))
	rt.Close(ctx)

	reg := tools.NewRegistry()
	if err := reg.Register(guarded()); err != nil {
		t.Fatal(err)
	}
	rt2, err := tgruntime.Open(path, &tgruntime.Options{Registry: reg, Grants: grantAll, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close(ctx)
	if vals, _ := tgruntime.StoreOf(rt2).StateValues(ctx, "toolgate.idempotency"); vals[scope] != nil {
		t.Errorf("the key of a call refused before it ran was kept after the crash: %s", vals[scope])
	}
}
