package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
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

// bypassEvent is what TestServer_IdempotencyBypass reads of an audit event.
type bypassEvent struct {
	ExecutionID       string `json:"executionId"`
	State             string `json:"state"`
	IdempotencyKey    string `json:"idempotencyKey"`
	IdempotencyBypass bool   `json:"idempotencyBypass"`
}

// eventsOf returns the audit events of one execution.
func (f *fixture) eventsOf(t *testing.T, executionID string) []bypassEvent {
	t.Helper()
	entries, err := f.rt.AuditLog(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []bypassEvent
	for _, e := range entries {
		var ev bypassEvent
		if err := json.Unmarshal(e.Event, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.ExecutionID == executionID {
			out = append(out, ev)
		}
	}
	return out
}

// Bypassing an Idempotency-Key over HTTP: a principal the policy grants
// idempotency.bypass (for the tool) runs the call again, every audit event
// of that run records the bypass, and its result becomes the key's. A
// principal without the grant, or a tool outside its scope, is refused
// with 403 and nothing runs; a bypass without a key is a 400.
func TestServer_IdempotencyBypass(t *testing.T) {
	f := newFixtureWith(t, nil, nil, true, func(o *tgruntime.Options) {
		p, err := capability.NewPolicy(map[string][]capability.Capability{
			"agent": {capability.MustParse("state.write:test"), capability.MustParse(server.BypassCapability + ":test.echo")},
			"alice": {capability.MustParse("state.write:test")},
		})
		if err != nil {
			t.Fatal(err)
		}
		o.Policy = p
	})
	ctx := context.Background()
	agent, alice := f.client(t, agentToken), f.client(t, approverToken)
	keyed := func(tool, key string, bypass bool) client.Invocation {
		in := inv(tool, `{"msg":"once"}`)
		in.IdempotencyKey, in.BypassIdempotency = key, bypass
		return in
	}

	first, err := agent.Execute(ctx, keyed("test.echo", "k", false))
	if err != nil {
		t.Fatal(err)
	}
	again, err := agent.Execute(ctx, keyed("test.echo", "k", true))
	if err != nil || again.Replayed || again.ExecutionID == first.ExecutionID {
		t.Fatalf("a granted bypass did not run again: %v (replayed %v)", err, again != nil && again.Replayed)
	}
	evs := f.eventsOf(t, again.ExecutionID)
	if len(evs) == 0 {
		t.Fatal("the bypassing run has no audit events")
	}
	for _, e := range evs {
		if !e.IdempotencyBypass || e.IdempotencyKey != "k" {
			t.Errorf("the %s event of the bypassing run does not record the bypass: %+v", e.State, e)
		}
	}
	for _, e := range f.eventsOf(t, first.ExecutionID) {
		if e.IdempotencyBypass {
			t.Errorf("the first run's %s event records a bypass", e.State)
		}
	}
	if res, err := agent.Execute(ctx, keyed("test.echo", "k", false)); err != nil || !res.Replayed || res.ExecutionID != again.ExecutionID {
		t.Errorf("after the bypass the key does not hold the bypass's result: %v", err)
	}

	before := len(f.records(t, txn.Filter{}))
	if _, err := alice.Execute(ctx, keyed("test.echo", "a", false)); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		c   *client.Client
		inv client.Invocation
	}{
		"not granted":           {alice, keyed("test.echo", "a", true)},
		"another tool's bypass": {agent, keyed("test.fail", "f", true)},
	} {
		_, err := tc.c.Execute(ctx, tc.inv)
		var e *client.Error
		if !errors.As(err, &e) || e.Status != 403 || !errors.Is(err, client.ErrDenied) || !strings.Contains(e.Detail, server.BypassCapability) {
			t.Errorf("%s: %v; want 403 naming %s", name, err, server.BypassCapability)
		}
	}
	if _, err := agent.Execute(ctx, keyed("test.echo", "", true)); status(err) != 400 {
		t.Errorf("a bypass without a key: %v; want 400", err)
	}
	if after := len(f.records(t, txn.Filter{})); after != before+1 {
		t.Errorf("%d executions recorded for 1 call and 3 refused bypasses", after-before)
	}
	if res, err := alice.Execute(ctx, keyed("test.echo", "a", false)); err != nil || !res.Replayed {
		t.Errorf("a refused bypass changed the key: %v (replayed %v)", err, res != nil && res.Replayed)
	}
}
