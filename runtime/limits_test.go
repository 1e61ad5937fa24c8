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

// Invocation limits lower the declared ones, never raise them.
func TestExecute_InvocationLimits(t *testing.T) {
	var seen atomic.Value
	slow := tool(decl("test.slow", limit(5*time.Second)), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		seen.Store(env.Limits)
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
