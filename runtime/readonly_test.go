package runtime_test

import (
	"context"
	"errors"
	"testing"

	"github.com/toolgate/toolgate/capability"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// A call stores a claim before its tool runs unless nothing asks for one: a
// read-only tool (every capability it may require a read), without an
// idempotency key or an intent. Such a call's record, with the events of
// every transition, is stored once, when it ends; while it runs the store
// holds no trace of it. Every other call is claimed (EXECUTING, on disk)
// before its tool runs.
func TestReadOnlyCall_ClaimedOnlyWhenItMustBe(t *testing.T) {
	reader := func(d *tools.Declaration) {
		d.RequiredCapabilities = []capability.Capability{capability.MustParse("state.read:test")}
	}
	// Each tool reports, from inside its run, what the store holds under
	// the execution's id.
	type seen struct {
		state string
		err   error
	}
	var rt *tgruntime.Runtime
	look := func(ctx context.Context, env *tools.Env) seen {
		rec, err := tgruntime.StoreOf(rt).Get(ctx, env.ExecutionID)
		if err != nil {
			return seen{err: err}
		}
		return seen{state: rec.State}
	}
	running := make(chan seen, 1)
	body := func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		running <- look(ctx, env)
		return in, nil
	}
	rt, _ = openRuntime(t, &tgruntime.Options{Grants: map[string][]capability.Capability{"tester": {
		capability.MustParse("state.read:test"), capability.MustParse("state.write:test"),
	}}},
		tool(decl("test.reader", reader), body),
		tool(decl("test.approved", reader, func(d *tools.Declaration) { d.RequiresApproval = true }), body),
		tool(decl("test.writer"), body),
	)
	ctx := context.Background()
	in, err := rt.Propose(ctx, invoke("test.approved", `{"msg":"i"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		inv     tgruntime.Invocation
		claimed bool
	}{
		{"read-only", invoke("test.reader", `{"msg":"r"}`), false},
		{"read-only with a key", func() tgruntime.Invocation {
			inv := invoke("test.reader", `{"msg":"k"}`)
			inv.IdempotencyKey = "k-1"
			return inv
		}(), true},
		{"read-only under an intent", tgruntime.Invocation{IntentID: in.ID, IntentHash: in.Hash, Principal: "tester"}, true},
		{"writer", invoke("test.writer", `{"msg":"w"}`), true},
	} {
		res, err := rt.Execute(ctx, tc.inv)
		if err != nil || res.State != "COMPLETED" {
			t.Fatalf("%s: Execute = %+v, %v", tc.name, res, err)
		}
		got := <-running
		switch {
		case tc.claimed && got.state != "EXECUTING":
			t.Errorf("%s: while the tool ran the store held %q (%v); want its EXECUTING claim", tc.name, got.state, got.err)
		case !tc.claimed && !errors.Is(got.err, txn.ErrNotFound):
			t.Errorf("%s: while the tool ran the store held %q (%v); want nothing", tc.name, got.state, got.err)
		}
		// Whether claimed or not, the record and its events are whole.
		rec := record(t, rt, res.ExecutionID)
		if p := statePath(rec); len(p) != 5 || p[4] != "COMPLETED" {
			t.Errorf("%s: the record's path is %v", tc.name, p)
		}
		evs := auditEventsOf(t, rt, res.ExecutionID)
		if len(evs) != len(rec.AuditEvents) || len(evs) != 4 {
			t.Errorf("%s: %d events in the log, %d listed by the record; want 4 (one per transition)", tc.name, len(evs), len(rec.AuditEvents))
		}
		ds, err := tgruntime.NewReader(tgruntime.StoreOf(rt)).VerifyExecution(ctx, rec)
		if err != nil || len(ds) != 0 {
			t.Errorf("%s: VerifyExecution = %v, %v", tc.name, ds, err)
		}
	}
}
