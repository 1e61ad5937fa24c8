package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/client"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/tools"
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

// A tool's rate limit applies to the executions of its approved intents
// too (POST /v1/intents/{id}/execute names no tool, but its intent does),
// sharing the bucket of the tool's direct calls: past it, 429 with
// Retry-After, nothing runs, and the intent stays approved. An intent of
// another tool has its own bucket.
func TestServer_PerToolRateLimitCoversIntents(t *testing.T) {
	cfg := testConfig()
	cfg.RateLimits.PerTool = server.Rate{PerSecond: 0.001, Burst: 2} // no refill during the test
	f := newFixture(t, cfg, nil)
	ctx := context.Background()
	agent, alice := f.client(t, agentToken), f.client(t, approverToken)
	approved := func(tool, msg string) *client.Intent {
		t.Helper()
		it, err := agent.Propose(ctx, inv(tool, `{"msg":"`+msg+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := alice.Approve(ctx, it.ID); err != nil {
			t.Fatal(err)
		}
		return it
	}
	first, second, third := approved("test.echo", "one"), approved("test.echo", "two"), approved("test.echo", "three")
	other := approved("test.fail", "x")

	if res, err := agent.ExecuteIntent(ctx, first.ID, first.Hash); err != nil || res.State != "COMPLETED" {
		t.Fatalf("an intent within test.echo's burst: %v", err)
	}
	if _, err := agent.Execute(ctx, inv("test.echo", `{"msg":"direct"}`)); err != nil {
		t.Fatalf("a direct call within test.echo's burst: %v", err)
	}
	for _, it := range []*client.Intent{second, third} {
		_, err := agent.ExecuteIntent(ctx, it.ID, it.Hash)
		var e *client.Error
		if !errors.As(err, &e) || e.Status != 429 || !errors.Is(err, client.ErrRateLimited) || e.RetryAfter < time.Second {
			t.Errorf("an intent of test.echo past its limit: %v; want 429 with Retry-After", err)
		}
		if got, err := f.rt.Intent(ctx, it.ID); err != nil || got.Status != tgruntime.IntentApproved {
			t.Errorf("the intent refused by the rate limit: %v, status %q; want it still approved, not executed", err, got.Status)
		}
	}
	if n := len(f.records(t, txn.Filter{ToolID: "test.echo"})); n != 2 {
		t.Errorf("test.echo ran %d times; want the 2 within its burst", n)
	}
	if _, err := agent.ExecuteIntent(ctx, other.ID, other.Hash); !errors.Is(err, client.ErrNotCompleted) {
		t.Errorf("an intent of test.fail was limited by test.echo's bucket: %v", err)
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

// A config file without idempotencyTTL leaves the runtime's default, 24
// hours, for the keys the server writes (as toolgate serve opens its
// runtime: LoadConfig, then ApplyTo). With a fake clock: 23h59m after a
// call its Idempotency-Key replays it; 24h and a second after, the call
// runs again.
func TestConfig_IdempotencyTTLDefault(t *testing.T) {
	p := filepath.Join(t.TempDir(), "serve.json")
	writeFile(t, p, `{"maxConcurrent": 8}`)
	cfg, err := server.LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tokens = testConfig().Tokens
	var mu sync.Mutex
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	f := newFixtureWith(t, cfg, nil, true, cfg.ApplyTo, func(o *tgruntime.Options) {
		o.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	agent := f.client(t, agentToken)
	keyed := inv("test.echo", `{"msg":"ttl"}`)
	keyed.IdempotencyKey = "default-ttl-key"
	first, err := agent.Execute(context.Background(), keyed)
	if err != nil {
		t.Fatal(err)
	}
	advance(23*time.Hour + 59*time.Minute)
	if again, err := agent.Execute(context.Background(), keyed); err != nil || !again.Replayed || again.ExecutionID != first.ExecutionID {
		t.Fatalf("23h59m after the first call: %v, a new execution %v; want the first call replayed", err, again == nil || again.ExecutionID != first.ExecutionID)
	}
	advance(time.Minute + time.Second)
	later, err := agent.Execute(context.Background(), keyed)
	if err != nil || later.Replayed || later.ExecutionID == first.ExecutionID {
		t.Fatalf("24h1s after the first call: %v, replayed %v; want a new execution", err, later != nil && later.Replayed)
	}
	if n := len(f.records(t, txn.Filter{ToolID: "test.echo"})); n != 2 {
		t.Errorf("test.echo ran %d times; want 2", n)
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

// A keyed call that a graceful shutdown stopped before its tool ran is
// answered as retryable (503 with Retry-After and the recorded attempt),
// not as a final result: nothing ran, the key is free, and a retry with it
// after a restart runs the tool. A call whose tool was running is the
// final 200 ROLLED_BACK its key then holds.
func TestServer_ShutdownBeforeRunIsRetryable(t *testing.T) {
	cfg := testConfig()
	cfg.GracePeriod = server.Duration(100 * time.Millisecond)
	// One runtime slot: the second call waits for it, before its tool runs.
	f := newFixtureWith(t, cfg, nil, true, func(o *tgruntime.Options) { o.MaxConcurrent, o.SlotWait = 1, time.Minute })
	f.http.Close() // Serve's own listener, for the shutdown
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.srv.Serve(ctx, l) }()
	c, err := client.New("http://"+l.Addr().String(), agentToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	running := inv("test.block", `{"msg":"running"}`)
	running.IdempotencyKey = "running"
	waiting := inv("test.echo", `{"msg":"waiting"}`)
	waiting.IdempotencyKey, waiting.CallID = "waiting", "call-waiting"
	type answer struct {
		res *client.Result
		err error
	}
	ranAnswer, waitAnswer := make(chan answer, 1), make(chan answer, 1)
	go func() { res, err := c.Execute(context.Background(), running); ranAnswer <- answer{res, err} }()
	<-f.gate.started
	go func() { res, err := c.Execute(context.Background(), waiting); waitAnswer <- answer{res, err} }()
	// The waiting call is in the runtime, waiting for the slot, once its
	// key is claimed: the runtime's idempotency record (read below the API,
	// so that no probe of ours can claim the key first) exists.
	scope := sha256.Sum256([]byte("agent\x00test.echo\x00waiting"))
	for {
		if _, found, err := f.rt.StateValue(context.Background(), "toolgate.idempotency", hex.EncodeToString(scope[:])); err != nil {
			t.Fatal(err)
		} else if found {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	f.gate.open()

	a := <-waitAnswer
	var e *client.Error
	if !errors.As(a.err, &e) || e.Status != 503 || !errors.Is(a.err, client.ErrUnavailable) || e.RetryAfter <= 0 {
		t.Errorf("a call stopped before its tool ran: %v; want 503 with Retry-After", a.err)
	} else if e.Result == nil || e.Result.State != "ROLLED_BACK" || e.Result.ExecutionID == "" {
		t.Errorf("the 503 does not carry the recorded attempt: %+v", e.Result)
	}
	a = <-ranAnswer
	if !errors.As(a.err, &e) || e.Status != 200 || a.res == nil || a.res.State != "ROLLED_BACK" {
		t.Errorf("a call whose tool ran: %v; want the final 200 ROLLED_BACK", a.err)
	}

	// Restarted, the same key runs the tool: the 503 said so. The server
	// left the runtime open; its owner closes it, and nothing of the
	// server's runs to make that Close fail.
	cctx, cancelClose := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelClose()
	if err := f.rt.Close(cctx); err != nil {
		t.Fatalf("closing the runtime after Serve returned: %v", err)
	}
	rt, err := tgruntime.Open(f.path, &tgruntime.Options{Registry: f.rt.Registry(), Policy: f.rt.Policy(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	srv, err := server.New(rt, testConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	c2, err := client.New(hs.URL, agentToken, hs.Client())
	if err != nil {
		t.Fatal(err)
	}
	res, err := c2.Execute(context.Background(), waiting)
	if err != nil || res.Replayed || res.State != "COMPLETED" {
		t.Errorf("the retry after the restart: %v; want the tool run, COMPLETED", err)
	}
	if res, err := c2.Execute(context.Background(), running); !errors.Is(err, client.ErrNotCompleted) || res == nil || !res.Replayed {
		t.Errorf("the call whose tool ran: %v; want its ROLLED_BACK result replayed", err)
	}
}

// A committed file write whose rename cannot be done afterwards (a
// directory now sits at its target) is parked, not visible: the HTTP
// answer says so (500 write-parked, the result carrying parkedWrites),
// never a plain 200 COMPLETED, and the client reports ErrWriteParked.
func TestServer_ParkedWriteIsReported(t *testing.T) {
	dir := t.TempDir()
	f := newFixtureWith(t, nil, nil, true, func(o *tgruntime.Options) {
		decl := tools.Declaration{
			ID: "test.parked", Version: "1.0.0", Name: "test.parked", Description: "stages a write, then puts a directory at its target",
			InputSchema: json.RawMessage(msgSchema), OutputSchema: json.RawMessage(msgSchema),
			RequiredCapabilities: []capability.Capability{capability.MustParse("filesystem.write")},
			ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: 30 * time.Second},
		}
		err := o.Registry.Register(tools.NewTyped(decl, func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			target := filepath.Join(dir, in.Msg)
			if _, err := env.FS("filesystem.write").WriteStaged(target, []byte("data"), 0o600); err != nil {
				return msg{}, err
			}
			return in, os.Mkdir(target, 0o700) // the rename after the commit will fail
		}))
		if err != nil {
			t.Fatal(err)
		}
		p, err := capability.NewPolicy(map[string][]capability.Capability{"agent": {capability.MustParse("filesystem.write:" + dir)}})
		if err != nil {
			t.Fatal(err)
		}
		o.Policy = p
	})
	res, err := f.client(t, agentToken).Execute(context.Background(), inv("test.parked", `{"msg":"report.txt"}`))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 500 || !errors.Is(err, client.ErrWriteParked) || e.Code != "write_parked" {
		t.Fatalf("a parked write: %v; want 500 write-parked, ErrWriteParked", err)
	}
	if res == nil || res.State != "COMPLETED" || len(res.ParkedWrites) != 1 || !strings.Contains(res.ParkedWrites[0], filepath.Join(dir, "report.txt")) {
		t.Fatalf("the result does not carry the parked write: %+v", res)
	}
	if !strings.Contains(e.Detail, "not visible") {
		t.Errorf("the detail does not say the write is not visible: %q", e.Detail)
	}
	if strings.Contains(e.Detail, tools.StagePrefix) {
		t.Errorf("the caller is shown the staged file's name, which it never chose: %q", e.Detail)
	}
	if fi, err := os.Stat(filepath.Join(dir, "report.txt")); err != nil || !fi.IsDir() {
		t.Errorf("the target changed: %v", err)
	}
	// The same over the wire, for a client that is not ours.
	code, _, body := f.post(t, "/v1/tools/test.parked/execute", agentToken, "application/json", `{"input":{"msg":"other.txt"}}`)
	result, _ := body["result"].(map[string]any)
	if parked, _ := result["parkedWrites"].([]any); code != 500 || body["state"] != "COMPLETED" || len(parked) != 1 {
		t.Errorf("%d %v; want 500 with the COMPLETED result and its parkedWrites", code, body)
	}
	// Read back later, the record says it too.
	raw, err := f.client(t, agentToken).Execution(context.Background(), res.ExecutionID)
	var rec struct {
		State        string   `json:"state"`
		ParkedWrites []string `json:"parkedWrites"`
	}
	if err != nil || json.Unmarshal(raw, &rec) != nil || rec.State != "COMPLETED" || len(rec.ParkedWrites) != 1 {
		t.Errorf("GET of the execution: %s, %v; want its parkedWrites", raw, err)
	}
	// A replay of a keyed call answers as the first answer did.
	keyed := inv("test.parked", `{"msg":"keyed.txt"}`)
	keyed.IdempotencyKey = "k-parked"
	for i := range 2 {
		res, err := f.client(t, agentToken).Execute(context.Background(), keyed)
		if !errors.Is(err, client.ErrWriteParked) || res == nil || len(res.ParkedWrites) != 1 || (i == 1) != res.Replayed {
			t.Errorf("keyed call %d: %+v, %v; want ErrWriteParked with its parkedWrites (replayed the second time)", i+1, res, err)
		}
	}
}
