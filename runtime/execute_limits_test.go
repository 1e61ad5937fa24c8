package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// An invocation's limits may only lower the declared ones, field by field:
// zero keeps a declared limit, a value equal to it or below it is taken,
// one above it or below zero is refused (a limits ValidationError naming
// every refused field, recorded before the tool runs), and a limit the
// tool does not declare (zero) may be set to anything positive.
// MaxConcurrent is the tool's own and cannot be set by an invocation.
func TestExecute_LimitsMayOnlyBeLowered(t *testing.T) {
	var seen atomic.Value
	var runs atomic.Int32
	body := func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		runs.Add(1)
		seen.Store(env.Limits)
		return in, nil
	}
	declared := tools.ResourceLimits{MaxExecutionTime: 5 * time.Second, MaxMemory: 1000, MaxFileSize: 1000, MaxOutputBytes: 1000}
	bounded := tool(decl("test.bounded", func(d *tools.Declaration) { d.ResourceLimits = declared }), body)
	open := tool(decl("test.open", func(d *tools.Declaration) { d.ResourceLimits = tools.ResourceLimits{MaxExecutionTime: 5 * time.Second} }), body)
	rt, _ := openRuntime(t, &tgruntime.Options{Retry: tgruntime.RetryPolicy{MaxRetries: -1}}, bounded, open)
	ctx := context.Background()

	for _, tc := range []struct {
		name   string
		tool   string
		limits tools.ResourceLimits
		want   tools.ResourceLimits // what the tool sees
	}{
		{"zero keeps every declared limit", "test.bounded", tools.ResourceLimits{}, declared},
		{"equal to the declared", "test.bounded", declared, declared},
		{"one below the declared", "test.bounded",
			tools.ResourceLimits{MaxExecutionTime: 5*time.Second - 1, MaxMemory: 999, MaxFileSize: 999, MaxOutputBytes: 999},
			tools.ResourceLimits{MaxExecutionTime: 5*time.Second - 1, MaxMemory: 999, MaxFileSize: 999, MaxOutputBytes: 999}},
		{"one field lowered", "test.bounded", tools.ResourceLimits{MaxMemory: 10},
			tools.ResourceLimits{MaxExecutionTime: 5 * time.Second, MaxMemory: 10, MaxFileSize: 1000, MaxOutputBytes: 1000}},
		{"undeclared limits set", "test.open", tools.ResourceLimits{MaxMemory: 1 << 40, MaxFileSize: 7, MaxOutputBytes: 1 << 30},
			tools.ResourceLimits{MaxExecutionTime: 5 * time.Second, MaxMemory: 1 << 40, MaxFileSize: 7, MaxOutputBytes: 1 << 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := invoke(tc.tool, `{"msg":"x"}`)
			inv.Limits = &tc.limits
			if _, err := rt.Execute(ctx, inv); err != nil {
				t.Fatal(err)
			}
			if got := seen.Load().(tools.ResourceLimits); got != tc.want {
				t.Fatalf("the tool saw %+v; want %+v", got, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		name   string
		limits tools.ResourceLimits
		says   []string
	}{
		{"time one above", tools.ResourceLimits{MaxExecutionTime: 5*time.Second + 1}, []string{"maxExecutionTime 5.000000001s is more than the declared 5s"}},
		{"memory one above", tools.ResourceLimits{MaxMemory: 1001}, []string{"maxMemory 1001 bytes is more than the declared 1000 bytes"}},
		{"file size one above", tools.ResourceLimits{MaxFileSize: 1001}, []string{"maxFileSize 1001 bytes is more than the declared 1000 bytes"}},
		{"output one above", tools.ResourceLimits{MaxOutputBytes: 1001}, []string{"maxOutputBytes 1001 bytes is more than the declared 1000 bytes"}},
		{"negative", tools.ResourceLimits{MaxExecutionTime: -1, MaxMemory: -1}, []string{"maxExecutionTime -1ns is negative", "maxMemory -1 bytes is negative"}},
		{"max concurrent", tools.ResourceLimits{MaxConcurrent: 1}, []string{"maxConcurrent is the tool's own limit"}},
		{"every refusal named", tools.ResourceLimits{MaxFileSize: -5, MaxOutputBytes: 2000, MaxConcurrent: 3},
			[]string{"maxFileSize -5 bytes is negative", "maxOutputBytes 2000 bytes is more than the declared", "maxConcurrent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runs.Load()
			inv := invoke("test.bounded", `{"msg":"x"}`)
			inv.Limits = &tc.limits
			res, err := rt.Execute(ctx, inv)
			var ve *tgruntime.ValidationError
			if !errors.As(err, &ve) || ve.Phase != "limits" || res == nil || res.State != "FAILED" {
				t.Fatalf("got %+v, %v; want a limits ValidationError, FAILED", res, err)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not say %q", err.Error(), s)
				}
			}
			if runs.Load() != before {
				t.Fatal("the tool ran")
			}
		})
	}
}
