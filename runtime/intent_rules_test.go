package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// countedTool is an echo whose runs are counted; opts adjust its
// declaration.
func countedTool(id string, runs *atomic.Int32, opts ...func(*tools.Declaration)) tools.Tool {
	return tool(decl(id, opts...), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		runs.Add(1)
		return in, env.State.Put("test", "last", []byte(in.Msg))
	})
}

// approved proposes and approves an intent of tool with input.
func approved(t *testing.T, rt *tgruntime.Runtime, tool, input string) *tgruntime.Intent {
	t.Helper()
	in, err := rt.Propose(context.Background(), invoke(tool, input))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(context.Background(), in.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	return in
}

// The execution controller document (001) §4: approval, hash included, is
// verified (step 3) before eligibility (step 4, "already executed"). A
// wrong hash on an intent that ran is a hash mismatch and gets nothing of
// the stored outcome; only the right hash learns that it ran, and sees
// what it returned.
func TestIntent_HashCheckedBeforeExecuted(t *testing.T) {
	var runs atomic.Int32
	rt, _ := openRuntime(t, nil, countedTool("test.counted", &runs))
	in := approved(t, rt, "test.counted", `{"msg":"secret output"}`)
	other := approved(t, rt, "test.counted", `{"msg":"other"}`)
	first, err := execIntent(rt, in.ID, in.Hash)
	if err != nil || first.State != lifecycle.Completed {
		t.Fatalf("first execution: %v", err)
	}
	for name, hash := range map[string]string{
		"zeros":                 strings.Repeat("0", 64),
		"another intent's hash": other.Hash,
		"one digit changed":     flipDigit(in.Hash),
	} {
		res, err := execIntent(rt, in.ID, hash)
		if intentCode(err) != "intent_hash_mismatch" {
			t.Errorf("%s: err = %v; want intent_hash_mismatch", name, err)
		}
		if res != nil {
			t.Errorf("%s: a wrong hash got a result: %+v (output %s)", name, res, res.Output)
		}
	}
	res, err := execIntent(rt, in.ID, in.Hash)
	if intentCode(err) != "intent_already_executed" || res == nil || string(res.Output) != string(first.Output) {
		t.Fatalf("the right hash: %v, %+v; want already executed with the stored output", err, res)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
}

func flipDigit(h string) string {
	b := []byte(h)
	if b[0] == '0' {
		b[0] = '1'
	} else {
		b[0] = '0'
	}
	return string(b)
}

// The execution adapter document (000) rule 5 and the execution controller
// document (001) §2: an intent's execution is never retried, even of an
// idempotent tool after a failure the retry policy would retry: a timeout,
// or no free execution slot (refused before the claim: the intent stays
// approved, and only a person's new request runs it). The same calls
// without an intent are retried, so the policy is not what stops them.
func TestIntent_NeverRetried(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		var runs atomic.Int32
		slow := tool(decl("test.slow", idempotent, limit(30*time.Millisecond)), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			runs.Add(1)
			<-ctx.Done()
			return msg{}, ctx.Err()
		})
		rt, _ := openRuntime(t, &tgruntime.Options{Retry: tgruntime.RetryPolicy{MaxRetries: 3}}, slow)
		res, err := rt.Execute(context.Background(), invoke("test.slow", `{"msg":"plain"}`))
		if !errors.Is(err, tgruntime.ErrTimeout) || len(res.Attempts) != 4 {
			t.Fatalf("without an intent: %v, %d attempts; want a timeout retried 3 times", err, len(res.Attempts))
		}
		runs.Store(0)

		in := approved(t, rt, "test.slow", `{"msg":"once"}`)
		res, err = execIntent(rt, in.ID, in.Hash)
		if !errors.Is(err, tgruntime.ErrTimeout) || res == nil || len(res.Attempts) != 1 {
			t.Fatalf("intent: %v, %+v; want one timed-out attempt", err, res)
		}
		if _, err := execIntent(rt, in.ID, in.Hash); intentCode(err) != "intent_already_executed" {
			t.Fatalf("second request: %v; want intent_already_executed", err)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("the intent's tool ran %d times", n)
		}
	})

	t.Run("no free slot", func(t *testing.T) {
		var runs atomic.Int32
		started, release := make(chan struct{}), make(chan struct{})
		block := tool(decl("test.block"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			close(started)
			<-release
			return in, nil
		})
		rt, _ := openRuntime(t, &tgruntime.Options{MaxConcurrent: 1, SlotWait: -1, Retry: tgruntime.RetryPolicy{MaxRetries: 3}},
			block, countedTool("test.idem", &runs, idempotent))
		in := approved(t, rt, "test.idem", `{"msg":"once"}`)
		var wg sync.WaitGroup
		free := sync.OnceFunc(func() { close(release); wg.Wait() })
		defer free() // also when the test fails
		wg.Go(func() { rt.Execute(context.Background(), invoke("test.block", `{"msg":"hold"}`)) })
		<-started // the only slot is taken

		res, err := rt.Execute(context.Background(), invoke("test.idem", `{"msg":"plain"}`))
		if !errors.Is(err, tgruntime.ErrResource) || len(res.Attempts) != 4 {
			t.Fatalf("without an intent: %v, %d attempts; want no slot, retried 3 times", err, len(res.Attempts))
		}
		res, err = execIntent(rt, in.ID, in.Hash)
		var re *tgruntime.ResourceError
		if !errors.As(err, &re) || !re.Transient || res == nil || len(res.Attempts) != 1 {
			t.Fatalf("intent: %v, %+v; want one attempt refused for want of a slot", err, res)
		}
		if got, err := rt.Intent(context.Background(), in.ID); err != nil || got.Status != tgruntime.IntentApproved {
			t.Fatalf("after a refusal before its claim: %+v, %v; want still approved", got, err)
		}
		free()
		if n := runs.Load(); n != 0 {
			t.Fatalf("the tool ran %d times without a slot", n)
		}

		// A person asks again, once a slot is free: it runs, once.
		if res, err := execIntent(rt, in.ID, in.Hash); err != nil || res.State != lifecycle.Completed || len(res.Attempts) != 1 {
			t.Fatalf("the person's new request: %v", err)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("the tool ran %d times", n)
		}
	})
}

// The execution controller document (001) §6 and rule 4: an executed
// record that cannot be read (partial JSON, as a torn write would leave,
// edited into the real bbolt file below the store's API) fails closed: a
// StateError, the tool does not run, and the intent is not reported as
// "already executed" with a stored outcome, for an intent that ran and for
// one that never did.
func TestIntent_CorruptExecutedRecordFailsClosed(t *testing.T) {
	var runs atomic.Int32
	reg := tools.NewRegistry()
	if err := reg.Register(countedTool("test.counted", &runs)); err != nil {
		t.Fatal(err)
	}
	path := testdb.Path(t, "toolgate.db")
	open := func() *tgruntime.Runtime {
		rt, err := tgruntime.Open(path, &tgruntime.Options{Registry: reg, Grants: grantAll, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	rt := open()
	ran := approved(t, rt, "test.counted", `{"msg":"ran"}`)
	if _, err := execIntent(rt, ran.ID, ran.Hash); err != nil {
		t.Fatal(err)
	}
	never := approved(t, rt, "test.counted", `{"msg":"never"}`)
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	testdb.BboltOnly(t, whyTamper)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		ns, err := tx.Bucket([]byte("state")).CreateBucketIfNotExists([]byte("toolgate.intent.executed"))
		if err != nil {
			return err
		}
		if ns.Get([]byte(ran.ID)) == nil {
			return errors.New("no executed record where the store keeps it: has the layout changed?")
		}
		for _, id := range []string{ran.ID, never.ID} {
			if err := ns.Put([]byte(id), []byte(`{"executionId":"0190`)); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	rt = open()
	defer rt.Close(context.Background())
	for name, in := range map[string]*tgruntime.Intent{"executed": ran, "never executed": never} {
		res, err := execIntent(rt, in.ID, in.Hash)
		if !errors.Is(err, tgruntime.ErrState) {
			t.Errorf("%s: err = %v; want a StateError", name, err)
		}
		if code := intentCode(err); code == "intent_already_executed" || code == "intent_in_flight" {
			t.Errorf("%s: reported as %s from a record that cannot be read", name, code)
		}
		if res != nil && (len(res.Output) != 0 || res.State == lifecycle.Completed) {
			t.Errorf("%s: result %+v (output %s)", name, res, res.Output)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times; once, before the record was damaged", n)
	}
}
