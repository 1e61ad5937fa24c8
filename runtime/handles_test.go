package runtime_test

import (
	"context"
	"errors"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// Rule 7 for state: a tool reaches only the namespaces granted to it.
func TestExecute_StateNamespaces(t *testing.T) {
	try := func(op func(s tools.State) error) tools.Tool {
		return tool(decl("test.ns", func(d *tools.Declaration) {
			d.RequiredCapabilities = []capability.Capability{capability.MustParse("state.read"), capability.MustParse("state.write")}
		}),
			func(ctx context.Context, env *tools.Env, in msg) (msg, error) { return in, op(env.State) })
	}
	put := func(ns string) func(s tools.State) error {
		return func(s tools.State) error { return s.Put(ns, "k", []byte("v")) }
	}
	get := func(ns string) func(s tools.State) error {
		return func(s tools.State) error { _, _, err := s.Get(ns, "k"); return err }
	}
	del := func(ns string) func(s tools.State) error {
		return func(s tools.State) error { return s.Delete(ns, "k") }
	}
	grants := map[string][]capability.Capability{"tester": {
		capability.MustParse("state.write:test"), capability.MustParse("state.read:ro"),
	}}
	for _, tc := range []struct {
		name  string
		op    func(s tools.State) error
		allow bool
	}{
		{"put granted", put("test"), true},
		{"get granted by write", get("test"), true},
		{"get granted by read", get("ro"), true},
		{"put with read only", put("ro"), false},
		{"delete with read only", del("ro"), false},
		{"put ungranted", put("orders"), false},
		{"get ungranted", get("orders"), false},
		{"put below granted", put("test/sub"), true},
		{"prefix is not below", put("testing"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, _ := openRuntime(t, &tgruntime.Options{Grants: grants}, try(tc.op))
			res, err := rt.Execute(context.Background(), invoke("test.ns", `{"msg":"x"}`))
			if tc.allow {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			var ae *tgruntime.AuthorizationError
			if !errors.As(err, &ae) || !errors.Is(err, tools.ErrAccessDenied) || res.State != lifecycle.RolledBack {
				t.Fatalf("err = %v, state %s; want a recorded handle refusal", err, res.State)
			}
		})
	}
}

// Least privilege: a tool's handles expose what it declared, narrowed to
// what the principal holds; a grant the tool did not declare, or the part of
// a broader grant beyond the declared scope, is out of its reach.
func TestExecute_HandlesExposeOnlyTheDeclared(t *testing.T) {
	grants := map[string][]capability.Capability{"tester": {
		capability.MustParse("state.write"), capability.MustParse("state.read:audit"),
	}}
	for _, tc := range []struct {
		name     string
		required []string
		ns       string
		allow    bool
	}{
		{"declared scope", []string{"state.write:orders"}, "orders", true},
		{"beyond the declared scope, inside the grant", []string{"state.write:orders"}, "users", false},
		{"not declared at all", nil, "orders", false},
		{"declared read only", []string{"state.read:audit"}, "audit", false}, // the op is a put
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := capability.ParseList(tc.required)
			if err != nil {
				t.Fatal(err)
			}
			rt, _ := openRuntime(t, &tgruntime.Options{Grants: grants}, tool(decl("test.lp", func(d *tools.Declaration) { d.RequiredCapabilities = req }),
				func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
					return in, env.State.Put(tc.ns, "k", []byte("v"))
				}))
			res, err := rt.Execute(context.Background(), invoke("test.lp", `{"msg":"x"}`))
			if tc.allow {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if !errors.Is(err, tools.ErrAccessDenied) || res.State != lifecycle.RolledBack {
				t.Fatalf("err = %v, state %s; want the handle to refuse", err, res.State)
			}
		})
	}
}

// A tool that rewrites its Env's grants changes nothing for later calls.
func TestExecute_GrantsAreCopies(t *testing.T) {
	policy := map[string][]capability.Capability{"tester": {capability.MustParse("state.write:test")}}
	rt, _ := openRuntime(t, &tgruntime.Options{Grants: policy}, tool(decl("test.meddle"),
		func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			env.Grants[0] = capability.MustParse("filesystem.read")
			return in, nil
		}))
	policy["tester"][0] = capability.MustParse("process.exec:rm") // the caller's map changes after Open
	for range 2 {
		if _, err := rt.Execute(context.Background(), invoke("test.meddle", `{"msg":"x"}`)); err != nil {
			t.Fatalf("grants changed under the runtime: %v", err)
		}
	}
}

// An abandoned tool keeps its execution slot until it really returns.
func TestExecute_AbandonedToolKeepsSlot(t *testing.T) {
	release := make(chan struct{})
	rt, _ := openRuntime(t, &tgruntime.Options{MaxConcurrent: 1, SlotWait: -1},
		tool(decl("test.stubborn", limit(20*time.Millisecond)), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			<-release
			return in, nil
		}), echo("test.echo"))
	if _, err := rt.Execute(context.Background(), invoke("test.stubborn", `{"msg":"x"}`)); !errors.Is(err, tgruntime.ErrTimeout) {
		t.Fatalf("err = %v", err)
	}
	if _, err := rt.Execute(context.Background(), invoke("test.echo", `{"msg":"x"}`)); !errors.Is(err, tgruntime.ErrResource) {
		t.Fatalf("while the abandoned tool runs: err = %v, want ResourceError", err)
	}
	close(release)
	rt2 := rt
	deadline := time.Now().Add(10 * time.Second) // a hang guard, not a timing assertion
	for {
		_, err := rt2.Execute(context.Background(), invoke("test.echo", `{"msg":"x"}`))
		if err == nil {
			break
		}
		if !errors.Is(err, tgruntime.ErrResource) || time.Now().After(deadline) {
			t.Fatalf("after the tool returned: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// A context already canceled: the attempt aborts before anything runs, and
// the error says so (not a StateError from Begin).
func TestExecute_CanceledBeforeStart(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo", idempotent))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := rt.Execute(ctx, invoke("test.echo", `{"msg":"x"}`))
	var ee *tgruntime.ExecutionError
	if !errors.As(err, &ee) || !ee.Canceled || errors.Is(err, tgruntime.ErrState) {
		t.Fatalf("err = %v, want a canceled ExecutionError", err)
	}
	checkAttempt(t, rt, res, lifecycle.RolledBack, pathNoSlot)
	if len(res.Attempts) != 1 {
		t.Fatalf("%d attempts", len(res.Attempts))
	}
}

// A tool passing on an error of this package does not borrow its class:
// it is the tool's failure, not retried, not an abort.
func TestExecute_ToolErrorsKeepTheirClass(t *testing.T) {
	var calls int
	rt, _ := openRuntime(t, nil, tool(decl("test.liar", idempotent), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		calls++
		return msg{}, &tgruntime.TimeoutError{Tool: "elsewhere", Limit: time.Second}
	}))
	res, err := rt.Execute(context.Background(), invoke("test.liar", `{"msg":"x"}`))
	if res.Error == nil || res.Error.Type != "ExecutionError" || calls != 1 {
		t.Fatalf("error %+v after %d calls; want one ExecutionError", res.Error, calls)
	}
	checkAttempt(t, rt, res, lifecycle.RolledBack, pathRolled)
	var te *tgruntime.TimeoutError
	if !errors.As(err, &te) || te.Tool != "elsewhere" {
		t.Fatal("the tool's own error must stay reachable with errors.As")
	}
}

func TestExecute_Goexit(t *testing.T) {
	rt, _ := openRuntime(t, nil, tool(decl("test.goexit", idempotent), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		goruntime.Goexit()
		return in, nil
	}))
	res, err := rt.Execute(context.Background(), invoke("test.goexit", `{"msg":"x"}`))
	if !errors.Is(err, tgruntime.ErrExecution) || errors.Is(err, tgruntime.ErrTimeout) || len(res.Attempts) != 1 {
		t.Fatalf("err = %v after %d attempts; want one ExecutionError", err, len(res.Attempts))
	}
}

// Isolation: two attempts that read and write the same key at the same
// time cannot both commit; the loser ends ROLLED_BACK with a StateError
// and its write never lands.
func TestExecute_ConcurrentReadModifyWrite(t *testing.T) {
	read := make(chan struct{}, 2)
	proceed := make(chan struct{})
	inc := tool(decl("test.inc"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		v, _, err := env.State.Get("test", "n")
		if err != nil {
			return msg{}, err
		}
		read <- struct{}{}
		<-proceed // both have read before either writes
		return in, env.State.Put("test", "n", append(v, 'x'))
	})
	rt, _ := openRuntime(t, nil, inc)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := rt.Execute(context.Background(), invoke("test.inc", `{"msg":"x"}`))
			errs <- err
		}()
	}
	<-read
	<-read
	close(proceed)
	var ok, conflicts int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, tgruntime.ErrState) && errors.Is(err, txn.ErrConflict):
			conflicts++
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if ok != 1 || conflicts != 1 {
		t.Fatalf("%d commits, %d conflicts; want one of each", ok, conflicts)
	}
	if v, _, _ := rt.StateValue(context.Background(), "test", "n"); string(v) != "x" {
		t.Fatalf("n = %q, want exactly one increment", v)
	}
}
