package runtime_test

import (
	"context"
	"testing"

	"github.com/toolgate/toolgate/audit"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// Options.OnPropose sees each committed proposal once, with a copy; a
// refused proposal is not reported, and a hook that panics does not fail
// the proposal.
func TestOnPropose(t *testing.T) {
	var seen []*tgruntime.Intent
	panics := false
	opts := &tgruntime.Options{OnPropose: func(in *tgruntime.Intent) {
		seen = append(seen, in)
		in.Input[0] = 'X' // the hook's copy: the runtime's is not changed
		if panics {
			panic("hook")
		}
	}}
	echo := tool(decl("test.echo"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) { return in, nil })
	rt, _ := openRuntime(t, opts, echo)
	ctx := context.Background()
	in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.echo", Input: []byte(`{"msg":"a"}`), Principal: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0].ID != in.ID || seen[0].Proposer != "agent" || seen[0].Status != tgruntime.IntentPending {
		t.Fatalf("hook saw %+v, want the proposal %s", seen, in.ID)
	}
	if string(in.Input) != `{"msg":"a"}` {
		t.Fatalf("the hook's change reached the caller's intent: %s", in.Input)
	}
	if _, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.echo", Input: []byte(`{"msg":7}`), Principal: "agent"}); err == nil {
		t.Fatal("invalid input proposed")
	}
	if len(seen) != 1 {
		t.Fatalf("a refused proposal was reported: %d calls", len(seen))
	}
	panics = true
	in2, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.echo", Input: []byte(`{"msg":"b"}`), Principal: "agent"})
	if err != nil || in2 == nil || len(seen) != 2 {
		t.Fatalf("a panicking hook failed the proposal: %v, %d calls", err, len(seen))
	}
}

// VerifyAuditLog through the runtime agrees with the log: valid, with one
// event per step of the proposal.
func TestVerifyAuditLog(t *testing.T) {
	echo := tool(decl("test.echo"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) { return in, nil })
	rt, _ := openRuntime(t, nil, echo)
	ctx := context.Background()
	if _, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.echo", Input: []byte(`{"msg":"a"}`), Principal: "agent"}); err != nil {
		t.Fatal(err)
	}
	var v audit.Verifier
	if err := rt.VerifyAuditLog(ctx, &v); err != nil || v.Len() != 1 {
		t.Fatalf("VerifyAuditLog: %v, %d events", err, v.Len())
	}
}
