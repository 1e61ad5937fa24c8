package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// A call a Cedar policy asks a person about becomes an intent over MCP, as
// a call of a tool requiring approval does, and the answer names the
// policy, the policy set's revision and the approver group; a call the
// policy does not ask about runs; a call a Cedar policy forbids is DENIED
// with code cedar_forbidden and the policy's id.
func TestCedar_MCPApprovalAndDenial(t *testing.T) {
	dir := t.TempDir()
	src := `@id("refund-over-100")
@approval("finance")
forbid(principal, action in Toolgate::Action::"shop.refund", resource) when { context.input.amount > 100 };
@id("no-big-order")
forbid(principal, action in Toolgate::Action::"shop.refund", resource) when { context.input.order == "BIG" };
@id("no-void")
forbid(principal == Toolgate::Principal::"` + principal + `", action in Toolgate::Action::"shop.void", resource);
`
	if err := os.WriteFile(filepath.Join(dir, "shop.cedar"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	pj := `{"version": 1, "principals": {"` + principal + `": ["state.write:shop"]}, "cedar": ["shop.cedar"], "groups": {"finance": ["fiona"]}}`
	if err := os.WriteFile(filepath.Join(dir, "policy.json"), []byte(pj), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := capability.LoadPolicy(filepath.Join(dir, "policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	d := tools.Declaration{
		ID: "shop.refund", Version: "1.0.0", Name: "refund", Description: "refunds an order",
		InputSchema: json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","additionalProperties":false,"required":["order","amount"],` +
			`"properties":{"order":{"type":"string","maxLength":20,"description":"the order"},"amount":{"type":"integer","description":"how much"}}}`),
		OutputSchema:         json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","required":["refunded"],"additionalProperties":false,"properties":{"refunded":{"type":"integer","description":"how much"}}}`),
		RequiredCapabilities: []capability.Capability{capability.MustParse("state.write:shop")},
		ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: 5 * time.Second},
	}
	reg := tools.NewRegistry()
	body := func(ctx context.Context, env *tools.Env, in json.RawMessage) (json.RawMessage, error) {
		var v struct{ Amount int }
		json.Unmarshal(in, &v)
		return json.Marshal(map[string]int{"refunded": v.Amount})
	}
	void := d
	void.ID = "shop.void"
	for _, x := range []tools.Declaration{d, void} {
		if err := reg.Register(tools.NewRaw(x, body)); err != nil {
			t.Fatal(err)
		}
	}
	reg.Freeze()
	rt, err := tgruntime.Open(filepath.Join(dir, "tg.db"), &tgruntime.Options{Registry: reg, NoSync: true, Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	cs := pipeSession(t, rt, &mcp.Options{Principal: principal}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// tools/list: a tool whose Cedar policies read the arguments is shown
	// (the call decides); one a policy forbids this caller outright is not.
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	if !slices.Contains(names, "shop.refund") || slices.Contains(names, "shop.void") {
		t.Errorf("tools/list: %v; want shop.refund, not shop.void", names)
	}

	completed(t, call(t, ctx, cs, "shop.refund", map[string]any{"order": "A1", "amount": 40}, nil))

	res := call(t, ctx, cs, "shop.refund", map[string]any{"order": "A1", "amount": 250}, nil)
	id, _, _ := intentOf(t, res)
	v := res.Meta[mcp.MetaIntent].(map[string]any)
	rev := pol.Rules().Revision()
	if v["policySet"] != rev || !slices.Equal(anyStrings(v["policies"]), []string{"refund-over-100"}) || !slices.Equal(anyStrings(v["approvers"]), []string{"finance"}) {
		t.Errorf("the intent's hints: %v", v)
	}
	if txt := text(t, res); !strings.Contains(txt, "Cedar policy refund-over-100 (policy set "+rev+")") || !strings.Contains(txt, "a member of finance approves it") {
		t.Errorf("the text: %s", txt)
	}
	if in, err := rt.Intent(ctx, id); err != nil || in.Status != "pending" {
		t.Fatalf("intent %v: %v", in, err)
	}

	o := failed(t, call(t, ctx, cs, "shop.refund", map[string]any{"order": "BIG", "amount": 250}, nil))
	if o.State != "DENIED" || o.Error.Code != "cedar_forbidden" || !strings.Contains(o.Error.Message, "forbidden by Cedar policy no-big-order (Cedar policy set "+rev+")") {
		t.Errorf("a forbidden call: %+v", o)
	}
}

func anyStrings(v any) []string {
	var out []string
	switch l := v.(type) {
	case []string:
		return l
	case []any:
		for _, x := range l {
			s, _ := x.(string)
			out = append(out, s)
		}
	}
	return out
}
