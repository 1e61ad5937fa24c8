package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/mcp"
)

// A registry file whose upstream MCP server cannot be started, or is not
// an MCP server, is a usage error naming the server: nothing runs.
func TestRegistry_MCPServerUnavailable(t *testing.T) {
	workdir(t)
	for _, tc := range []struct{ command, want string }{
		{"no-such-mcp-server", `MCP server bad: cannot connect: "no-such-mcp-server" not found in the search path`},
		{"/bin/true", "MCP server bad: cannot connect"},
	} {
		must(t, os.WriteFile("gateway.yaml", []byte("mcp_servers:\n  - name: bad\n    command: "+tc.command+"\n    limits: {max_execution_time: 5s}\n"), 0o600))
		r := toolgate(t, "", "--registry", "gateway.yaml", "run", "bad.x", "--input", "{}")
		if r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "gateway.yaml:2: mcp_servers") {
			t.Errorf("%s: exit %d\n%s", tc.command, r.code, r.stderr)
		}
		if _, err := os.Stat("state/toolgate.db"); err == nil {
			t.Errorf("%s: the database was created", tc.command)
		}
	}
}

// toolgate mcp --registry with an upstream over streamable HTTP on
// loopback: the agent lists its tools under the server's name and a
// granted call reaches it, COMPLETED and recorded; an ungranted one is
// DENIED without reaching it.
func TestGateway_MCPHTTPUpstream(t *testing.T) {
	workdir(t)
	up := sdk.NewServer(&sdk.Implementation{Name: "web", Version: "0.3.0"}, nil)
	var mu sync.Mutex
	called := map[string]int{}
	for _, name := range []string{"ping", "other"} {
		up.AddTool(&sdk.Tool{Name: name, Description: "answers", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(ctx context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				mu.Lock()
				called[r.Params.Name]++
				mu.Unlock()
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "pong"}}}, nil
			})
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return up }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer from-env" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	t.Setenv("WEB_MCP_AUTH", "Bearer from-env")
	must(t, os.WriteFile("gateway.yaml", []byte("mcp_servers:\n  - name: web\n    url: "+srv.URL+"\n    headers_from_env: {Authorization: WEB_MCP_AUTH}\n    limits: {max_execution_time: 10s}\n"), 0o600))

	crd, swr := io.Pipe()
	srd, cwr := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Main(context.Background(), []string{"--registry", "gateway.yaml", "mcp", "--principal", "agent-7", "--allow", "mcp.call:web/ping"},
			Stdio{In: srd, Out: swr, Err: &stderr})
		swr.Close()
	}()
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.IOTransport{Reader: crd, Writer: cwr}, nil)
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	names := map[string]bool{}
	for tool, err := range cs.Tools(ctx, nil) {
		must(t, err)
		names[tool.Name] = true
	}
	// The caller sees what it may call: web.ping, not web.other, whose
	// mcp.call it was not granted (and whose call is refused below).
	if !names["web.ping"] || names["web.other"] || !names["web.ping--0.3.0"] {
		t.Errorf("tools/list: %v", names)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "web.ping", Arguments: map[string]any{}})
	must(t, err)
	if res.IsError || res.Meta[mcp.MetaState] != "COMPLETED" {
		t.Errorf("web.ping: %+v", res)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "web.other", Arguments: map[string]any{}})
	must(t, err)
	if !res.IsError || res.Meta[mcp.MetaState] != "DENIED" {
		t.Errorf("web.other, not granted: %+v", res)
	}
	cs.Close()
	cwr.Close()
	if code := <-done; code != 0 {
		t.Fatalf("toolgate mcp exited %d: %s", code, stderr.String())
	}
	mu.Lock()
	if called["ping"] != 1 || called["other"] != 0 {
		t.Errorf("the upstream got %v, want one ping and nothing else", called)
	}
	mu.Unlock()
	r := toolgate(t, "", "executions", "--json")
	if !strings.Contains(r.stdout, `"toolId": "web.ping"`) || !strings.Contains(r.stdout, `"state": "COMPLETED"`) {
		t.Errorf("records: %s", r.stdout)
	}
	if r := toolgate(t, "", "audit", "verify"); r.code != 0 {
		t.Errorf("audit verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Upstream MCP servers start only for a command that needs them: running
// or describing a tool of no server starts none; listing the tools, or
// running a tool of the server, starts it. The "server" here records that
// it started (and is no MCP server, so a command that starts it fails).
func TestGateway_UpstreamsStartLazily(t *testing.T) {
	workdir(t)
	must(t, os.WriteFile("gateway.yaml", []byte(`mcp_servers:
  - name: up
    command: /bin/sh
    args: ["-c", "echo started >> started.log"]
    limits: {max_execution_time: 5s}
`), 0o600))
	started := func() int {
		b, _ := os.ReadFile("started.log")
		return strings.Count(string(b), "started")
	}
	for _, args := range [][]string{
		{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`},
		{"describe", "file.read"},
		{"run", "upper.x", "--input", "{}"}, // a prefix of the name is not the server
	} {
		r := toolgate(t, "", append([]string{"--registry", "gateway.yaml"}, args...)...)
		if started() != 0 {
			t.Fatalf("%v started the upstream", args)
		}
		if args[0] != "run" || args[1] == "file.read" {
			if r.code != 0 {
				t.Errorf("%v: exit %d\n%s", args, r.code, r.stderr)
			}
		}
	}
	for i, args := range [][]string{
		{"tools"},
		{"run", "up.x", "--input", "{}"},
		{"describe", "up.x"},
	} {
		r := toolgate(t, "", append([]string{"--registry", "gateway.yaml"}, args...)...)
		if started() != i+1 || !strings.Contains(r.stderr, "MCP server up: cannot connect") {
			t.Errorf("%v: started %d times (want %d), exit %d\n%s", args, started(), i+1, r.code, r.stderr)
		}
	}
}
