package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// flaky times out on its first n calls, then echoes.
func flaky(n int32, calls *atomic.Int32, opts ...func(*tools.Declaration)) tools.Tool {
	opts = append(opts, limit(200*time.Millisecond)) // generous: the successful attempt must finish within it under -race
	return tool(decl("test.flaky", opts...), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		if calls.Add(1) <= n {
			<-ctx.Done()
			return msg{}, ctx.Err()
		}
		return in, env.State.Put("test", "last", []byte(in.Msg))
	})
}

func TestExecute_RetryPolicy(t *testing.T) {
	cases := []struct {
		name       string
		failures   int32
		idempotent bool
		maxRetries int
		wantTries  int
		wantState  lifecycle.State
	}{
		{"idempotent timeout retried until success", 2, true, 0, 3, lifecycle.Completed},
		{"default maxRetries is 3: four attempts", 10, true, 0, 4, lifecycle.RolledBack},
		{"maxRetries 1", 10, true, 1, 2, lifecycle.RolledBack},
		{"negative maxRetries disables retries", 10, true, -1, 1, lifecycle.RolledBack},
		{"non-idempotent never retried", 1, false, 0, 1, lifecycle.RolledBack},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			var opts []func(*tools.Declaration)
			if tc.idempotent {
				opts = append(opts, idempotent)
			}
			rt, _ := openRuntime(t, &tgruntime.Options{Retry: tgruntime.RetryPolicy{MaxRetries: tc.maxRetries}}, flaky(tc.failures, &calls, opts...))
			res, err := rt.Execute(context.Background(), invoke("test.flaky", `{"msg":"x"}`))
			if len(res.Attempts) != tc.wantTries || int(calls.Load()) != tc.wantTries {
				t.Fatalf("%d attempts, %d calls; want %d", len(res.Attempts), calls.Load(), tc.wantTries)
			}
			if res.State != tc.wantState {
				t.Fatalf("state %s, want %s (%v)", res.State, tc.wantState, err)
			}
			if (err == nil) != (tc.wantState == lifecycle.Completed) {
				t.Fatalf("err = %v", err)
			}
			seen := map[string]bool{}
			for i, a := range res.Attempts {
				if a.Number != i+1 || seen[a.ExecutionID] {
					t.Fatalf("attempt %d: number %d, id %s reused", i, a.Number, a.ExecutionID)
				}
				seen[a.ExecutionID] = true
				rec := record(t, rt, a.ExecutionID) // every attempt is recorded
				if rec.Attempt != i+1 || rec.CallID != res.CallID || rec.State != string(a.State) {
					t.Fatalf("record %+v does not match attempt %+v", rec, a)
				}
				if i < len(res.Attempts)-1 && a.State != lifecycle.RolledBack {
					t.Fatalf("retried attempt ended %s", a.State)
				}
			}
		})
	}
}

// Only ResourceError and TimeoutError are retried, even for idempotent tools.
func TestExecute_NoRetryForOtherErrors(t *testing.T) {
	cases := map[string]func(ctx context.Context, env *tools.Env, in msg) (msg, error){
		"execution error": func(ctx context.Context, env *tools.Env, in msg) (msg, error) { return msg{}, errors.New("boom") },
		"panic":           func(ctx context.Context, env *tools.Env, in msg) (msg, error) { panic("boom") },
		"invalid output": func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			return msg{Msg: string(make([]byte, 100))}, nil
		},
		"limit reached": func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			return msg{}, &tools.LimitError{Limit: "file_size_limit", Max: 1, Got: 2}
		},
	}
	for name, fn := range cases {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int32
			rt, _ := openRuntime(t, nil, tool(decl("test.x", idempotent), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
				calls.Add(1)
				return fn(ctx, env, in)
			}))
			res, err := rt.Execute(context.Background(), invoke("test.x", `{"msg":"x"}`))
			if err == nil || len(res.Attempts) != 1 || calls.Load() != 1 {
				t.Fatalf("err %v, %d attempts, %d calls; want one", err, len(res.Attempts), calls.Load())
			}
		})
	}
	t.Run("validation error", func(t *testing.T) {
		rt, _ := openRuntime(t, nil, echo("test.x", idempotent))
		res, err := rt.Execute(context.Background(), invoke("test.x", `{}`))
		if !errors.Is(err, tgruntime.ErrValidation) || len(res.Attempts) != 1 {
			t.Fatalf("err %v, %d attempts", err, len(res.Attempts))
		}
	})
	t.Run("authorization error", func(t *testing.T) {
		rt, _ := openRuntime(t, nil, echo("test.x", idempotent))
		inv := invoke("test.x", `{"msg":"x"}`)
		inv.Principal = "nobody"
		res, err := rt.Execute(context.Background(), inv)
		if !errors.Is(err, tgruntime.ErrAuthorization) || len(res.Attempts) != 1 {
			t.Fatalf("err %v, %d attempts", err, len(res.Attempts))
		}
	})
}

// blocker occupies an execution slot until released.
func blocker(started chan<- struct{}, release <-chan struct{}) tools.Tool {
	return tool(decl("test.block"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		started <- struct{}{}
		<-release
		return in, nil
	})
}

// Rule 3: no free slot is a ResourceError; the attempt ends ABORTED then
// ROLLED_BACK without running; idempotent tools retry it.
func TestExecute_ResourceUnavailable(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	var calls atomic.Int32
	counted := func(id string, opts ...func(*tools.Declaration)) tools.Tool {
		return tool(decl(id, opts...), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			calls.Add(1)
			return in, nil
		})
	}
	rt, _ := openRuntime(t, &tgruntime.Options{MaxConcurrent: 1, SlotWait: -1, Retry: tgruntime.RetryPolicy{MaxRetries: 2}},
		blocker(started, release), counted("test.once"), counted("test.idem", idempotent))
	done := make(chan error)
	go func() {
		_, err := rt.Execute(context.Background(), invoke("test.block", `{"msg":"x"}`))
		done <- err
	}()
	<-started

	res, err := rt.Execute(context.Background(), invoke("test.once", `{"msg":"x"}`))
	var re *tgruntime.ResourceError
	if !errors.As(err, &re) || !re.Transient || !errors.Is(err, tgruntime.ErrResource) {
		t.Fatalf("err = %v, want transient ResourceError", err)
	}
	checkAttempt(t, rt, res, lifecycle.RolledBack, pathNoSlot)

	res, err = rt.Execute(context.Background(), invoke("test.idem", `{"msg":"x"}`))
	if !errors.Is(err, tgruntime.ErrResource) || len(res.Attempts) != 3 {
		t.Fatalf("idempotent: err %v, %d attempts; want ResourceError after 3", err, len(res.Attempts))
	}
	if calls.Load() != 0 {
		t.Fatal("a tool ran without a slot")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if res, err := rt.Execute(context.Background(), invoke("test.once", `{"msg":"x"}`)); err != nil || res.State != lifecycle.Completed {
		t.Fatalf("after release: %v", err)
	}
}

// Waiting for a slot: a slot freed within SlotWait is taken.
func TestExecute_SlotWait(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	rt, _ := openRuntime(t, &tgruntime.Options{MaxConcurrent: 1, SlotWait: time.Minute}, blocker(started, release), echo("test.echo"))
	go rt.Execute(context.Background(), invoke("test.block", `{"msg":"x"}`))
	<-started
	go func() { time.Sleep(10 * time.Millisecond); close(release) }()
	if res, err := rt.Execute(context.Background(), invoke("test.echo", `{"msg":"x"}`)); err != nil || res.State != lifecycle.Completed {
		t.Fatalf("waited for slot: %v", err)
	}
}

// RFC 7.2.3: a failed attempt releases what it acquired; with one slot, the
// next invocation gets it without waiting.
func TestExecute_ReleasesSlotOnFailure(t *testing.T) {
	fail := tool(decl("test.fail"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) { return msg{}, errors.New("boom") })
	panics := tool(decl("test.panic"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) { panic("boom") })
	rt, _ := openRuntime(t, &tgruntime.Options{MaxConcurrent: 1, SlotWait: -1}, fail, panics, echo("test.echo"))
	for range 3 {
		for _, id := range []string{"test.fail", "test.panic"} {
			if _, err := rt.Execute(context.Background(), invoke(id, `{"msg":"x"}`)); !errors.Is(err, tgruntime.ErrExecution) {
				t.Fatalf("%s: %v", id, err)
			}
		}
	}
	if _, err := rt.Execute(context.Background(), invoke("test.echo", `{"msg":"x"}`)); err != nil {
		t.Fatalf("slot not released: %v", err)
	}
}
