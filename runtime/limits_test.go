package runtime_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// Invocation limits lower the declared ones, never raise them.
func TestExecute_InvocationLimits(t *testing.T) {
	var seen atomic.Value
	slow := tool(decl("test.slow", limit(5*time.Second)), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		if in.Msg != "wait" {
			// Only the calls whose limits are checked: on a loaded machine
			// the first call's tool, abandoned at its 10ms deadline, may
			// start after the next call's.
			seen.Store(env.Limits)
		}
		if in.Msg == "wait" {
			<-ctx.Done()
			return msg{}, ctx.Err()
		}
		return in, nil
	})
	rt, _ := openRuntime(t, &tgruntime.Options{Retry: tgruntime.RetryPolicy{MaxRetries: -1}}, slow)

	inv := invoke("test.slow", `{"msg":"wait"}`)
	inv.Limits = &tools.ResourceLimits{MaxExecutionTime: 10 * time.Millisecond}
	res, err := rt.Execute(context.Background(), inv)
	var te *tgruntime.TimeoutError
	if !errors.As(err, &te) || te.Limit != 10*time.Millisecond {
		t.Fatalf("err = %v, want a timeout after the lowered 10ms", err)
	}
	checkAttempt(t, rt, res, lifecycle.RolledBack, pathAborted)

	inv = invoke("test.slow", `{"msg":"x"}`)
	inv.Limits = &tools.ResourceLimits{MaxFileSize: 10}
	if _, err := rt.Execute(context.Background(), inv); err != nil {
		t.Fatal(err)
	}
	if l := seen.Load().(tools.ResourceLimits); l.MaxFileSize != 10 || l.MaxExecutionTime != 5*time.Second {
		t.Fatalf("the tool saw limits %+v; want maxFileSize lowered, the declared time kept", l)
	}

	for name, l := range map[string]tools.ResourceLimits{
		"raised time":   {MaxExecutionTime: time.Minute},
		"negative size": {MaxOutputBytes: -1},
	} {
		t.Run(name, func(t *testing.T) {
			inv := invoke("test.slow", `{"msg":"x"}`)
			inv.Limits = &l
			res, err := rt.Execute(context.Background(), inv)
			var ve *tgruntime.ValidationError
			if !errors.As(err, &ve) || ve.Phase != "limits" {
				t.Fatalf("err = %v, want a limits ValidationError", err)
			}
			rec := checkAttempt(t, rt, res, lifecycle.Failed, pathFailed)
			if rec.Error.Code != "invalid_limits" {
				t.Fatalf("code %q", rec.Error.Code)
			}
		})
	}
}

// Rule 3 per tool: a tool declaring maxConcurrent runs at most that many
// attempts at once; the next one waits (SlotWait) or gets a ResourceError
// naming the tool, while other tools still find the runtime's slots free.
func TestExecute_ToolSlots(t *testing.T) {
	started, release := make(chan struct{}, 4), make(chan struct{})
	one := tool(decl("test.single", func(d *tools.Declaration) { d.ResourceLimits.MaxConcurrent = 1 }),
		func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			started <- struct{}{}
			<-release
			return in, nil
		})
	rt, _ := openRuntime(t, &tgruntime.Options{MaxConcurrent: 8, SlotWait: -1, Retry: tgruntime.RetryPolicy{MaxRetries: -1}}, one, echo("test.echo"))
	first := make(chan error, 1)
	go func() {
		_, err := rt.Execute(context.Background(), invoke("test.single", `{"msg":"1"}`))
		first <- err
	}()
	<-started

	res, err := rt.Execute(context.Background(), invoke("test.single", `{"msg":"2"}`))
	var re *tgruntime.ResourceError
	if !errors.As(err, &re) || re.Resource != "concurrency" || !re.Transient || !strings.Contains(err.Error(), "test.single@1.0.0") {
		t.Fatalf("second attempt: err = %v; want a transient concurrency ResourceError naming the tool", err)
	}
	checkAttempt(t, rt, res, lifecycle.RolledBack, pathNoSlot)
	if _, err := rt.Execute(context.Background(), invoke("test.echo", `{"msg":"x"}`)); err != nil {
		t.Fatalf("another tool was held back by test.single's limit: %v", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Execute(context.Background(), invoke("test.single", `{"msg":"3"}`)); err != nil {
		t.Fatalf("slot not released: %v", err)
	}

	inv := invoke("test.single", `{"msg":"x"}`)
	inv.Limits = &tools.ResourceLimits{MaxConcurrent: 5}
	if _, err := rt.Execute(context.Background(), inv); !errors.Is(err, tgruntime.ErrValidation) {
		t.Errorf("an invocation set maxConcurrent: err = %v", err)
	}
}

// Waiting for a tool slot holds no global slot: an attempt waiting for its
// tool's slot takes the tool's slot before a global one, so other tools
// still find the global slot free.
func TestExecute_ToolSlotWaitHoldsNoGlobalSlot(t *testing.T) {
	started, release := make(chan struct{}, 4), make(chan struct{})
	single := tool(decl("test.single", func(d *tools.Declaration) { d.ResourceLimits.MaxConcurrent = 1 }),
		func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			started <- struct{}{}
			<-release
			return in, nil
		})
	rt, _ := openRuntime(t, &tgruntime.Options{MaxConcurrent: 2, SlotWait: time.Minute}, single, echo("test.echo"))
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := rt.Execute(context.Background(), invoke("test.single", `{"msg":"x"}`))
			done <- err
		}()
	}
	<-started // one runs (1 of 2 global slots), the other waits for the tool's slot
	if _, err := rt.Execute(context.Background(), invoke("test.echo", `{"msg":"x"}`)); err != nil {
		t.Fatalf("the waiter held a global slot: %v", err)
	}
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// Rule 5 for in-process tools: a CPU-bound tool that checks its context is
// aborted at the deadline, recorded as a timeout, and its writes rolled back.
func TestExecute_CPUBoundToolAbortedAtDeadline(t *testing.T) {
	var spins atomic.Int64
	returned := make(chan struct{}) // closed when the tool returns: it ran, and its write was made
	busy := tool(decl("test.spin", limit(200*time.Millisecond)), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		defer close(returned)
		if err := env.State.Put("test", "last", []byte("dirty")); err != nil {
			return msg{}, err
		}
		x := uint64(1)
		for ctx.Err() == nil {
			for range 10000 {
				x = x*6364136223846793005 + 1442695040888963407
			}
			spins.Add(1)
		}
		return msg{Msg: strconv.FormatUint(x, 10)}, ctx.Err()
	})
	rt, _ := openRuntime(t, &tgruntime.Options{Retry: tgruntime.RetryPolicy{MaxRetries: -1}}, busy)
	res, err := rt.Execute(context.Background(), invoke("test.spin", `{"msg":"x"}`))
	var te *tgruntime.TimeoutError
	if !errors.As(err, &te) || te.Caller || te.Limit != 200*time.Millisecond {
		t.Fatalf("err = %v; want the tool's 200ms timeout", err)
	}
	if res.Error.Code != "timeout" {
		t.Errorf("code = %q; want timeout (error.type on the span)", res.Error.Code)
	}
	checkAttempt(t, rt, res, lifecycle.RolledBack, pathAborted)
	// The tool may start after the deadline on a loaded machine (it runs
	// anyway, and returns at once): wait for it, whenever that is.
	select {
	case <-returned:
	case <-time.After(time.Minute): // a hang guard, not a timing assertion
		t.Fatal("the tool never ran: the test proved nothing")
	}
	if _, ok := stateOf(t, rt); ok {
		t.Error("the aborted tool's write was committed")
	}
}

// The in-process part of rule 6: the runtime bounds the memory it holds for
// a tool, its buffered write-set, by maxMemory, and reports memory_limit.
// (The tool's own heap is not bounded: Go cannot limit one goroutine.)
func TestExecute_WriteSetBoundedByMaxMemory(t *testing.T) {
	hog := tool(decl("test.hog", func(d *tools.Declaration) { d.ResourceLimits.MaxMemory = 1 << 20 }),
		func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			chunk := make([]byte, 64<<10)
			for i := range 1000 { // 64 MB if nothing stopped it
				if err := env.State.Put("test", strconv.Itoa(i), chunk); err != nil {
					return msg{}, err
				}
			}
			return in, nil
		})
	rt, _ := openRuntime(t, nil, hog)
	res, err := rt.Execute(context.Background(), invoke("test.hog", `{"msg":"x"}`))
	var re *tgruntime.ResourceError
	if !errors.As(err, &re) || re.Resource != "memory_limit" || res.Error.Code != "memory_limit" {
		t.Fatalf("err = %v; want a memory_limit ResourceError", err)
	}
	checkAttempt(t, rt, res, lifecycle.RolledBack, pathAborted)
	if v, ok, _ := rt.StateValue(context.Background(), "test", "0"); ok {
		t.Fatalf("a write of the aborted attempt is visible: %d bytes", len(v))
	}
}

// Rewriting one key does not add up: the write-set holds its last value
// only, so the bound counts that.
func TestExecute_WriteSetCountsOverwritesOnce(t *testing.T) {
	rewriter := tool(decl("test.rewrite", func(d *tools.Declaration) { d.ResourceLimits.MaxMemory = 1 << 20 }),
		func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			chunk := make([]byte, 64<<10)
			for range 100 { // 6.4 MB written, 64 KiB buffered
				if err := env.State.Put("test", "same", chunk); err != nil {
					return msg{}, err
				}
			}
			return in, nil
		})
	rt, _ := openRuntime(t, nil, rewriter)
	if _, err := rt.Execute(context.Background(), invoke("test.rewrite", `{"msg":"x"}`)); err != nil {
		t.Fatalf("rewriting one key hit the limit: %v", err)
	}
}
