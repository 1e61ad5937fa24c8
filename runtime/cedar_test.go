package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// anyTool is a tool whose input is one required field of type typ (for
// "array", of strings), that writes its input to state test/last and
// returns {"msg": "ran"}.
func anyTool(id, field, typ string) tools.Tool {
	d := decl(id)
	items := ""
	if typ == "array" {
		items = `,"items":{"type":"string","maxLength":64},"maxItems":16`
	}
	if typ == "string" {
		items = `,"maxLength":64`
	}
	d.InputSchema = json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","additionalProperties":false,` +
		`"required":["` + field + `"],"properties":{"` + field + `":{"type":"` + typ + `","description":"the ` + field + `"` + items + `}}}`)
	return tools.NewTyped(d, func(ctx context.Context, env *tools.Env, in map[string]any) (msg, error) {
		b, _ := json.Marshal(in)
		return msg{Msg: "ran"}, env.State.Put("test", "last", b)
	})
}

const cedarShop = `
@id("refund-over-100")
@approval("finance")
forbid(principal, action in Toolgate::Action::"shop.refund", resource)
when { context.input.amount > 100 };

@id("push-main")
@approval
forbid(principal, action == Toolgate::Action::"git.push@1.0.0", resource)
when { context.input.branch == "main" };

@id("no-kubectl-delete")
forbid(principal == Toolgate::Principal::"ci-bot", action == Toolgate::Action::"kubectl@1.0.0", resource)
unless { context.input.args.contains("get") };
`

// cedarPolicy writes a JSON policy granting "tester" and "ci-bot" the
// test capability, with the Cedar file src and the group finance (fiona).
func cedarPolicy(t *testing.T, src string) *capability.Policy {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "shop.cedar"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	pj := `{"version": 1, "principals": {"tester": ["state.write:test"], "ci-bot": ["state.write:test"]},
  "cedar": ["shop.cedar"], "groups": {"finance": ["fiona"]}}`
	if err := os.WriteFile(filepath.Join(dir, "policy.json"), []byte(pj), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := capability.LoadPolicy(filepath.Join(dir, "policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func openShop(t *testing.T) *tgruntime.Runtime {
	t.Helper()
	rt, _ := openRuntime(t, &tgruntime.Options{Policy: cedarPolicy(t, cedarShop)},
		anyTool("shop.refund", "amount", "integer"),
		anyTool("git.push", "branch", "string"),
		anyTool("kubectl", "args", "array"),
	)
	return rt
}

// A Cedar @approval policy makes a call with some arguments need a person:
// called directly it is DENIED, recorded with the policy's id and the
// policy set's revision; the same tool with other arguments runs.
func TestCedar_ApprovalByArguments(t *testing.T) {
	rt := openShop(t)
	ctx := context.Background()
	rev := rt.Policy().Rules().Revision()
	cases := []struct {
		tool, input string
		approval    bool
		policy      string
	}{
		{"shop.refund", `{"amount": 40}`, false, ""},
		{"shop.refund", `{"amount": 100}`, false, ""},
		{"shop.refund", `{"amount": 250}`, true, "refund-over-100"},
		{"git.push", `{"branch": "topic"}`, false, ""},
		{"git.push", `{"branch": "main"}`, true, "push-main"},
	}
	for _, c := range cases {
		res, err := rt.Execute(ctx, invoke(c.tool, c.input))
		if !c.approval {
			if err != nil || res.State != lifecycle.Completed {
				t.Errorf("%s %s: %v", c.tool, c.input, err)
			}
			ev := eventIn(t, rt, res.ExecutionID, lifecycle.Authorized)
			if ev.Decision == nil || ev.Decision.Cedar == nil || ev.Decision.Cedar.Effect != "allow" || ev.Decision.Cedar.Revision != rev {
				t.Errorf("%s %s: the decision's record: %+v", c.tool, c.input, ev.Decision)
			}
			continue
		}
		if !errors.Is(err, tgruntime.ErrAuthorization) || res.State != lifecycle.Denied || !strings.Contains(err.Error(), "requires an approved intent (Cedar policy "+c.policy) {
			t.Errorf("%s %s: %v, %v", c.tool, c.input, err, res.State)
			continue
		}
		if res.Error == nil || res.Error.Code != "approval_required" {
			t.Errorf("%s %s: the denial's code: %+v", c.tool, c.input, res.Error)
		}
		ev := eventIn(t, rt, res.ExecutionID, lifecycle.Denied)
		if d := ev.Decision; d == nil || d.Cedar == nil || d.Cedar.Effect != "approval" || !slices.Equal(d.Cedar.Policies, []string{c.policy}) || d.Cedar.Revision != rev {
			t.Errorf("%s %s: the denial's record: %+v", c.tool, c.input, ev.Decision)
		}
	}
}

// Approval restricted to a group: an approver outside it is refused and
// nothing is recorded; a member's approval runs the call once. An intent
// that needs any approver runs once anyone approved it.
func TestCedar_ApproverGroup(t *testing.T) {
	rt := openShop(t)
	ctx := context.Background()
	in, err := rt.Propose(ctx, invoke("shop.refund", `{"amount": 250}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(ctx, in.ID, "bob"); intentCode(err) != "intent_approver_not_allowed" || !strings.Contains(err.Error(), "bob is not a member of finance") {
		t.Fatalf("an approver outside the group: %v", err)
	}
	if got, _ := rt.Intent(ctx, in.ID); got.Status != tgruntime.IntentPending {
		t.Fatalf("after the refused approval: %s", got.Status)
	}
	if _, err := rt.Approve(ctx, in.ID, "fiona"); err != nil {
		t.Fatal(err)
	}
	res, err := execIntent(rt, in.ID, in.Hash)
	if err != nil || res.State != lifecycle.Completed {
		t.Fatalf("approved by a member: %v", err)
	}
	if v, _ := stateOf(t, rt); v != `{"amount":250}` {
		t.Fatalf("state %q", v)
	}
	push, err := rt.Propose(ctx, invoke("git.push", `{"branch": "main"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(ctx, push.ID, "bob"); err != nil {
		t.Fatalf("@approval without a group: anyone approves: %v", err)
	}
	if res, err := execIntent(rt, push.ID, push.Hash); err != nil || res.State != lifecycle.Completed {
		t.Fatalf("approved push: %v", err)
	}
}

// An intent approved while the policy asked no group, run once the policy
// restricts approval to a group its approver is not in, is denied.
func TestCedar_ApproverGroupCheckedAtExecution(t *testing.T) {
	noGroup := strings.Replace(cedarShop, `@approval("finance")`, `@approval`, 1)
	dir := t.TempDir()
	db := filepath.Join(dir, "db")
	tl := anyTool("shop.refund", "amount", "integer")
	gp := anyTool("git.push", "branch", "string")
	kc := anyTool("kubectl", "args", "array")
	open := func(src string) *tgruntime.Runtime {
		reg := tools.NewRegistry()
		for _, x := range []tools.Tool{tl, gp, kc} {
			if err := reg.Register(x); err != nil {
				t.Fatal(err)
			}
		}
		rt, err := tgruntime.Open(db, &tgruntime.Options{Registry: reg, Policy: cedarPolicy(t, src), NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	ctx := context.Background()
	rt := open(noGroup)
	in, err := rt.Propose(ctx, invoke("shop.refund", `{"amount": 250}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(ctx, in.ID, "bob"); err != nil {
		t.Fatal(err)
	}
	rt.Close(ctx)
	rt = open(cedarShop)
	defer rt.Close(ctx)
	res, err := execIntent(rt, in.ID, in.Hash)
	if !errors.Is(err, tgruntime.ErrAuthorization) || res.State != lifecycle.Denied || !strings.Contains(err.Error(), "approved by bob, who is not a member of finance") {
		t.Fatalf("got %v, %v", err, res.State)
	}
}

// A Cedar forbid overrides a capability grant, on the arguments: ci-bot
// may run kubectl get, never kubectl delete; another principal may.
func TestCedar_ForbidOverridesGrant(t *testing.T) {
	rt := openShop(t)
	ctx := context.Background()
	bot := func(input string) tgruntime.Invocation {
		inv := invoke("kubectl", input)
		inv.Principal = "ci-bot"
		return inv
	}
	if res, err := rt.Execute(ctx, bot(`{"args": ["get", "pods"]}`)); err != nil || res.State != lifecycle.Completed {
		t.Fatalf("kubectl get: %v", err)
	}
	res, err := rt.Execute(ctx, bot(`{"args": ["delete", "pod", "web-1"]}`))
	if !errors.Is(err, tgruntime.ErrAuthorization) || res.State != lifecycle.Denied || !strings.Contains(err.Error(), "forbidden by Cedar policy no-kubectl-delete") {
		t.Fatalf("kubectl delete: %v, %v", err, res.State)
	}
	if res.Error == nil || res.Error.Code != "cedar_forbidden" {
		t.Errorf("the denial's code: %+v", res.Error)
	}
	ev := eventIn(t, rt, res.ExecutionID, lifecycle.Denied)
	if d := ev.Decision; d.Cedar == nil || d.Cedar.Effect != "deny" || !slices.Equal(d.Cedar.Policies, []string{"no-kubectl-delete"}) || len(d.Missing) != 0 {
		t.Fatalf("the denial's record: %+v %+v", d, d.Cedar)
	}
	if v, _ := stateOf(t, rt); v != `{"args":["get","pods"]}` {
		t.Fatalf("the denied call ran: state %q", v)
	}
	if res, err := rt.Execute(ctx, invoke("kubectl", `{"args": ["delete", "pod", "web-1"]}`)); err != nil || res.State != lifecycle.Completed {
		t.Fatalf("tester's kubectl delete: %v", err)
	}
	// Cedar never grants: a principal without the capability is denied
	// even where no policy forbids.
	inv := invoke("kubectl", `{"args": ["get"]}`)
	inv.Principal = "mallory"
	if res, err := rt.Execute(ctx, inv); !errors.Is(err, tgruntime.ErrAuthorization) || res.State != lifecycle.Denied {
		t.Fatalf("no grant: %v", err)
	}
}

// A policy set naming an action for no registered tool is refused when
// the runtime opens, with the file and position.
func TestCedar_UnknownActionRefused(t *testing.T) {
	p := cedarPolicy(t, "\n\nforbid(principal, action == Toolgate::Action::\"shop.refnud\", resource);")
	reg := tools.NewRegistry()
	if err := reg.Register(anyTool("shop.refund", "amount", "integer")); err != nil {
		t.Fatal(err)
	}
	_, err := tgruntime.Open(filepath.Join(t.TempDir(), "db"), &tgruntime.Options{Registry: reg, Policy: p, NoSync: true, Now: time.Now})
	if err == nil || !strings.Contains(err.Error(), `shop.cedar:3:1: action Toolgate::Action::"shop.refnud" names no registered tool`) {
		t.Fatalf("got %v", err)
	}
}
