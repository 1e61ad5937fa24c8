package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/mcp"
	"github.com/toolgate/toolgate/server"
)

func TestMCP_Refusals(t *testing.T) {
	dir := workdir(t)
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok")+`"}]}`), 0o600))
	db := filepath.Join(dir, "fresh", "mcp.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp", "--http", "127.0.0.1:0"}, "--config"},
		{[]string{"mcp", "--allow-remote"}, "goes with --http"},
		{[]string{"mcp", "--http", "0.0.0.0:0", "--config", cfg}, "--allow-remote"},
		{[]string{"mcp", "--principal", "bad\nname"}, "--principal"},
		{[]string{"mcp", "--allow", "Not A Capability"}, "--allow"},
		{[]string{"mcp", "extra"}, "unknown command"},
	} {
		r := toolgate(t, "", append(tc.args, "--db", db)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, %s; want %d naming %s", tc.args, r.code, r.stderr, ExitUsage, tc.want)
		}
	}
	if _, err := os.Stat(db); err == nil {
		t.Error("a refused command created the database")
	}
}

// toolgate mcp over the command's stdin and stdout: the SDK's client lists
// and calls; every call runs as mcp:$USER (or --principal) with --allow.
func TestMCP_Stdio(t *testing.T) {
	dir := workdir(t)
	crd, swr := io.Pipe()
	srd, cwr := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Main(context.Background(), []string{"mcp", "--principal", "agent-7", "--allow", "filesystem.read:."},
			Stdio{In: srd, Out: swr, Err: &stderr})
		swr.Close()
	}()
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.IOTransport{Reader: crd, Writer: cwr}, nil)
	must(t, err)
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "file.read", Arguments: map[string]any{"path": filepath.Join(dir, "hello.txt")}})
	must(t, err)
	if res.IsError || res.Meta[mcp.MetaState] != "COMPLETED" {
		t.Fatalf("file.read over MCP: %+v", res)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "file.write", Arguments: map[string]any{"path": "out.txt", "content": "x"}})
	must(t, err)
	if !res.IsError || res.Meta[mcp.MetaState] != "DENIED" {
		t.Errorf("file.write without a grant: %+v", res)
	}
	cs.Close()
	cwr.Close()
	if code := <-done; code != 0 {
		t.Fatalf("toolgate mcp exited %d: %s", code, stderr.String())
	}
	r := toolgate(t, "", "executions", "--json")
	if !strings.Contains(r.stdout, `"principal": "agent-7"`) || !strings.Contains(r.stdout, `"callId": "mcp:`) {
		t.Errorf("records: %s", r.stdout)
	}
}

// Stopped by a signal mid-call, toolgate mcp aborts the call after the
// grace period, records it ABORTED then ROLLED_BACK, and exits.
func TestMCP_SignalAbortsAfterGrace(t *testing.T) {
	workdir(t)
	defer func(g time.Duration) { mcpGrace = g }(mcpGrace)
	mcpGrace = 100 * time.Millisecond
	crd, swr := io.Pipe()
	srd, cwr := io.Pipe()
	var stderr bytes.Buffer
	sig, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan int, 1)
	go func() {
		done <- Main(sig, []string{"mcp", "--allow", "process.exec:sleep", "--allow", "filesystem.read:/"},
			Stdio{In: srd, Out: swr, Err: &stderr})
		swr.Close()
	}()
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *sdk.ProgressNotificationClientRequest) { stop() }, // it runs: stop the server
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.IOTransport{Reader: crd, Writer: cwr}, nil)
	must(t, err)
	params := &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "sleep", "args": []string{"60"}}}
	params.SetProgressToken("p")
	go cs.CallTool(ctx, params)
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d: %s", code, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("toolgate mcp did not stop")
	}
	cwr.Close()
	r := toolgate(t, "", "executions", "--json")
	if !strings.Contains(r.stdout, `"state": "ROLLED_BACK"`) || !strings.Contains(r.stdout, `"ABORTED"`) {
		t.Errorf("the call stopped by the signal: %s", r.stdout)
	}
}

// --approve-via-elicitation: a tool that requires approval asks the
// client's user; an accept runs it once, approved by the session's
// principal via elicitation. Without the flag the client is asked nothing.
func TestMCP_ApproveViaElicitation(t *testing.T) {
	workdir(t)
	must(t, os.WriteFile("reg.yaml", []byte(`tools:
  - id: test.hello
    version: 1.0.0
    description: says hello
    command: echo
    argv: ["hello", "{name}"]
    input_schema: {$schema: "https://json-schema.org/draft/2020-12/schema", type: object, properties: {name: {type: string, description: who, maxLength: 20}}, required: [name], additionalProperties: false}
    limits: {max_execution_time: 10s}
    requires_approval: true
`), 0o600))
	for _, on := range []bool{false, true} {
		args := []string{"mcp", "--registry", "reg.yaml", "--principal", "agent-7", "--allow", "process.exec:echo"}
		if on {
			args = append(args, "--approve-via-elicitation")
		}
		crd, swr := io.Pipe()
		srd, cwr := io.Pipe()
		var stderr bytes.Buffer
		done := make(chan int, 1)
		go func() {
			done <- Main(context.Background(), args, Stdio{In: srd, Out: swr, Err: &stderr})
			swr.Close()
		}()
		asked := 0
		c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
			ElicitationHandler: func(_ context.Context, r *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
				asked++
				if !strings.Contains(r.Params.Message, `{"input":{"name":"world"},"tool":"test.hello","version":"1.0.0"}`) {
					t.Errorf("the user was shown %q", r.Params.Message)
				}
				return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
			},
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cs, err := c.Connect(ctx, &sdk.IOTransport{Reader: crd, Writer: cwr}, nil)
		if err != nil {
			cancel()
			t.Fatalf("%v: %s", err, stderr.String())
		}
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "test.hello", Arguments: map[string]any{"name": "world"}})
		must(t, err)
		state := res.Meta[mcp.MetaState]
		cs.Close()
		cwr.Close()
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("toolgate mcp exited %d: %s", code, stderr.String())
		}
		switch {
		case !on && (asked != 0 || state != "APPROVAL_REQUIRED"):
			t.Errorf("without the flag: asked %d times, state %v; want never asked, approval required", asked, state)
		case on && (asked != 1 || state != "COMPLETED"):
			t.Errorf("with the flag: asked %d times, state %v; want asked once, COMPLETED", asked, state)
		}
	}
	// The second session asked about the intent the first one left pending.
	r := toolgate(t, "", "intent", "list")
	if strings.Count(r.stdout, "executed") != 1 || strings.Count(r.stdout, "pending") != 0 {
		t.Errorf("intents: %s", r.stdout)
	}
	id := strings.Fields(strings.Split(r.stdout, "\n")[1])[0]
	if r = toolgate(t, "", "intent", "show", id); !strings.Contains(r.stdout, "approved by agent-7 via elicitation") {
		t.Errorf("intent show: %s", r.stdout)
	}
	r = toolgate(t, "", "audit", "verify")
	if r.code != 0 {
		t.Errorf("audit verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
