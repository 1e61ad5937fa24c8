package mcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// The gateway tests put a real MCP server (testdata/upstream, built from
// the SDK) behind toolgate; it writes a line per call it receives to a
// file, which proves what reached it.

var upstreamOnce sync.Once
var upstreamPath string
var upstreamErr error

// upstream builds testdata/upstream next to the toolgate binary (removed
// with it).
func upstream(t testing.TB) string {
	t.Helper()
	bin := toolgate(t)
	upstreamOnce.Do(func() {
		dir, err := os.MkdirTemp(filepath.Dir(bin), "upstream-")
		if err != nil {
			upstreamErr = err
			return
		}
		upstreamPath = filepath.Join(dir, "upstream")
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if out, err := exec.Command(gobin, "build", "-o", upstreamPath, "./testdata/upstream").CombinedOutput(); err != nil {
			upstreamErr = fmt.Errorf("building the upstream: %v\n%s", err, out)
		}
	})
	if upstreamErr != nil {
		t.Fatal(upstreamErr)
	}
	return upstreamPath
}

// upstreamFile writes a registry file with one upstream server "up" and
// returns its path and the server's call log.
func upstreamFile(t testing.TB, dir, extra string) (file, calls string) {
	t.Helper()
	calls = filepath.Join(dir, "calls.log")
	body := fmt.Sprintf(`mcp_servers:
  - name: up
    command: %s
    env: {UPSTREAM_CALLS: %q, UPSTREAM_PID: %q, UPSTREAM_CRASHED: %q}
    env_inherit: [UPSTREAM_DRIFT]
    limits: {max_execution_time: 20s}
%s`, upstream(t), calls, filepath.Join(dir, "pid"), filepath.Join(dir, "crashed"), extra)
	file = filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, calls
}

// calls counts the lines of the call log equal to line.
func calls(t testing.TB, log, line string) int {
	t.Helper()
	b, err := os.ReadFile(log)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if l == line {
			n++
		}
	}
	return n
}

// waitCall waits until the call log holds line.
func waitCall(t testing.TB, log, line string) {
	t.Helper()
	for i := 0; calls(t, log, line) == 0; i++ {
		if i > 3000 {
			t.Fatalf("the upstream never logged %q", line)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// `toolgate mcp --registry gateway.yaml` in front of a real MCP server:
// its tools are listed under its name (one whose schema RFC-0001 6.3
// faults too: for an upstream tool that is a warning, see
// TestGateway_PeerSchemasAndNames), and each call goes through the lifecycle: granted
// COMPLETED; ungranted DENIED without reaching the upstream; requiring
// approval, an intent that reaches it only once approved, once; isError
// ROLLED_BACK with the upstream's text; the deadline ABORTED and the
// upstream call cancelled; the upstream killed mid-call a ResourceError,
// recorded, and the next call starts it again.
func TestGateway_ToolgateMCP(t *testing.T) {
	bin := toolgate(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "tg.db")
	reg, log := upstreamFile(t, dir, `    tools:
      gated: {requires_approval: true}
      hang: {limits: {max_execution_time: 500ms}}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	start := func() (*sdk.ClientSession, *exec.Cmd, *syncBuffer) {
		cmd := exec.Command(bin, "--db", db, "--registry", reg, "mcp", "--principal", "tester",
			"--allow", "mcp.call:up/echo", "--allow", "mcp.call:up/gated", "--allow", "mcp.call:up/fail",
			"--allow", "mcp.call:up/slow", "--allow", "mcp.call:up/hang", "--allow", "mcp.call:up/nodesc")
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		return connect(t, &sdk.CommandTransport{Command: cmd}, nil, ""), cmd, stderr
	}
	cs, cmd, stderr := start()

	names := map[string]bool{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names[tool.Name] = true
	}
	for _, want := range []string{"up.echo", "up.gated", "up.fail", "up.slow", "up.echo--1.2.3"} {
		if !names[want] {
			t.Errorf("tools/list lacks %s: %v", want, names)
		}
	}
	// The caller sees only the tools its grants let it call: up.secret and
	// up.plain, whose mcp.call it was not granted, are not listed (and a
	// call of one is still decided, below).
	for _, hidden := range []string{"up.secret", "up.plain"} {
		if names[hidden] {
			t.Errorf("tools/list shows %s, which the caller may not call", hidden)
		}
	}
	if !names["up.nodesc"] {
		t.Error("up.nodesc, whose schema RFC-0001 6.3 faults (a warning for an upstream tool), is not listed")
	}

	res := call(t, ctx, cs, "up.echo", map[string]any{"text": "hi"}, nil)
	completed(t, res)
	if got := text(t, res); !jsonEqual([]byte(got), []byte(`{"echoed":"hi"}`)) {
		t.Errorf("up.echo: %s", got)
	}
	if n := calls(t, log, "echo"); n != 1 {
		t.Errorf("the upstream got %d echo calls, want 1", n)
	}

	if o := failed(t, call(t, ctx, cs, "up.secret", map[string]any{"text": "hi"}, nil)); o.State != "DENIED" || o.Error.Type != "AuthorizationError" {
		t.Errorf("ungranted up.secret: %+v", o)
	}
	if n := calls(t, log, "secret"); n != 0 {
		t.Errorf("a DENIED call reached the upstream (%d calls)", n)
	}

	id, hash, _ := intentOf(t, call(t, ctx, cs, "up.gated", map[string]any{"text": "ship it"}, nil))
	if n := calls(t, log, "gated"); n != 0 {
		t.Errorf("a call requiring approval reached the upstream before approval (%d calls)", n)
	}

	if o := failed(t, call(t, ctx, cs, "up.fail", map[string]any{}, nil)); o.State != "ROLLED_BACK" || !strings.Contains(o.Error.Message, "upstream says no") {
		t.Errorf("up.fail (isError upstream): %+v", o)
	}

	if o := failed(t, call(t, ctx, cs, "up.hang", map[string]any{"ms": 600000}, nil)); o.State != "ROLLED_BACK" || o.Error.Type != "TimeoutError" {
		t.Errorf("up.hang past its deadline: %+v", o)
	}
	waitCall(t, log, "cancelled hang") // the upstream call was cancelled

	// Kill the upstream while it runs a call.
	done := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "up.slow", Arguments: map[string]any{"ms": 600000}})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	waitCall(t, log, "slow")
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(b))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := <-done
	if killed == nil {
		t.FailNow()
	}
	slow := failed(t, killed)
	if slow.State != "ROLLED_BACK" || slow.Error.Type != "ResourceError" || slow.Error.Code != "mcp_upstream" {
		t.Errorf("up.slow, its upstream killed: %+v", slow)
	}
	// The next call starts the upstream again.
	completed(t, call(t, ctx, cs, "up.echo", map[string]any{"text": "again"}, nil))
	cs.Close()
	cmd.Wait()
	if strings.Contains(stderr.String(), "up.nodesc left out") {
		t.Errorf("up.nodesc was left out; stderr:\n%s", stderr)
	}

	out, err := exec.Command(bin, "--db", db, "--registry", reg, "intent", "approve", id, "--yes", "--approver", "alice").CombinedOutput()
	if err != nil {
		t.Fatalf("toolgate intent approve: %v\n%s", err, out)
	}
	if n := calls(t, log, "gated"); n != 0 {
		t.Errorf("approving reached the upstream (%d calls)", n)
	}
	cs, cmd, _ = start()
	completed(t, call(t, ctx, cs, mcp.ExecuteIntentTool, map[string]any{"id": id, "hash": hash}, nil))
	completed(t, call(t, ctx, cs, "up.gated", map[string]any{"text": "ship it"}, nil)) // replayed
	if n := calls(t, log, "gated"); n != 1 {
		t.Errorf("the approved call reached the upstream %d times, want once", n)
	}
	cs.Close()
	cmd.Wait()
	// toolgate stopped the upstream it started when it exited.
	b, err = os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	last, _ := strconv.Atoi(string(b))
	for i := 0; syscall.Kill(last, 0) == nil; i++ {
		if i > 1000 {
			t.Fatalf("the upstream (pid %d) outlived toolgate", last)
		}
		time.Sleep(10 * time.Millisecond)
	}

	if out, err := exec.Command(bin, "--db", db, "audit", "verify").CombinedOutput(); err != nil {
		t.Errorf("toolgate audit verify: %v\n%s", err, out)
	}
	rt, err := tgruntime.Open(db, &tgruntime.Options{OpenTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	recs, err := rt.Executions(context.Background(), txn.Filter{ToolID: "up.slow"})
	if err != nil || len(recs) != 1 || recs[0].ExecutionID != slow.ExecutionID || recs[0].State != "ROLLED_BACK" {
		t.Errorf("the killed call's record: %v %+v", err, recs)
	}
}

var hashRE = regexp.MustCompile(`definition hashes to ([0-9a-f]{64})`)

// A pinned version pins the upstream tool's whole definition: without a
// hash the file refuses to load and says the hash to review (toolgate pin
// prints them all); with the pin block, it loads; when the upstream's
// schema, or only its description, then changes, the tool is unavailable
// (a ResourceError that reaches nothing) with a reason naming what
// changed, and the gateway's warnings say so; pin_definitions: false lets
// the version stand alone.
func TestGateway_PinnedDefinitionDrift(t *testing.T) {
	dir := t.TempDir()
	load := func(extra string) (*mcp.Gateway, *tools.Registry, error) {
		file, _ := upstreamFile(t, dir, extra)
		body, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.Replace(body, []byte("env_inherit: [UPSTREAM_DRIFT]"), []byte("env_inherit: [UPSTREAM_DRIFT, UPSTREAM_DESC_DRIFT]"), 1)
		if err := os.WriteFile(file, body, 0o600); err != nil {
			t.Fatal(err)
		}
		gw := mcp.NewGateway(nil)
		t.Cleanup(func() { gw.Close() })
		reg, err := tools.LoadRegistryFileWith(file, gw.Tools)
		return gw, reg, err
	}
	_, _, err := load("    tools:\n      echo: {version: 1.0.0}\n")
	m := hashRE.FindStringSubmatch(fmt.Sprint(err))
	if !errors.Is(err, tools.ErrRegistryFile) || m == nil || !strings.Contains(err.Error(), "toolgate pin up prints") {
		t.Fatalf("a pin without a hash: %v", err)
	}
	if _, _, err := load("    tools:\n      echo: {version: 1.0.0, definition_sha256: " + m[1] + "}\n"); err != nil {
		t.Fatal(err)
	}

	file, _ := upstreamFile(t, dir, "")
	gw := mcp.NewGateway(nil)
	servers := []tools.MCPServer{}
	if _, err := tools.LoadRegistryFileWith(file, func(s []tools.MCPServer) ([]tools.Tool, error) { servers = s; return nil, nil }); err != nil {
		t.Fatal(err)
	}
	block, err := gw.PinBlock(servers[0])
	gw.Close()
	if err != nil || !strings.HasPrefix(block, "    version: 1.2.3\n    tools:\n") || !strings.Contains(block, `      "echo": {schema_sha256: `) {
		t.Fatalf("PinBlock: %v\n%s", err, block)
	}
	pinned := strings.Replace(block, "version: 1.2.3", "version: 1.0.0", 1)
	gw, reg, err := load(pinned)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := reg.Lookup("up.echo", ""); err != nil || e.Declaration().Version != "1.0.0" {
		t.Fatalf("up.echo pinned: %v", err)
	}
	if len(gw.Warnings()) != 0 {
		t.Errorf("warnings: %v", gw.Warnings())
	}

	for _, tc := range []struct{ env, want string }{
		{"UPSTREAM_DRIFT", "its schemas changed"},
		{"UPSTREAM_DESC_DRIFT", "its title, description or annotations changed, its schemas did not"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, "1")
			gw, reg, err := load(pinned)
			if err != nil {
				t.Fatal(err)
			}
			if w := strings.Join(gw.Warnings(), "\n"); !strings.Contains(w, "up.echo unavailable: the upstream's definition of echo changed under pinned version 1.0.0: "+tc.want) {
				t.Errorf("warnings: %s", w)
			}
			rt, err := tgruntime.Open(filepath.Join(t.TempDir(), "tg.db"), &tgruntime.Options{Registry: reg, NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close(context.Background())
			res, _ := rt.Execute(context.Background(), grantUp("up.echo", `{"text":"x"}`))
			if res == nil || res.State != "ROLLED_BACK" || res.Error == nil || res.Error.Type != "ResourceError" || !strings.Contains(res.Error.Message, tc.want) {
				t.Errorf("up.echo drifted: %+v", res)
			}
			if res, _ := rt.Execute(context.Background(), grantUp("up.plain", `{}`)); res == nil || res.State != "COMPLETED" {
				t.Errorf("up.plain, unchanged: %+v", res)
			}
		})
	}

	// The version alone, by choice.
	if _, reg, err := load("    version: 1.0.0\n    pin_definitions: false\n"); err != nil {
		t.Fatal(err)
	} else if e, err := reg.Lookup("up.echo", ""); err != nil || e.Declaration().Version != "1.0.0" {
		t.Fatalf("up.echo, version alone: %v", err)
	}
}

// An upstream that dies mid-call is a transient ResourceError: an
// idempotent tool's attempt is retried (on a new upstream process), any
// other's is not.
func TestGateway_UnavailableRetriedWhenIdempotent(t *testing.T) {
	for _, idem := range []bool{true, false} {
		t.Run(fmt.Sprint("idempotent=", idem), func(t *testing.T) {
			dir := t.TempDir()
			file, log := upstreamFile(t, dir, fmt.Sprintf("    tools:\n      crash: {idempotent: %v}\n", idem))
			gw := mcp.NewGateway(nil)
			defer gw.Close()
			reg, err := tools.LoadRegistryFileWith(file, gw.Tools)
			if err != nil {
				t.Fatal(err)
			}
			rt, err := tgruntime.Open(filepath.Join(dir, "tg.db"), &tgruntime.Options{Registry: reg, NoSync: true,
				Retry: tgruntime.RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close(context.Background())
			res, _ := rt.Execute(context.Background(), tgruntime.Invocation{Tool: "up.crash", Input: []byte(`{}`), Principal: "p",
				Grants: []capability.Capability{capability.MustParse("mcp.call:up")}})
			if res == nil {
				t.Fatal("no result")
			}
			if idem {
				if res.State != "COMPLETED" || len(res.Attempts) != 2 || calls(t, log, "crash") != 2 {
					t.Errorf("idempotent: %s after %d attempts, %d upstream calls; want COMPLETED after 2", res.State, len(res.Attempts), calls(t, log, "crash"))
				}
				return
			}
			if res.State != "ROLLED_BACK" || res.Error == nil || res.Error.Type != "ResourceError" || len(res.Attempts) != 1 || calls(t, log, "crash") != 1 {
				t.Errorf("not idempotent: %s %+v after %d attempts; want one ResourceError", res.State, res.Error, len(res.Attempts))
			}
		})
	}
}

// An upstream over streamable HTTP on loopback: its header comes from the
// environment variable the file names, and a call reaches it COMPLETED; a
// server that is gone is a ResourceError.
func TestGateway_HTTPUpstream(t *testing.T) {
	up := sdk.NewServer(&sdk.Implementation{Name: "web", Version: "0.3.0"}, nil)
	var mu sync.Mutex
	called := 0
	up.AddTool(&sdk.Tool{Name: "ping", Description: "answers", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			mu.Lock()
			called++
			mu.Unlock()
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "pong"}}}, nil
		})
	up.AddTool(&sdk.Tool{Name: "refuse", Description: "answers a JSON-RPC error", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the upstream refuses"}
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return up }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer from-env" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	dir := t.TempDir()
	file := filepath.Join(dir, "gateway.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(`mcp_servers:
  - name: web
    url: %s
    headers_from_env: {Authorization: WEB_MCP_AUTH}
    limits: {max_execution_time: 10s}
`, srv.URL)), 0o600)

	gw := mcp.NewGateway(nil)
	if _, err := tools.LoadRegistryFileWith(file, gw.Tools); err == nil || !strings.Contains(err.Error(), "WEB_MCP_AUTH is not set") {
		t.Fatalf("a header whose variable is not set: %v", err)
	}
	gw.Close()
	t.Setenv("WEB_MCP_AUTH", "Bearer from-env")
	gw = mcp.NewGateway(nil)
	defer gw.Close()
	reg, err := tools.LoadRegistryFileWith(file, gw.Tools)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := tgruntime.Open(filepath.Join(dir, "tg.db"), &tgruntime.Options{Registry: reg, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	run := func() *tgruntime.Result {
		res, _ := rt.Execute(context.Background(), tgruntime.Invocation{Tool: "web.ping", Input: []byte(`{}`), Principal: "p",
			Grants: []capability.Capability{capability.MustParse("mcp.call:web")}})
		if res == nil {
			t.Fatal("no result")
		}
		return res
	}
	res := run()
	mu.Lock()
	n := called
	mu.Unlock()
	if res.State != "COMPLETED" || res.Version != "0.3.0" || !strings.Contains(string(res.Output), "pong") || n != 1 {
		t.Fatalf("web.ping: %s %s %+v, %d calls", res.State, res.Output, res.Error, n)
	}
	// A JSON-RPC error from the upstream is the tool's failure, not the
	// upstream's absence.
	res, _ = rt.Execute(context.Background(), tgruntime.Invocation{Tool: "web.refuse", Input: []byte(`{}`), Principal: "p",
		Grants: []capability.Capability{capability.MustParse("mcp.call:web")}})
	if res == nil || res.State != "ROLLED_BACK" || res.Error == nil || res.Error.Type != "ExecutionError" || !strings.Contains(res.Error.Message, "the upstream refuses") {
		t.Errorf("web.refuse: %+v", res)
	}
	srv.CloseClientConnections()
	srv.Close()
	if res := run(); res.State != "ROLLED_BACK" || res.Error == nil || res.Error.Type != "ResourceError" {
		t.Errorf("web.ping, its server gone: %s %+v", res.State, res.Error)
	}
}

// An upstream result that its tool's own outputSchema refuses is not
// passed on: the runtime validates it, and the call ends ROLLED_BACK with a
// message saying the output does not match the schema, and where.
func TestGateway_UpstreamOutputFailsItsSchema(t *testing.T) {
	dir := t.TempDir()
	file, log := upstreamFile(t, dir, "")
	gw := mcp.NewGateway(nil)
	defer gw.Close()
	reg, err := tools.LoadRegistryFileWith(file, gw.Tools)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := tgruntime.Open(filepath.Join(dir, "tg.db"), &tgruntime.Options{Registry: reg, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	res, _ := rt.Execute(context.Background(), tgruntime.Invocation{Tool: "up.badout", Input: []byte(`{"text":"hi"}`), Principal: "p",
		Grants: []capability.Capability{capability.MustParse("mcp.call:up")}})
	if res == nil {
		t.Fatal("no result")
	}
	if calls(t, log, "badout") != 1 {
		t.Errorf("the upstream got %d calls, want 1", calls(t, log, "badout"))
	}
	if res.State != "ROLLED_BACK" || res.Error == nil || res.Error.Type != "ValidationError" ||
		!strings.Contains(res.Error.Message, "output") || !strings.Contains(res.Error.Message, "/echoed") || len(res.Output) != 0 {
		t.Errorf("up.badout: %s, %+v, output %s; want ROLLED_BACK with a ValidationError naming the output's /echoed", res.State, res.Error, res.Output)
	}
	t.Logf("the message: %s", res.Error.Message)
}

// A stdio upstream runs bounded as the process tools are (the bounded
// process tools document, 004): the limits max_memory and max_file_size
// of its server are its RLIMIT_AS and RLIMIT_FSIZE, and closing the gateway
// kills its whole process group: a child it started does not outlive it.
func TestGateway_StdioUpstreamBounded(t *testing.T) {
	dir := t.TempDir()
	grandchild := filepath.Join(dir, "grandchild")
	t.Setenv("UPSTREAM_GRANDCHILD", grandchild)
	file, _ := upstreamFile(t, dir, "")
	body, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	body = bytes.Replace(body, []byte("env_inherit: [UPSTREAM_DRIFT]"), []byte("env_inherit: [UPSTREAM_DRIFT, UPSTREAM_GRANDCHILD]"), 1)
	body = bytes.Replace(body, []byte("limits: {max_execution_time: 20s}"), []byte("limits: {max_execution_time: 20s, max_memory: 4294967296, max_file_size: 1048576}"), 1)
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	gw := mcp.NewGateway(nil)
	reg, err := tools.LoadRegistryFileWith(file, gw.Tools)
	if err != nil {
		gw.Close()
		t.Fatal(err)
	}
	rt, err := tgruntime.Open(filepath.Join(dir, "tg.db"), &tgruntime.Options{Registry: reg, NoSync: true})
	if err != nil {
		gw.Close()
		t.Fatal(err)
	}
	res, _ := rt.Execute(context.Background(), tgruntime.Invocation{Tool: "up.limits", Input: []byte(`{}`), Principal: "p",
		Grants: []capability.Capability{capability.MustParse("mcp.call:up")}})
	rt.Close(context.Background())
	if res == nil {
		t.Fatal("no result")
	}
	if res.State != "COMPLETED" || !strings.Contains(string(res.Output), "as=4294967296 fsize=1048576") {
		t.Errorf("the upstream's limits: %s %s %+v; want as=4294967296 fsize=1048576", res.State, res.Output, res.Error)
	}
	b, err := os.ReadFile(grandchild)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(b))
	if syscall.Kill(pid, 0) != nil {
		t.Fatalf("the upstream's child %d is not running", pid)
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	// The child is killed with the group; once killed, it is reaped by init
	// (its parent, the upstream, is gone), which may take a moment, and on a
	// loaded machine a few seconds. (It sleeps 600 s.)
	alive := func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return syscall.Kill(pid, 0) == nil && (err != nil || !strings.Contains(string(stat), ") Z "))
	}
	for guard := time.Now().Add(time.Minute); alive(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(guard) { // a hang guard, not a timing assertion
			t.Fatalf("the upstream's child %d outlived the gateway", pid)
		}
	}
}

var httpUpstreamOnce sync.Once
var httpUpstreamPath string
var httpUpstreamErr error

// httpUpstream starts testdata/httpupstream (built once, next to the
// toolgate binary, without the race detector), answering with JSON or with
// an event stream, and returns its URL once it listens; it is stopped when
// t ends.
func httpUpstream(t *testing.T, jsonResponse bool) string {
	t.Helper()
	bin := toolgate(t)
	httpUpstreamOnce.Do(func() {
		dir, err := os.MkdirTemp(filepath.Dir(bin), "httpupstream-")
		if err != nil {
			httpUpstreamErr = err
			return
		}
		httpUpstreamPath = filepath.Join(dir, "httpupstream")
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if out, err := exec.Command(gobin, "build", "-o", httpUpstreamPath, "./testdata/httpupstream").CombinedOutput(); err != nil {
			httpUpstreamErr = fmt.Errorf("building the HTTP upstream: %v\n%s", err, out)
		}
	})
	if httpUpstreamErr != nil {
		t.Fatal(httpUpstreamErr)
	}
	cmd := exec.Command(httpUpstreamPath)
	if jsonResponse {
		cmd.Env = append(os.Environ(), "UPSTREAM_JSON=1")
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // it exits
		if err := cmd.Wait(); err != nil {
			t.Errorf("the HTTP upstream: %v\n%s", err, stderr.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "URL ")
	if err != nil || !ok {
		t.Fatalf("the HTTP upstream did not say where it listens: %q %v\n%s", line, err, stderr.String())
	}
	return url
}

// An HTTP upstream that answers a call with more than the gateway takes
// (16 MiB here; room for twice max_output_bytes when that is more) does
// not make toolgate read it all into memory: the SDK reads a JSON answer
// whole, however large; the gateway cuts it at the bound, and the call is
// a ResourceError, recorded; the next call connects again. An answer of an
// event stream is bounded per event the same way. (The upstream, whose
// tool huge answers 20 MiB, runs in a process of its own, without the race
// detector: see testdata/httpupstream.)
func TestGateway_HTTPUpstreamHugeAnswer(t *testing.T) {
	for _, jsonResponse := range []bool{true, false} {
		t.Run(fmt.Sprint("json=", jsonResponse), func(t *testing.T) {
			url := httpUpstream(t, jsonResponse) // stopped after the gateway, which holds a stream open
			dir := t.TempDir()
			file := filepath.Join(dir, "gateway.yaml")
			os.WriteFile(file, []byte(fmt.Sprintf("mcp_servers:\n  - name: web\n    url: %s\n    limits: {max_execution_time: 20s}\n", url)), 0o600)
			rt, _, run := loadGateway(t, file, "mcp.call:web")
			if res := run("web.huge", `{}`); res.State != "ROLLED_BACK" || res.Error == nil || res.Error.Type != "ResourceError" || res.Error.Code != "mcp_upstream" {
				t.Errorf("web.huge: %s %+v, %d bytes of output; want a ResourceError", res.State, res.Error, len(res.Output))
			}
			if res := run("web.ping", `{}`); res.State != "COMPLETED" {
				t.Errorf("web.ping after: %s %+v", res.State, res.Error)
			}
			recs, err := rt.Executions(context.Background(), txn.Filter{ToolID: "web.huge"})
			if err != nil || len(recs) != 1 || recs[0].State != "ROLLED_BACK" || recs[0].Principal != "p" {
				t.Errorf("the records of web.huge: %v %+v", err, recs)
			}
			if _, err := rt.VerifyRecords(context.Background(), func(d tgruntime.Discrepancy) error {
				t.Errorf("verify: %s", d)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An upstream cannot take the id of a built-in tool or of toolgate's own
// tool: under a server named file, a tool listed as read would be
// file.read, at the upstream's version (1.2.3, above the built-in's), so
// that a call of file.read ran the upstream's; under a server named
// toolgate, execute_intent made toolgate mcp refuse to start. Both are left
// out with a warning; the built-in stays what file.read runs.
func TestGateway_UpstreamCannotTakeBuiltinIDs(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("UPSTREAM_EXTRA", "read,list,execute_intent")
	var body strings.Builder
	body.WriteString("mcp_servers:\n")
	for _, name := range []string{"file", "toolgate"} {
		fmt.Fprintf(&body, "  - name: %s\n    command: %s\n    env: {UPSTREAM_CALLS: %q}\n    env_inherit: [UPSTREAM_EXTRA]\n    limits: {max_execution_time: 20s}\n",
			name, upstream(t), filepath.Join(dir, name+".log"))
	}
	file := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(file, []byte(body.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := mcp.NewGateway(nil)
	defer gw.Close()
	reg, err := tools.LoadRegistryFileWith(file, gw.Tools, tools.Builtins()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"file.read", "file.list"} {
		e, err := reg.Lookup(id, "")
		if err != nil {
			t.Fatal(err)
		}
		d := e.Declaration()
		for _, c := range d.MayRequire() {
			if c.Name == "mcp.call" {
				t.Errorf("%s runs the upstream's tool (%s@%s, %s)", id, d.ID, d.Version, c)
			}
		}
	}
	if e, err := reg.Lookup("file.echo", ""); err != nil || e.Declaration().Version != "1.2.3" {
		t.Errorf("file.echo, an id of the server's own: %v", err)
	}
	warnings := strings.Join(gw.Warnings(), "\n")
	for _, want := range []string{"file.read left out", "file.list left out", "toolgate.execute_intent left out"} {
		if !strings.Contains(warnings, want) {
			t.Errorf("no warning %q in:\n%s", want, warnings)
		}
	}
	rt, err := tgruntime.Open(filepath.Join(dir, "tg.db"), &tgruntime.Options{Registry: reg, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	if _, err := mcp.New(rt, nil); err != nil {
		t.Errorf("the MCP server does not start: %v", err)
	}
}

// An HTTP upstream that redirects does not get toolgate to send the header
// from the environment (a credential) to where it points: the gateway
// follows no redirect, and the server does not load.
func TestGateway_HTTPUpstreamRedirectKeepsTheSecret(t *testing.T) {
	var mu sync.Mutex
	var leaked []string
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		leaked = append(leaked, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer elsewhere.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/mcp", http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "gateway.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(`mcp_servers:
  - name: web
    url: %s
    headers_from_env: {Authorization: WEB_MCP_AUTH}
    limits: {max_execution_time: 10s}
`, redirector.URL)), 0o600)
	t.Setenv("WEB_MCP_AUTH", "Bearer from-env")
	gw := mcp.NewGateway(&mcp.GatewayOptions{StartTimeout: 10 * time.Second})
	defer gw.Close()
	_, err := tools.LoadRegistryFileWith(file, gw.Tools)
	if err == nil {
		t.Fatal("a server that redirects loaded")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, h := range leaked {
		if h != "" {
			t.Errorf("the redirect's target got Authorization %q", h)
		}
	}
	t.Logf("the error: %v", err)
}

// An upstream whose tools/list never ends (a next cursor on every page)
// is refused once it listed more than GatewayOptions.MaxTools, rather than
// read until the start timeout, its tools piling up in memory.
func TestGateway_EndlessToolsList(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("UPSTREAM_ENDLESS", "1")
	file, _ := upstreamFile(t, dir, "")
	body, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	body = bytes.Replace(body, []byte("env_inherit: [UPSTREAM_DRIFT]"), []byte("env_inherit: [UPSTREAM_ENDLESS]"), 1)
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	gw := mcp.NewGateway(&mcp.GatewayOptions{StartTimeout: 60 * time.Second, MaxTools: 100})
	defer gw.Close()
	_, err = tools.LoadRegistryFileWith(file, gw.Tools)
	if err == nil || !strings.Contains(err.Error(), "lists more than 100 tools") {
		t.Fatalf("an endless tools/list: %v", err)
	}
}

// What an upstream asks of its client (elicitation, sampling, roots)
// reaches neither the agent nor a person: toolgate's client answers
// elicitation and sampling with an error, and lists no roots; the agent's
// client, with an elicitation handler, is asked nothing.
func TestGateway_UpstreamRequestsReachNoOne(t *testing.T) {
	bin := toolgate(t)
	dir := t.TempDir()
	reg, log := upstreamFile(t, dir, "")
	cmd := exec.Command(bin, "--db", filepath.Join(dir, "tg.db"), "--registry", reg, "mcp", "--principal", "tester", "--allow", "mcp.call:up/ask")
	user := &elicitor{answer: &sdk.ElicitResult{Action: "accept", Content: map[string]any{}}}
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{ElicitationHandler: user.handle,
		CreateMessageHandler: func(context.Context, *sdk.CreateMessageRequest) (*sdk.CreateMessageResult, error) {
			t.Error("the agent's client was asked to sample")
			return nil, errors.New("no")
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cs.Close(); cmd.Wait() }()
	res := call(t, ctx, cs, "up.ask", map[string]any{}, nil)
	completed(t, res)
	if got := text(t, res); !strings.Contains(got, "elicit: true, sample: true, roots: none") || calls(t, log, "ask") != 1 {
		t.Errorf("up.ask: %s", got)
	}
	if user.count() != 0 {
		t.Errorf("the agent's user was asked %d times", user.count())
	}
}

// An upstream that changes a tool's schema while it runs (and says so,
// notifications/tools/list_changed) gets that tool unavailable from the
// next call on, as after a reconnect, not called under the schemas
// toolgate loaded; a tool it adds is not toolgate's.
func TestGateway_SchemaChangedWhileRunning(t *testing.T) {
	dir := t.TempDir()
	file, _ := upstreamFile(t, dir, "")
	_, reg, run := loadGateway(t, file, "mcp.call:up")
	if res := run("up.echo", `{"text":"before"}`); res.State != "COMPLETED" {
		t.Fatalf("up.echo: %s %+v", res.State, res.Error)
	}
	if res := run("up.drift", `{}`); res.State != "COMPLETED" {
		t.Fatalf("up.drift: %s %+v", res.State, res.Error)
	}
	// The notification comes on its own: the call that follows it refuses.
	var res *tgruntime.Result
	for guard := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if res = run("up.echo", `{"text":"after"}`); res.State != "COMPLETED" || time.Now().After(guard) { // a hang guard, not a timing assertion
			break
		}
	}
	if res.State != "ROLLED_BACK" || res.Error == nil || res.Error.Type != "ResourceError" || !strings.Contains(res.Error.Message, "changed the definition of echo") {
		t.Errorf("up.echo after its schema changed: %s %+v", res.State, res.Error)
	}
	if _, err := reg.Lookup("up.grown", ""); err == nil {
		t.Error("up.grown, added after the start, is a tool")
	}
	if res := run("up.plain", `{}`); res.State != "COMPLETED" {
		t.Errorf("up.plain, unchanged: %s %+v", res.State, res.Error)
	}
}

// loadGateway loads the registry file through a gateway into a runtime
// of its own (both closed when t ends), and returns them with a function
// that runs a tool as principal p, granted grant.
func loadGateway(t *testing.T, file, grant string) (*tgruntime.Runtime, *tools.Registry, func(tool, input string) *tgruntime.Result) {
	t.Helper()
	gw := mcp.NewGateway(nil)
	t.Cleanup(func() { gw.Close() })
	reg, err := tools.LoadRegistryFileWith(file, gw.Tools)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := tgruntime.Open(filepath.Join(filepath.Dir(file), "tg.db"), &tgruntime.Options{Registry: reg, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt, reg, func(tool, input string) *tgruntime.Result {
		t.Helper()
		res, _ := rt.Execute(context.Background(), tgruntime.Invocation{Tool: tool, Input: []byte(input), Principal: "p",
			Grants: []capability.Capability{capability.MustParse(grant)}})
		if res == nil {
			t.Fatalf("%s: no result", tool)
		}
		return res
	}
}
