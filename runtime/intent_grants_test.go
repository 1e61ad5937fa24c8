package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// An approval says what may run, not with which access: an approved
// intent executed by a principal without the tool's capabilities is
// DENIED (RFC-0001 §5.1 rule 2), the tool does not run, and the intent is
// not used up: the same intent then runs for a principal who holds them.
func TestIntent_ApprovedStillNeedsGrants(t *testing.T) {
	var runs atomic.Int32
	counted := tool(decl("test.counted"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		runs.Add(1)
		return in, nil
	})
	rt, _ := openRuntime(t, nil, counted)
	ctx := context.Background()
	in, err := rt.Propose(ctx, invoke("test.counted", `{"msg":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	res, err := rt.Execute(ctx, tgruntime.Invocation{IntentID: in.ID, IntentHash: in.Hash, Principal: "nobody"})
	if !errors.Is(err, tgruntime.ErrAuthorization) || res == nil || res.State != lifecycle.Denied || runs.Load() != 0 {
		t.Fatalf("an approved intent run without the grants: %+v, %v, %d runs", res, err, runs.Load())
	}
	if got, err := rt.Intent(ctx, in.ID); err != nil || got.Status != tgruntime.IntentApproved {
		t.Fatalf("after the denial the intent is %v, %v; want still approved", got, err)
	}
	if res, err := execIntent(rt, in.ID, in.Hash); err != nil || res.State != lifecycle.Completed || runs.Load() != 1 {
		t.Fatalf("with the grants: %+v, %v", res, err)
	}
}
