package webui_test

import (
	"context"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/mcp"
	"github.com/toolgate/toolgate/webui"
)

// An intent proposed over MCP, on the runtime the notifier watches, is
// announced like one proposed over the HTTP API: the hook is the
// runtime's, not a front end's.
func TestWebhook_MCPProposal(t *testing.T) {
	rc := newReceiver(t, nil)
	f, _, _ := notifying(t, rc, webui.NotifierOptions{})
	srv, err := mcp.New(f.rt, &mcp.Options{Principal: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ct, st := sdk.NewInMemoryTransports()
	go srv.Run(ctx, st)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "webui-test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "test.echo", Arguments: map[string]any{"msg": "via mcp"}})
	if err != nil || res.Meta[mcp.MetaState] != "APPROVAL_REQUIRED" {
		t.Fatalf("the MCP call did not propose an intent: %v %v", err, res)
	}
	id := res.Meta[mcp.MetaIntent].(map[string]any)["intentId"]
	waitFor(t, "the MCP proposal's notification", func() bool { return len(rc.got()) == 1 })
	if m := rc.got()[0]; m.ID != id || m.Proposer != "agent" || m.Preview != `{"msg":"via mcp"}` {
		t.Fatalf("notification %+v, want intent %v", m, id)
	}
}
