package server_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/server"
	tgruntime "github.com/toolgate/toolgate/runtime"
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

// The config file's idempotencyTTL is the runtime's TTL for the keys the
// server writes (ApplyTo, as toolgate serve opens its runtime): past a
// short TTL the same Idempotency-Key runs again, within a long one it
// replays. A TTL that is not a positive duration is refused.
func TestConfig_IdempotencyTTL(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"negative":  `{"idempotencyTTL":"-1s"}`,
		"number":    `{"idempotencyTTL":60}`,
		"no unit":   `{"idempotencyTTL":"60"}`,
		"not a ttl": `{"idempotencyTTL":"soon"}`,
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".json")
		writeFile(t, p, body)
		if _, err := server.LoadConfig(p); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	var unset tgruntime.Options
	(&server.Config{}).ApplyTo(&unset)
	if unset.IdempotencyTTL != 0 {
		t.Errorf("no idempotencyTTL set the runtime's TTL to %v; want it left to the runtime's default", unset.IdempotencyTTL)
	}

	for _, tc := range []struct {
		ttl    string
		replay bool
	}{{"1ms", false}, {"1h", true}} {
		t.Run(tc.ttl, func(t *testing.T) {
			p := filepath.Join(dir, "ttl-"+tc.ttl+".json")
			writeFile(t, p, `{"idempotencyTTL":"`+tc.ttl+`"}`)
			cfg, err := server.LoadConfig(p)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Tokens = testConfig().Tokens
			f := newFixtureWith(t, cfg, nil, true, cfg.ApplyTo)
			agent := f.client(t, agentToken)
			keyed := inv("test.echo", `{"msg":"ttl"}`)
			keyed.IdempotencyKey = "ttl-key"
			first, err := agent.Execute(context.Background(), keyed)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // past a 1ms key's expiry
			again, err := agent.Execute(context.Background(), keyed)
			if err != nil {
				t.Fatal(err)
			}
			if replayed := again.Replayed && again.ExecutionID == first.ExecutionID; replayed != tc.replay {
				t.Errorf("idempotencyTTL %s: the second call replayed %v; want %v", tc.ttl, replayed, tc.replay)
			}
		})
	}
}
