package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/internal/testkit"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

const msgSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {"msg": {"type": "string", "description": "a message", "maxLength": 64}},
  "required": ["msg"],
  "additionalProperties": false
}`

type msg struct {
	Msg string `json:"msg"`
}

// gate blocks test.block until released; each call announces itself.
type gate struct {
	started chan string
	release chan struct{}
	once    sync.Once
}

func newGate() *gate  { return &gate{started: make(chan string, 64), release: make(chan struct{})} }
func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func testTools(g *gate) []tools.Tool {
	decl := func(id string) tools.Declaration {
		return tools.Declaration{
			ID: id, Version: "1.0.0", Name: id, Description: "test tool " + id,
			InputSchema: json.RawMessage(msgSchema), OutputSchema: json.RawMessage(msgSchema),
			RequiredCapabilities: []capability.Capability{capability.MustParse("state.write:test")},
			ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: 30 * time.Second},
		}
	}
	return []tools.Tool{
		tools.NewTyped(decl("test.echo"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			return in, env.State.Put("test", in.Msg, []byte(in.Msg))
		}),
		tools.NewTyped(decl("test.fail"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			return msg{}, errors.New("boom")
		}),
		tools.NewTyped(decl("test.panic"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			panic("kaboom")
		}),
		tools.NewTyped(decl("test.block"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			g.started <- in.Msg
			<-g.release
			return in, env.State.Put("test", in.Msg, []byte(in.Msg))
		}),
	}
}

const (
	agentToken    = "agent-secret-token"
	nobodyToken   = "nobody-secret-token"
	approverToken = "alice-secret-token"
)

func testConfig() *server.Config {
	return &server.Config{Tokens: []server.TokenConfig{
		{Principal: "agent", SHA256: server.HashToken(agentToken)},
		{Principal: "nobody", SHA256: server.HashToken(nobodyToken)},
		{Principal: "alice", SHA256: server.HashToken(approverToken), Approver: true},
	}}
}

type fixture struct {
	rt   *tgruntime.Runtime
	srv  *server.Server
	http *httptest.Server
	gate *gate
	path string
}

func newFixture(t *testing.T, cfg *server.Config, opts *server.Options) *fixture {
	t.Helper()
	return newFixtureWith(t, cfg, opts, true)
}

// newFixtureWith is newFixture with the runtime's commits synced or not.
func newFixtureWith(t *testing.T, cfg *server.Config, opts *server.Options, noSync bool, adjust ...func(*tgruntime.Options)) *fixture {
	t.Helper()
	return newFixtureAt(t, testdb.Path(t, "toolgate.db"), cfg, opts, noSync, adjust...)
}

// newFixtureAt is newFixtureWith with the database at path.
func newFixtureAt(t *testing.T, path string, cfg *server.Config, opts *server.Options, noSync bool, adjust ...func(*tgruntime.Options)) *fixture {
	t.Helper()
	g := newGate()
	t.Cleanup(g.open)
	reg := tools.NewRegistry()
	for _, tl := range testTools(g) {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	policy, err := capability.NewPolicy(map[string][]capability.Capability{
		"agent": {capability.MustParse("state.write:test")},
		"alice": {capability.MustParse("state.write:test")},
	})
	if err != nil {
		t.Fatal(err)
	}
	ropts := &tgruntime.Options{Registry: reg, Policy: policy, NoSync: noSync}
	if opts != nil {
		ropts.TracerProvider = opts.TracerProvider
	}
	for _, a := range adjust {
		a(ropts)
	}
	rt, err := tgruntime.Open(path, ropts)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Check(t, rt, path) // closes it, after the cleanup below
	if cfg == nil {
		cfg = testConfig()
	}
	srv, err := server.New(rt, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		g.open()
		hs.Close()
	})
	return &fixture{rt: rt, srv: srv, http: hs, gate: g, path: path}
}

func (f *fixture) client(t *testing.T, token string) *client.Client {
	t.Helper()
	c, err := client.New(f.http.URL, token, f.http.Client())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// post sends a raw request and returns the status, headers and body.
func (f *fixture) post(t *testing.T, path, token, contentType, body string, header ...string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := f.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	json.Unmarshal(data, &m)
	if resp.StatusCode >= 400 {
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%d answered with Content-Type %q, not a problem document", resp.StatusCode, ct)
		}
		if strings.Contains(string(data), "goroutine ") {
			t.Errorf("a stack trace on the wire: %s", data)
		}
	}
	return resp.StatusCode, resp.Header, m
}

func inv(tool, input string) client.Invocation {
	return client.Invocation{Tool: tool, Input: json.RawMessage(input)}
}

func status(err error) int {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// count returns the execution records of the database (through the
// runtime the fixture still has open).
func (f *fixture) records(t *testing.T, filter txn.Filter) []*txn.Record {
	t.Helper()
	recs, err := f.rt.Executions(context.Background(), filter)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestServer_StatusCodes(t *testing.T) {
	f := newFixture(t, nil, nil)
	ctx := context.Background()
	agent := f.client(t, agentToken)

	// 200 COMPLETED, and a tool-level failure carried in the result.
	res, err := agent.Execute(ctx, inv("test.echo", `{"msg":"hi"}`))
	if err != nil || res.State != "COMPLETED" || string(res.Output) != `{"msg":"hi"}` {
		t.Fatalf("200 COMPLETED: %v, %+v", err, res)
	}
	res, err = agent.Execute(ctx, inv("test.fail", `{"msg":"x"}`))
	if status(err) != 200 || !errors.Is(err, client.ErrNotCompleted) || res.State != "ROLLED_BACK" || res.Error.Code != "tool_error" {
		t.Fatalf("200 tool failure: %v, %+v", err, res)
	}

	// 400, 401, 404, 413, 415: refused before anything runs.
	before := len(f.records(t, txn.Filter{}))
	for _, tc := range []struct {
		name, path, token, ctype, body string
		want                           int
	}{
		{"malformed JSON", "/v1/tools/test.echo/execute", agentToken, "application/json", `{"input":`, 400},
		{"trailing data", "/v1/tools/test.echo/execute", agentToken, "application/json", `{"input":{"msg":"x"}} {}`, 400},
		{"trailing bracket", "/v1/tools/test.echo/execute", agentToken, "application/json", `{"input":{"msg":"x"}}]`, 400},
		{"unclean path", "/v1/tools/../tools/test.echo/execute", agentToken, "application/json", `{"input":{"msg":"x"}}`, 400},
		{"trailing slash", "/v1/tools/test.echo/execute/", agentToken, "application/json", `{"input":{"msg":"x"}}`, 400},
		{"unknown field", "/v1/tools/test.echo/execute", agentToken, "application/json", `{"input":{"msg":"x"},"grants":["process.exec"]}`, 400},
		{"no input", "/v1/tools/test.echo/execute", agentToken, "application/json", `{}`, 400},
		{"bad callId", "/v1/tools/test.echo/execute", agentToken, "application/json", `{"input":{"msg":"x"},"callId":"a b\u0000"}`, 400},
		{"path traversal", "/v1/tools/..%2F..%2Fetc%2Fpasswd/execute", agentToken, "application/json", `{"input":{}}`, 400},
		{"no token", "/v1/tools/test.echo/execute", "", "application/json", `{"input":{"msg":"x"}}`, 401},
		{"bad token", "/v1/tools/test.echo/execute", "guess", "application/json", `{"input":{"msg":"x"}}`, 401},
		{"unknown tool", "/v1/tools/no.such/execute", agentToken, "application/json", `{"input":{"msg":"x"}}`, 404},
		{"unknown version", "/v1/tools/test.echo/execute", agentToken, "application/json", `{"input":{"msg":"x"},"version":"9.9.9"}`, 404},
		{"oversized body", "/v1/tools/test.echo/execute", agentToken, "application/json", `{"input":{"msg":"` + strings.Repeat("x", 6<<20) + `"}}`, 413},
		{"wrong content type", "/v1/tools/test.echo/execute", agentToken, "text/plain", `{"input":{"msg":"x"}}`, 415},
		{"spec path, unknown tool", "/tools/no.such/execute", agentToken, "application/json", `{"input":{"msg":"x"}}`, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, h, p := f.post(t, tc.path, tc.token, tc.ctype, tc.body)
			if code != tc.want || p["status"] != float64(tc.want) || p["title"] == nil {
				t.Fatalf("status %d, problem %v; want %d", code, p, tc.want)
			}
			if code == 401 && !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("401 without WWW-Authenticate")
			}
		})
	}
	if after := len(f.records(t, txn.Filter{})); after != before {
		t.Errorf("refused requests recorded %d executions", after-before)
	}
	if code, _, _ := f.post(t, "/tools/test.echo/execute", agentToken, "application/json", `{"input":{"msg":"spec"}}`); code != 200 {
		t.Errorf("the spec's path: %d", code)
	}

	// 403 DENIED, recorded.
	res, err = f.client(t, nobodyToken).Execute(ctx, inv("test.echo", `{"msg":"x"}`))
	if status(err) != 403 || !errors.Is(err, client.ErrDenied) || res == nil || res.State != "DENIED" {
		t.Fatalf("403: %v, %+v", err, res)
	}

	// 422: input failing the schema (recorded FAILED).
	res, err = agent.Execute(ctx, inv("test.echo", `{"msg":7}`))
	if status(err) != 422 || !errors.Is(err, client.ErrInvalidInput) || res == nil || res.State != "FAILED" {
		t.Fatalf("422 schema: %v, %+v", err, res)
	}

	// Idempotency: a replay, then 422 for another request under the key,
	// and 409 while the key's first request still runs.
	keyed := inv("test.echo", `{"msg":"k"}`)
	keyed.IdempotencyKey = "key-1"
	first, err := agent.Execute(ctx, keyed)
	if err != nil {
		t.Fatal(err)
	}
	again, err := agent.Execute(ctx, keyed)
	if err != nil || !again.Replayed || again.ExecutionID != first.ExecutionID {
		t.Fatalf("replay: %v, %+v", err, again)
	}
	other := inv("test.echo", `{"msg":"other"}`)
	other.IdempotencyKey = "key-1"
	if _, err := agent.Execute(ctx, other); status(err) != 422 || !errors.Is(err, client.ErrConflict) {
		t.Fatalf("422 key reused: %v", err)
	}
	blocked := inv("test.block", `{"msg":"b"}`)
	blocked.IdempotencyKey = "key-2"
	done := make(chan error, 1)
	go func() { _, err := agent.Execute(ctx, blocked); done <- err }()
	<-f.gate.started
	if _, err := agent.Execute(ctx, blocked); status(err) != 409 || !errors.Is(err, client.ErrInFlight) {
		t.Fatalf("409: %v", err)
	}
	f.gate.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Approving intents needs an approver's token.
	it, err := agent.Propose(ctx, inv("test.echo", `{"msg":"i"}`))
	if err != nil || it.Status != "pending" {
		t.Fatalf("propose: %v, %+v", err, it)
	}
	if _, err := agent.Approve(ctx, it.ID); status(err) != 403 {
		t.Errorf("approval by a non-approver: %v", err)
	}
	if it, err := f.client(t, approverToken).Approve(ctx, it.ID); err != nil || it.Status != "approved" {
		t.Errorf("approval: %v, %+v", err, it)
	}
	bad, err := agent.Propose(ctx, inv("test.echo", `{"msg":7}`))
	if status(err) != 422 || bad != nil {
		t.Errorf("an invalid proposal: %v, %+v", err, bad)
	}
	if ce := (*client.Error)(nil); !errors.As(err, &ce) || ce.Detail == "" || strings.HasPrefix(ce.Detail, "runtime:") {
		t.Errorf("an invalid proposal's detail is empty or names a Go package: %v", err)
	}
	// Executing intents remotely: approved and unchanged, at most once.
	pending, _ := agent.Propose(ctx, inv("test.echo", `{"msg":"p"}`))
	if _, err := agent.ExecuteIntent(ctx, pending.ID, pending.Hash); status(err) != 403 {
		t.Errorf("a pending intent: %v", err)
	}
	_, err = agent.ExecuteIntent(ctx, it.ID, strings.Repeat("0", 64))
	var refused *client.Error
	if !errors.As(err, &refused) || refused.Status != 422 || !errors.Is(err, client.ErrIntentRefused) || errors.Is(err, client.ErrInvalidInput) || refused.Code != "intent_hash_mismatch" {
		t.Errorf("a wrong hash: %v; want ErrIntentRefused with code intent_hash_mismatch", err)
	}
	if _, err := agent.ExecuteIntent(ctx, "not-a-uuid", it.Hash); status(err) != 400 {
		t.Errorf("a malformed id: %v", err)
	}
	ran, err := agent.ExecuteIntent(ctx, it.ID, it.Hash)
	if err != nil || ran.State != "COMPLETED" || ran.IntentID != it.ID {
		t.Fatalf("an approved intent: %v, %+v", err, ran)
	}
	_, err = agent.ExecuteIntent(ctx, it.ID, it.Hash)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 409 || !errors.Is(err, client.ErrConflict) || ce.Result == nil || !ce.Result.Replayed || ce.Result.ExecutionID != ran.ExecutionID {
		t.Fatalf("the second execution: %v", err)
	}

	// Reads.
	if ts, err := agent.Tools(ctx); err != nil || len(ts) != 4 {
		t.Errorf("tools: %d, %v", len(ts), err)
	}
	if rec, err := agent.Execution(ctx, first.ExecutionID); err != nil || !bytes.Contains(rec, []byte(first.ExecutionID)) {
		t.Errorf("execution: %v", err)
	}
	if _, err := f.client(t, nobodyToken).Execution(ctx, first.ExecutionID); status(err) != 404 {
		t.Errorf("another principal's execution: %v", err)
	}
}

func TestServer_RateLimitAndBusy(t *testing.T) {
	cfg := testConfig()
	cfg.RateLimits.PerPrincipal = server.Rate{PerSecond: 0.5, Burst: 2}
	cfg.MaxConcurrent = 1
	f := newFixture(t, cfg, nil)
	ctx := context.Background()
	agent := f.client(t, agentToken)

	done := make(chan error, 1)
	go func() { _, err := agent.Execute(ctx, inv("test.block", `{"msg":"b"}`)); done <- err }()
	<-f.gate.started
	_, err := agent.Execute(ctx, inv("test.echo", `{"msg":"x"}`))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 503 || e.RetryAfter <= 0 || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("503 busy: %v", err)
	}
	f.gate.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The bucket held 2: both spent; the next request is refused until it refills.
	_, err = agent.Execute(ctx, inv("test.echo", `{"msg":"x"}`))
	if !errors.As(err, &e) || e.Status != 429 || e.RetryAfter < time.Second || !errors.Is(err, client.ErrRateLimited) {
		t.Fatalf("429: %v", err)
	}
	// Endpoints that run no tool take from the same bucket: no flooding
	// the store with proposals or reads.
	if _, err := agent.Propose(ctx, inv("test.echo", `{"msg":"p"}`)); status(err) != 429 {
		t.Errorf("a proposal past the rate: %v", err)
	}
	if _, err := agent.Tools(ctx); status(err) != 429 {
		t.Errorf("a read past the rate: %v", err)
	}
	// Other principals have their own bucket.
	if _, err := f.client(t, approverToken).Execute(ctx, inv("test.echo", `{"msg":"y"}`)); err != nil {
		t.Fatalf("another principal was rate limited: %v", err)
	}
}

// A handle refusing something outside the grants during execution is a
// denial too: the result (200, ROLLED_BACK, AuthorizationError) is
// reported as both ErrNotCompleted and ErrDenied.
func TestServer_HandleRefusalIsDenied(t *testing.T) {
	f := newFixtureWith(t, nil, nil, true, func(o *tgruntime.Options) {
		decl := tools.Declaration{
			ID: "test.escape", Version: "1.0.0", Name: "test.escape", Description: "writes outside its grant",
			InputSchema: json.RawMessage(msgSchema), OutputSchema: json.RawMessage(msgSchema),
			RequiredCapabilities: []capability.Capability{capability.MustParse("state.write:test")},
			ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: 30 * time.Second},
		}
		err := o.Registry.Register(tools.NewTyped(decl, func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			return in, env.State.Put("other", in.Msg, []byte(in.Msg)) // namespace not granted
		}))
		if err != nil {
			t.Fatal(err)
		}
	})
	res, err := f.client(t, agentToken).Execute(context.Background(), inv("test.escape", `{"msg":"x"}`))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 200 || res == nil || res.State != "ROLLED_BACK" || e.Code != "capability_boundary" {
		t.Fatalf("a handle refusal: %v, %+v", err, res)
	}
	if !errors.Is(err, client.ErrDenied) || !errors.Is(err, client.ErrNotCompleted) {
		t.Errorf("a handle refusal: ErrDenied %v, ErrNotCompleted %v; want both", errors.Is(err, client.ErrDenied), errors.Is(err, client.ErrNotCompleted))
	}
	// A tool's own failure is not a denial.
	if _, err := f.client(t, agentToken).Execute(context.Background(), inv("test.fail", `{"msg":"x"}`)); errors.Is(err, client.ErrDenied) {
		t.Errorf("a tool failure matches ErrDenied: %v", err)
	}
}

// A tool's panic is recorded with its stack, which never goes on the wire:
// not in the result, not in the execution record served.
func TestServer_NoStacksOnTheWire(t *testing.T) {
	f := newFixture(t, nil, nil)
	code, _, body := f.post(t, "/v1/tools/test.panic/execute", agentToken, "application/json", `{"input":{"msg":"x"}}`)
	raw, _ := json.Marshal(body)
	if code != 200 || body["state"] != "ROLLED_BACK" || bytes.Contains(raw, []byte("goroutine")) || bytes.Contains(raw, []byte(`"stack"`)) {
		t.Fatalf("%d: %s", code, raw)
	}
	id, _ := body["executionId"].(string)
	rec, err := f.client(t, agentToken).Execution(context.Background(), id)
	if err != nil || bytes.Contains(rec, []byte("goroutine")) || !bytes.Contains(rec, []byte("panic")) {
		t.Fatalf("execution record: %v, %s", err, rec)
	}
	if stored, err := f.rt.Execution(context.Background(), id); err != nil || !strings.Contains(stored.Error.Stack, "goroutine") {
		t.Errorf("the stack is no longer recorded on the server: %v", err)
	}
}

// The runtime's own resources: no free execution slot is a 503 with the
// recorded attempt in the problem.
func TestServer_RuntimeResourceUnavailable(t *testing.T) {
	f := newFixtureWith(t, nil, nil, true, func(o *tgruntime.Options) { o.MaxConcurrent, o.SlotWait = 1, -1 })
	ctx := context.Background()
	agent := f.client(t, agentToken)
	done := make(chan error, 1)
	go func() { _, err := agent.Execute(ctx, inv("test.block", `{"msg":"b"}`)); done <- err }()
	<-f.gate.started
	res, err := agent.Execute(ctx, inv("test.echo", `{"msg":"x"}`))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 503 || e.Code != "resource_unavailable" || res == nil || res.State != "ROLLED_BACK" {
		t.Fatalf("503 resource unavailable: %v, %+v", err, res)
	}
	f.gate.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// An execution longer than the server's write timeout still gets its
// answer: the timeout guards the other endpoints, the tool's own limits
// bound an execution.
func TestServer_ExecutionOutlivesWriteTimeout(t *testing.T) {
	cfg := testConfig()
	cfg.WriteTimeout = server.Duration(100 * time.Millisecond)
	f := newFixture(t, cfg, nil)
	f.http.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := f.srv.HTTPServer(l.Addr().String())
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	c, err := client.New("http://"+l.Addr().String(), agentToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { <-f.gate.started; time.Sleep(300 * time.Millisecond); f.gate.open() }()
	res, err := c.Execute(context.Background(), inv("test.block", `{"msg":"slow"}`))
	if err != nil || res.State != "COMPLETED" {
		t.Fatalf("a 300 ms execution under a 100 ms write timeout: %v", err)
	}
}

// A client that disconnects mid-execution does not leave the invocation
// unrecorded: it runs to its end and is COMPLETED.
func TestServer_ClientDisconnect(t *testing.T) {
	f := newFixture(t, nil, nil)
	agent := f.client(t, agentToken)
	ctx, cancel := context.WithCancel(context.Background())
	req := inv("test.block", `{"msg":"gone"}`)
	req.CallID = "call-disconnect"
	done := make(chan error, 1)
	go func() { _, err := agent.Execute(ctx, req); done <- err }()
	<-f.gate.started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the client's call: %v", err)
	}
	f.gate.open()
	for range 200 {
		if recs := f.records(t, txn.Filter{CallID: "call-disconnect"}); len(recs) == 1 && recs[0].State == "COMPLETED" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the invocation did not end recorded: %+v", f.records(t, txn.Filter{CallID: "call-disconnect"}))
}

// Shutdown with invocations in flight: the server stops accepting, waits
// the grace period and stops the rest, each answered and recorded: nothing
// is left EXECUTING. It leaves the runtime open, to its owner: a call runs
// on it after Serve returned, and its Close (testkit's, at the end) ends
// without error, nothing of the server's running.
func TestServer_ShutdownWithInflight(t *testing.T) {
	cfg := testConfig()
	cfg.GracePeriod = server.Duration(200 * time.Millisecond)
	f := newFixture(t, cfg, nil)
	f.http.Close() // the fixture's listener is not used here
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
	results := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := c.Execute(context.Background(), inv("test.block", fmt.Sprintf(`{"msg":"s%d"}`, i)))
			results <- err
		}()
	}
	for range 3 {
		<-f.gate.started
	}
	stop()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	// Each caller gets the aborted outcome as an answer, not a cut
	// connection: the server closes only after the handlers have written.
	for range 3 {
		err := <-results
		var e *client.Error
		if !errors.As(err, &e) || e.Status != 200 || !errors.Is(err, client.ErrNotCompleted) || e.Result == nil || e.Result.State != "ROLLED_BACK" {
			t.Errorf("an in-flight caller at shutdown: %v; want the 200 ROLLED_BACK result", err)
			continue
		}
		if !bytes.Contains(e.Result.Attempts[len(e.Result.Attempts)-1], []byte("ABORTED")) {
			t.Errorf("the answer does not say the attempt was aborted: %s", e.Result.Attempts[len(e.Result.Attempts)-1])
		}
	}
	if _, err := c.Execute(context.Background(), inv("test.echo", `{"msg":"late"}`)); err == nil {
		t.Error("a request was served after shutdown")
	}
	f.gate.open()
	if n := f.rt.Running(); n != 0 {
		t.Errorf("%d calls still run in the runtime after Serve returned", n)
	}
	// The runtime is its owner's, still open: it runs a call.
	if res, err := f.rt.Execute(context.Background(), tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(`{"msg":"after"}`), Principal: "agent"}); err != nil || res.State != "COMPLETED" {
		t.Fatalf("a call on the runtime after Serve returned: %v; want it run, COMPLETED", err)
	}
	recs, err := f.rt.Executions(context.Background(), txn.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	aborted := 0
	for _, r := range recs {
		if r.State == "EXECUTING" {
			t.Errorf("%s left EXECUTING", r.ExecutionID)
		}
		if r.State == "ROLLED_BACK" {
			aborted++
		}
	}
	if aborted != 3 {
		t.Errorf("%d of the 3 in-flight invocations recorded ROLLED_BACK: %d records", aborted, len(recs))
	}
}

// A server's shutdown stops what the server started, nothing else: a call
// made on the same runtime by someone else (another front end) runs on
// past the grace period and completes, while the server's own call is
// stopped and answered. A request that would start a call once the
// shutdown has begun is answered 503 shutting-down, as the runtime
// answers a call after its Close has begun.
func TestServer_ShutdownStopsOnlyItsOwnCalls(t *testing.T) {
	cfg := testConfig()
	cfg.GracePeriod = server.Duration(100 * time.Millisecond)
	f := newFixture(t, cfg, nil)
	f.http.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- f.srv.Serve(ctx, l) }()
	c, err := client.New("http://"+l.Addr().String(), agentToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res *tgruntime.Result
		err error
	}
	direct := make(chan answer, 1)
	go func() {
		res, err := f.rt.Execute(context.Background(), tgruntime.Invocation{Tool: "test.block", Input: json.RawMessage(`{"msg":"direct"}`), Principal: "agent"})
		direct <- answer{res, err}
	}()
	<-f.gate.started
	viaHTTP := make(chan error, 1)
	go func() {
		_, err := c.Execute(context.Background(), inv("test.block", `{"msg":"http"}`))
		viaHTTP <- err
	}()
	<-f.gate.started
	stop()
	for {
		rec := httptest.NewRecorder()
		f.srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code == http.StatusServiceUnavailable {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/tools/test.echo/execute", strings.NewReader(`{"input":{"msg":"late"}}`))
	req.Header.Set("Authorization", "Bearer "+agentToken)
	req.Header.Set("Content-Type", "application/json")
	f.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "shutting-down") {
		t.Errorf("a call during the shutdown: %d %s; want 503 shutting-down with Retry-After", rec.Code, rec.Body)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	var e *client.Error
	if err := <-viaHTTP; !errors.As(err, &e) || e.Status != 200 || e.Result == nil || e.Result.State != "ROLLED_BACK" {
		t.Errorf("the server's own call: %v; want it stopped, the 200 ROLLED_BACK result", err)
	}
	select {
	case a := <-direct:
		t.Fatalf("the shutdown stopped a call it did not start: %v", a.err)
	default:
	}
	if n := f.rt.Running(); n != 1 {
		t.Errorf("%d calls run in the runtime after Serve returned; want the other caller's 1", n)
	}
	f.gate.open()
	if a := <-direct; a.err != nil || a.res.State != "COMPLETED" {
		t.Errorf("the other caller's call: %v; want it to run to its end, COMPLETED", a.err)
	}
	if recs := f.records(t, txn.Filter{}); len(recs) != 2 {
		t.Errorf("%d records; want the 2 calls'", len(recs))
	}
}

// The caller's trace continues into toolgate: the server span's parent is
// the client's span, and the invocation's span is under the server span.
func TestServer_TracePropagation(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	f := newFixture(t, nil, &server.Options{TracerProvider: tp})
	clientTP := sdktrace.NewTracerProvider()
	ctx, span := clientTP.Tracer("test-client").Start(context.Background(), "agent step")
	res, err := f.client(t, agentToken).Execute(ctx, inv("test.echo", `{"msg":"traced"}`))
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	if res.TraceID != span.SpanContext().TraceID().String() {
		t.Errorf("the result's trace %s is not the client's %s", res.TraceID, span.SpanContext().TraceID())
	}
	var serverSpan, toolSpan sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch {
		case s.SpanKind() == trace.SpanKindServer:
			serverSpan = s
		case strings.HasPrefix(s.Name(), "execute_tool"):
			toolSpan = s
		}
	}
	if serverSpan == nil || toolSpan == nil {
		t.Fatalf("spans: server %v, execute_tool %v", serverSpan, toolSpan)
	}
	if serverSpan.Parent().SpanID() != span.SpanContext().SpanID() || !serverSpan.Parent().IsRemote() {
		t.Errorf("server span's parent %v; want the client's span %v", serverSpan.Parent().SpanID(), span.SpanContext().SpanID())
	}
	if serverSpan.Name() != "POST /v1/tools/{name}/execute" {
		t.Errorf("server span name %q", serverSpan.Name())
	}
	if toolSpan.Parent().SpanID() != serverSpan.SpanContext().SpanID() {
		t.Errorf("execute_tool's parent is not the server span")
	}
}

// Header injection and raw protocol abuse are refused with 400, and run
// nothing.
func TestServer_RawRequests(t *testing.T) {
	f := newFixture(t, nil, nil)
	addr := strings.TrimPrefix(f.http.URL, "http://")
	raw := func(req string) int {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	body := `{"input":{"msg":"x"}}`
	for name, key := range map[string]string{
		"NUL in a header":     "a\x00b",
		"bare CR in a header": "a\rX-Injected: 1",
		"control character":   "a\x01b",
	} {
		req := "POST /v1/tools/test.echo/execute HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + agentToken +
			"\r\nContent-Type: application/json\r\nIdempotency-Key: " + key + fmt.Sprintf("\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(body)) + body
		if code := raw(req); code != 400 {
			t.Errorf("%s: %d; want 400", name, code)
		}
	}
	if recs := f.records(t, txn.Filter{}); len(recs) != 0 {
		t.Errorf("%d executions recorded", len(recs))
	}
	code, _, _ := f.post(t, "/v1/tools/test.echo/execute", agentToken, "application/json", body,
		"Idempotency-Key", "one", "Idempotency-Key", "two")
	if code != 400 {
		t.Errorf("two Idempotency-Key headers: %d", code)
	}
	code, _, _ = f.post(t, "/v1/tools/test.echo/execute", agentToken, "application/json", body, "Idempotency-Key", strings.Repeat("k", 300))
	if code != 400 {
		t.Errorf("an oversized Idempotency-Key: %d", code)
	}
}

// A method an endpoint does not take is a 405 problem naming the methods
// it does take, not a 404: the endpoint exists.
func TestServer_MethodNotAllowed(t *testing.T) {
	f := newFixture(t, nil, nil)
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodGet, "/v1/tools/test.echo/execute", "POST"},
		{http.MethodPut, "/v1/tools/test.echo/execute", "POST"},
		{http.MethodGet, "/tools/test.echo/execute", "POST"},
		{http.MethodDelete, "/v1/tools/test.echo", "GET, HEAD"},
		{http.MethodPost, "/v1/tools", "GET, HEAD"},
		{http.MethodPatch, "/v1/executions/x", "GET, HEAD"},
		{http.MethodGet, "/v1/intents", "POST"},
		{http.MethodGet, "/v1/intents/x/approve", "POST"},
		{http.MethodGet, "/v1/intents/x/execute", "POST"},
		{http.MethodPost, "/healthz", "GET, HEAD"},
		{http.MethodPost, "/readyz", "GET, HEAD"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, f.http.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+agentToken)
			resp, err := f.http.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var p map[string]any
			json.NewDecoder(resp.Body).Decode(&p)
			if resp.StatusCode != 405 || p["status"] != float64(405) || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%d %v; want a 405 problem", resp.StatusCode, p)
			}
			if got := resp.Header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q; want %q", got, tc.allow)
			}
		})
	}
	if code, _, _ := f.post(t, "/v1/no/such/endpoint", agentToken, "application/json", `{}`); code != 404 {
		t.Errorf("an unknown path: %d; want 404", code)
	}
}

// A body of the wrong shape is described in the API's terms, never with
// the server's Go type names.
func TestServer_BodyShapeErrors(t *testing.T) {
	f := newFixture(t, nil, nil)
	for _, tc := range []struct{ name, path, body, want string }{
		{"array", "/v1/tools/test.echo/execute", `[1]`, `JSON object with the fields "input", "version", "callId"`},
		{"string", "/v1/tools/test.echo/execute", `"x"`, "JSON object"},
		{"number version", "/v1/tools/test.echo/execute", `{"input":{"msg":"x"},"version":7}`, `"version" must be a string, not a number`},
		{"object callId", "/v1/tools/test.echo/execute", `{"input":{"msg":"x"},"callId":{}}`, `"callId" must be a string, not an object`},
		{"proposal array", "/v1/intents", `[]`, `JSON object with the fields "tool", "version", "input"`},
		{"intent hash", "/v1/intents/x/execute", `{"hash":true}`, `"hash" must be a string, not a boolean`},
		{"unknown field", "/v1/tools/test.echo/execute", `{"input":{},"grants":[]}`, `unknown field "grants"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, p := f.post(t, tc.path, agentToken, "application/json", tc.body)
			detail, _ := p["detail"].(string)
			if code != 400 || !strings.Contains(detail, tc.want) {
				t.Errorf("%d %q; want 400 saying %q", code, detail, tc.want)
			}
			for _, leak := range []string{"Go ", "server.", "Request", "unmarshal"} {
				if strings.Contains(detail, leak) {
					t.Errorf("the detail %q leaks %q", detail, leak)
				}
			}
		})
	}
}

func TestServer_Health(t *testing.T) {
	f := newFixture(t, nil, nil)
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := f.http.Client().Get(f.http.URL + p)
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("%s: %v %v", p, resp.StatusCode, err)
		}
		resp.Body.Close()
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7070": true, "[::1]:7070": true, "localhost:1": true,
		"0.0.0.0:7070": false, ":7070": false, "10.0.0.1:80": false, "nonsense": false,
	} {
		if got := server.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v", addr, got)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"clear token":              `{"tokens":[{"principal":"a","sha256":"secret"}]}`,
		"unknown field":            `{"tokens":[],"token":"x"}`,
		"empty principal":          `{"tokens":[{"principal":"","sha256":"` + server.HashToken("x") + `"}]}`,
		"principal with a newline": `{"tokens":[{"principal":"a\nb","sha256":"` + server.HashToken("x") + `"}]}`,
		"duplicate":                `{"tokens":[{"principal":"a","sha256":"` + server.HashToken("x") + `"},{"principal":"b","sha256":"` + server.HashToken("x") + `"}]}`,
		"bad rate":                 `{"rateLimits":{"perTool":{"perSecond":5}}}`,
		"bad duration":             `{"gracePeriod":"soon"}`,
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".json")
		writeFile(t, p, body)
		if _, err := server.LoadConfig(p); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	p := filepath.Join(dir, "ok.json")
	writeFile(t, p, `{"tokens":[{"principal":"a","sha256":"`+strings.ToUpper(server.HashToken("x"))+`"}],"gracePeriod":"3s"}`)
	if c, err := server.LoadConfig(p); err != nil || time.Duration(c.GracePeriod) != 3*time.Second {
		t.Errorf("valid config: %v", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
