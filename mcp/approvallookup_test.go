package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// propose stores n intents of test.approve for who, with other inputs.
func propose(tb testing.TB, rt *tgruntime.Runtime, who string, from, n int) {
	tb.Helper()
	for i := from; i < from+n; i++ {
		in, _ := json.Marshal(map[string]any{"msg": fmt.Sprint("other ", i)})
		if _, err := rt.Propose(context.Background(), tgruntime.Invocation{Tool: "test.approve", Input: in, Principal: who}); err != nil {
			tb.Fatal(err)
		}
	}
}

// A call of a tool that requires approval finds the intent of the
// identical call without reading every intent: what it allocates does not
// grow with the intents stored (runtime.IntentFor's index, written with
// each proposal, whichever front end made it). And it finds the right one: the
// caller's own, the newest, whatever else was proposed meanwhile.
func TestApproval_LookupDoesNotGrowWithIntents(t *testing.T) {
	o := testOptions(testRegistry(t))
	o.MaxPendingIntents = -1 // 1500 pending of one proposer
	rt, err := tgruntime.Open(testdb.Path(t, "tg.db"), o)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	propose(t, rt, principal, 0, 20)
	cs := pipeSession(t, rt, &mcp.Options{Principal: principal}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	args := map[string]any{"msg": "ship it"}
	id, _, _ := intentOf(t, call(t, ctx, cs, "test.approve", args, nil))
	again := func() {
		if got, _, _ := intentOf(t, call(t, ctx, cs, "test.approve", args, nil)); got != id {
			t.Fatalf("the identical call proposed %s, want the pending %s", got, id)
		}
	}
	again()
	few := testing.AllocsPerRun(20, again)

	// 1500 more intents (three pages of the audit log and more), and the
	// identical call proposed by someone else: still the caller's intent.
	propose(t, rt, principal, 20, 1500)
	in, _ := json.Marshal(args)
	if _, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.approve", Input: in, Principal: "agent-2"}); err != nil {
		t.Fatal(err)
	}
	again()
	many := testing.AllocsPerRun(20, again)
	t.Logf("allocations per call: %.0f with 22 intents, %.0f with 1523", few, many)
	if many > few*1.5+100 {
		t.Errorf("a call allocates %.0f times with 1523 intents stored, %.0f with 22: the lookup grows with the intents", many, few)
	}

	// Approved, the identical call runs it; rejected, it proposes anew.
	if _, err := rt.Approve(ctx, id, "alice"); err != nil {
		t.Fatal(err)
	}
	res := call(t, ctx, cs, "test.approve", args, nil)
	completed(t, res)
	if res.Meta["io.toolgate/intentId"] != id {
		t.Errorf("the approved call ran %v, want intent %s", res.Meta["io.toolgate/intentId"], id)
	}
	other := map[string]any{"msg": "other 7"}
	rejected, _, _ := intentOf(t, call(t, ctx, cs, "test.approve", other, nil)) // proposed by propose
	if _, err := rt.Reject(ctx, rejected, "alice", "no"); err != nil {
		t.Fatal(err)
	}
	if fresh, _, _ := intentOf(t, call(t, ctx, cs, "test.approve", other, nil)); fresh == rejected {
		t.Error("the call of a rejected intent answered with the rejected one, want a new intent")
	}
}

// BenchmarkApprovalLookup is the identical call of a pending intent over
// MCP (an in-process pipe), with few and with many intents stored.
func BenchmarkApprovalLookup(b *testing.B) {
	for _, n := range []int{100, 3000} {
		b.Run(fmt.Sprint("intents=", n), func(b *testing.B) {
			o := testOptions(testRegistry(b))
			o.MaxPendingIntents = -1 // n pending of one proposer
			rt, err := tgruntime.Open(filepath.Join(b.TempDir(), "tg.db"), o)
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close(context.Background())
			propose(b, rt, principal, 0, n)
			srv, err := mcp.New(rt, &mcp.Options{Principal: principal})
			if err != nil {
				b.Fatal(err)
			}
			cs := benchPipe(b, srv)
			ctx := context.Background()
			params := &sdk.CallToolParams{Name: "test.approve", Arguments: map[string]any{"msg": "other 1"}}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := cs.CallTool(ctx, params)
				if err != nil || res.Meta[mcp.MetaState] != "APPROVAL_REQUIRED" {
					b.Fatal(err, res)
				}
			}
		})
	}
}

// benchPipe connects the SDK's client to srv over a pair of pipes, as
// pipeSession does for a test.
func benchPipe(b *testing.B, srv *mcp.Server) *sdk.ClientSession {
	crd, swr := io.Pipe()
	srd, cwr := io.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Run(context.Background(), &sdk.IOTransport{Reader: srd, Writer: swr})
	}()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(), &sdk.IOTransport{Reader: crd, Writer: cwr}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close(); cwr.Close(); <-served })
	return cs
}
