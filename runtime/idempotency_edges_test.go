package runtime_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// An idempotency key is at most MaxIdempotencyKey bytes of printable
// characters: a longer key, or one with a control character or U+FFFD (an
// invalid UTF-8 byte), is refused as idempotency_invalid before anything
// runs or is recorded; a key of exactly MaxIdempotencyKey bytes is used.
// The refusal of a long key quotes its first 32 bytes only.
func TestIdempotency_KeyBounds(t *testing.T) {
	var runs atomic.Int32
	rt, _ := openRuntime(t, nil, countingTool("test.count", &runs))
	ctx := context.Background()

	longest := strings.Repeat("k", tgruntime.MaxIdempotencyKey)
	res, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, longest))
	if err != nil || res.IdempotencyKey != longest || runs.Load() != 1 {
		t.Fatalf("a key of MaxIdempotencyKey bytes: %v, %v (runs %d)", res, err, runs.Load())
	}

	for _, tc := range []struct {
		name, key, shown, reason string
	}{
		{"one byte too long", longest + "k", strings.Repeat("k", 32) + "...", "longer than 255 bytes"},
		{"control character first", "\x01key", "\x01key", "contains unprintable characters"},
		{"control character", "key\x01", "key\x01", "contains unprintable characters"},
		{"tab", "a\tb", "a\tb", "contains unprintable characters"},
		{"invalid UTF-8", "key\xff", "key\xff", "contains unprintable characters"},
		{"replacement character", "key\uFFFD", "key\uFFFD", "contains unprintable characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runs.Load()
			recs, _ := rt.Executions(ctx, txn.Filter{})
			res, err := rt.Execute(ctx, keyed("test.count", `{"msg":"b"}`, tc.key))
			var ie *tgruntime.IdempotencyError
			if res != nil || !errors.As(err, &ie) || ie.Code != "idempotency_invalid" || !errors.Is(err, tgruntime.ErrIdempotency) {
				t.Fatalf("got %v, %v; want an idempotency_invalid IdempotencyError", res, err)
			}
			if ie.Key != tc.shown || ie.Reason != tc.reason {
				t.Fatalf("key %q, reason %q; want %q, %q", ie.Key, ie.Reason, tc.shown, tc.reason)
			}
			after, _ := rt.Executions(ctx, txn.Filter{})
			if runs.Load() != before || len(after) != len(recs) {
				t.Fatalf("a refused key ran the tool (%d runs) or recorded an attempt (%d records, %d before)", runs.Load()-before, len(after), len(recs))
			}
		})
	}
}

// A replayed failure matches exactly its own RFC-0001 class (errors.Is),
// never another, and never ErrIdempotency; its message is the stored one
// after "runtime: replayed: ".
func TestReplayedError_MatchesItsClassOnly(t *testing.T) {
	classes := map[string]error{
		"ValidationError":    tgruntime.ErrValidation,
		"AuthorizationError": tgruntime.ErrAuthorization,
		"ResourceError":      tgruntime.ErrResource,
		"ExecutionError":     tgruntime.ErrExecution,
		"TimeoutError":       tgruntime.ErrTimeout,
		"StateError":         tgruntime.ErrState,
	}
	for typ, want := range classes {
		e := &tgruntime.ReplayedError{Info: tgruntime.ErrorInfo{Type: typ, Message: "runtime: it went wrong"}}
		for other, class := range classes {
			if got := errors.Is(e, class); got != (other == typ) {
				t.Errorf("a replayed %s: errors.Is(err, %v) = %v", typ, class, got)
			}
		}
		if !errors.Is(e, want) || errors.Is(e, tgruntime.ErrIdempotency) {
			t.Errorf("a replayed %s matches ErrIdempotency or not its class", typ)
		}
		if e.Error() != "runtime: replayed: it went wrong" {
			t.Errorf("message %q", e.Error())
		}
	}
	unknown := &tgruntime.ReplayedError{Info: tgruntime.ErrorInfo{Type: "SomethingElse"}}
	for _, class := range classes {
		if errors.Is(unknown, class) {
			t.Errorf("a replayed failure of an unknown type matches %v", class)
		}
	}
}

// An input of exactly MaxInputBytes bytes is keyed like any other: the
// second call with its key is replayed. One byte more, and rule 1 refuses
// the call (recorded) without the key claiming anything: the same call
// again is refused again, never replayed nor held.
func TestIdempotency_InputAtTheSizeLimit(t *testing.T) {
	var runs atomic.Int32
	const input = `{"msg":"exactly"}`
	rt, _ := openRuntime(t, &tgruntime.Options{MaxInputBytes: len(input)}, countingTool("test.count", &runs))
	ctx := context.Background()
	first, err := rt.Execute(ctx, keyed("test.count", input, "k"))
	if err != nil || first.Replayed {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := rt.Execute(ctx, keyed("test.count", input, "k"))
	if err != nil || !again.Replayed || again.ExecutionID != first.ExecutionID || runs.Load() != 1 {
		t.Fatalf("an input of MaxInputBytes with its key again: %+v, %v (runs %d); want the first call replayed", again, err, runs.Load())
	}
	const over = `{"msg":"exactly!"}`
	for i := range 2 {
		res, err := rt.Execute(ctx, keyed("test.count", over, "k2"))
		if !errors.Is(err, tgruntime.ErrValidation) || res == nil || res.Replayed || res.State != "FAILED" {
			t.Fatalf("call %d with an input over MaxInputBytes: %+v, %v; want rule 1's refusal, not replayed", i+1, res, err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("the tool ran %d times", runs.Load())
	}
}

// A bypass (Invocation.BypassIdempotency) made while the key's first call
// still runs takes the key over: when the first call ends it leaves the
// key to the bypass, whose result later calls with the key replay.
func TestIdempotency_BypassWhileRunningOwnsTheKey(t *testing.T) {
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	slow := tool(decl("test.slow", func(d *tools.Declaration) { d.RequiredCapabilities = nil }), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		runs.Add(1)
		if in.Msg == "first" {
			close(started)
			<-release
		}
		return in, nil
	})
	rt, _ := openRuntime(t, nil, slow)
	ctx := context.Background()
	done := make(chan *tgruntime.Result, 1)
	go func() {
		res, err := rt.Execute(ctx, keyed("test.slow", `{"msg":"first"}`, "k"))
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-started
	bypass := keyed("test.slow", `{"msg":"second"}`, "k")
	bypass.BypassIdempotency = true
	second, err := rt.Execute(ctx, bypass)
	if err != nil || second.Replayed {
		t.Fatalf("bypass: %+v, %v", second, err)
	}
	close(release)
	first := <-done
	if first == nil || first.State != "COMPLETED" {
		t.Fatalf("the first call: %+v", first)
	}
	res, err := rt.Execute(ctx, keyed("test.slow", `{"msg":"second"}`, "k"))
	if err != nil || !res.Replayed || res.ExecutionID != second.ExecutionID || runs.Load() != 2 {
		t.Fatalf("after both: %+v, %v (runs %d); want the bypass's result replayed", res, err, runs.Load())
	}
	if _, err := rt.Execute(ctx, keyed("test.slow", `{"msg":"first"}`, "k")); idemCode(err) != "idempotency_conflict" {
		t.Fatalf("the first call's request with the key: %v; want idempotency_conflict (the key is the bypass's)", err)
	}
}

// A replayed success says what the first answer said: a call that
// committed a file write that could not be made visible (parked) is
// replayed with its result and the same "apply staged writes" StateError.
func TestIdempotency_ReplayKeepsAParkedWrite(t *testing.T) {
	dir := t.TempDir()
	opts := writeOpts(dir)
	rt, path := openRuntime(t, opts, tools.FileWrite())
	tgruntime.SkipStagedApply(rt) // as if it crashed between its commit and the rename
	ctx := context.Background()
	inv := keyed("file.write", writeInput("a.txt", "x"), "k")
	first, err := rt.Execute(ctx, inv)
	if err != nil || first.State != "COMPLETED" {
		t.Fatalf("first: %+v, %v", first, err)
	}
	rt.Close(ctx)
	// The rename the next Open retries cannot be done: it is parked.
	if err := os.MkdirAll(filepath.Join(dir, "a.txt", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt2, err := reopen(path, opts, tools.FileWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close(ctx)
	res, err := rt2.Execute(ctx, inv)
	var se *tgruntime.StateError
	if res == nil || !res.Replayed || res.ExecutionID != first.ExecutionID || res.State != "COMPLETED" ||
		!errors.As(err, &se) || se.Op != "apply staged writes" {
		t.Fatalf("replay: %+v, %v; want the completed result replayed with its parked write's StateError", res, err)
	}
}

// Each new key purges a batch of sixteen expired keys (their records and
// expiry entries), oldest first, until none is left; unexpired keys stay.
func TestIdempotency_PurgeRemovesABatchPerNewKey(t *testing.T) {
	var runs atomic.Int32
	clk := &clock{now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	rt, _ := openRuntime(t, &tgruntime.Options{Now: clk.Now, IdempotencyTTL: time.Minute}, countingTool("test.count", &runs))
	ctx := context.Background()
	run := func(key string) {
		t.Helper()
		if _, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, key)); err != nil {
			t.Fatal(err)
		}
	}
	count := func(ns string) int {
		t.Helper()
		vals, err := tgruntime.StoreOf(rt).StateValues(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		return len(vals)
	}
	for i := range 40 {
		run("old-" + strconv.Itoa(i))
	}
	clk.Add(2 * time.Minute)
	for i, want := range []int{40 - 16 + 1, 40 - 32 + 2, 3, 4} { // the old ones left, and the new ones
		run("new-" + strconv.Itoa(i))
		if n, m := count("toolgate.idempotency"), count("toolgate.idempotency.expiry"); n != want || m != want {
			t.Fatalf("after new key %d: %d keys and %d expiry entries; want %d of each", i+1, n, m, want)
		}
	}
}

// A key expires at its ExpiresAt: at that very instant a new key's write
// purges it, as a call with it would take it as free.
func TestIdempotency_PurgeTakesAKeyAtItsExpiry(t *testing.T) {
	var runs atomic.Int32
	clk := &clock{now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	rt, _ := openRuntime(t, &tgruntime.Options{Now: clk.Now, IdempotencyTTL: time.Minute}, countingTool("test.count", &runs))
	ctx := context.Background()
	for _, k := range []string{"first", "second"} {
		if _, err := rt.Execute(ctx, keyed("test.count", `{"msg":"a"}`, k)); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Minute) // first expires exactly when second is written
	}
	vals, err := tgruntime.StoreOf(rt).StateValues(ctx, "toolgate.idempotency.expiry")
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != 1 {
		t.Fatalf("%d expiry entries after the second key, written at the first's expiry; want 1 (the first purged): %v", len(vals), vals)
	}
}

// Open frees every key whose call a crash interrupted before it left a
// record (each key of its own, however many): the same calls then run.
func TestIdempotency_OpenFreesEveryInterruptedKey(t *testing.T) {
	testdb.BboltOnly(t, "it writes the running keys of a crashed process into the bbolt file before the runtime opens it")
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolgate.db")
	var runs atomic.Int32
	rt, _ := openRuntimeAt(t, path, countingTool("test.count", &runs))
	rt.Close(ctx)
	s, err := txn.Open(path, &txn.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	keys := []string{"k1", "k2", "k3"}
	for i, k := range keys {
		sum := sha256.Sum256([]byte("tester\x00test.count\x00" + k))
		rec, _ := json.Marshal(map[string]any{"principal": "tester", "tool": "test.count", "key": k,
			"requestHash": "x", "callId": "crashed-" + strconv.Itoa(i), "state": "running",
			"createdAt": now, "expiresAt": now.Add(time.Hour)})
		if err := s.PutState(ctx, "toolgate.idempotency", hex.EncodeToString(sum[:]), rec); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	rt, _ = openRuntimeAt(t, path, countingTool("test.count", &runs))
	for _, k := range keys {
		inv := keyed("test.count", `{"msg":"a"}`, k)
		inv.IdempotencyNoWait = true
		if res, err := rt.Execute(ctx, inv); err != nil || res.Replayed {
			t.Fatalf("key %s after the crash: %+v, %v; want it free, the call run", k, res, err)
		}
	}
	if runs.Load() != 3 {
		t.Fatalf("%d runs", runs.Load())
	}
}

// A call with an idempotency key whose commit fails (the store closed under
// its running tool) returns the commit's failure, with the rollback's: that
// its key could not be recorded either (the store is gone) does not replace
// the error that says why the call failed.
func TestIdempotency_FailedCommitKeepsItsError(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	rt, _ := openRuntime(t, nil, tool(decl("test.slow"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		close(started)
		<-release
		return in, nil
	}))
	type ret struct {
		res *tgruntime.Result
		err error
	}
	done := make(chan ret, 1)
	go func() {
		inv := invoke("test.slow", `{"msg":"x"}`)
		inv.IdempotencyKey = "k-1"
		res, err := rt.Execute(context.Background(), inv)
		done <- ret{res, err}
	}()
	<-started
	if err := tgruntime.StoreOf(rt).Close(); err != nil {
		t.Fatal(err)
	}
	close(release)
	r := <-done
	var se *tgruntime.StateError
	if !errors.As(r.err, &se) || se.Op != "commit" || strings.Contains(r.err.Error(), "idempotency key") {
		t.Fatalf("err = %v; want the commit's StateError, not the key's", r.err)
	}
	if r.res == nil || r.res.State != "ROLLED_BACK" || r.res.IdempotencyKey != "k-1" {
		t.Fatalf("result %+v; want the attempt ROLLED_BACK under its key", r.res)
	}
}
