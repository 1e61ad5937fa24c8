package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/txn"
)

// Per-tool rate limits, over HTTP: past a tool's bucket its calls are 429
// with Retry-After, whoever makes them, and run nothing; the other tools
// are unaffected.
func TestServer_PerToolRateLimit(t *testing.T) {
	cfg := testConfig()
	cfg.RateLimits.PerTool = server.Rate{PerSecond: 0.001, Burst: 2} // no refill during the test
	f := newFixture(t, cfg, nil)
	ctx := context.Background()
	agent, alice := f.client(t, agentToken), f.client(t, approverToken)

	for i, c := range []*client.Client{agent, alice} {
		if _, err := c.Execute(ctx, inv("test.echo", `{"msg":"within"}`)); err != nil {
			t.Fatalf("call %d within the tool's burst: %v", i+1, err)
		}
	}
	for name, c := range map[string]*client.Client{"agent": agent, "alice": alice} {
		_, err := c.Execute(ctx, inv("test.echo", `{"msg":"past"}`))
		var e *client.Error
		if !errors.As(err, &e) || e.Status != 429 || !errors.Is(err, client.ErrRateLimited) || e.RetryAfter < time.Second {
			t.Errorf("%s past test.echo's limit: %v; want 429 with Retry-After", name, err)
		}
	}
	if n := len(f.records(t, txn.Filter{ToolID: "test.echo"})); n != 2 {
		t.Errorf("test.echo ran %d times; want the 2 within its burst", n)
	}
	// Another tool has its own bucket, for every principal.
	for i := range 2 {
		if _, err := agent.Execute(ctx, inv("test.fail", `{"msg":"x"}`)); !errors.Is(err, client.ErrNotCompleted) {
			t.Errorf("test.fail call %d was limited by test.echo's bucket: %v", i+1, err)
		}
	}
}
