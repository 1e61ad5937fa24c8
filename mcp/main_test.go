package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/bench"
	"github.com/toolgate/toolgate/internal/gctune"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// The stdio tests start the test binary itself as the MCP server (a real
// child process speaking MCP on its stdin and stdout), with the test tools
// below; the tests of `toolgate mcp` build the toolgate binary.

const (
	childEnv   = "TOOLGATE_MCP_TEST_CHILD" // the database path
	bareEnv    = "TOOLGATE_MCP_TEST_BARE"  // sdk: serve bareServer; echo: echo lines; upstream: bench.ServeEcho
	principal  = "mcp:tester"
	objSchema  = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"msg":{"type":"string","description":"a message","maxLength":64}},"required":[],"additionalProperties":false}`
	slowSchema = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"ms":{"type":"integer","description":"how long to wait","minimum":0,"maximum":600000}},"required":["ms"],"additionalProperties":false}`
	bigSchema  = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"data":{"type":"string","description":"anything"}},"required":[],"additionalProperties":false}`
)

func TestMain(m *testing.M) {
	switch os.Getenv(bareEnv) {
	case "sdk":
		os.Exit(bareChild())
	case "echo":
		os.Exit(echoChild())
	case "upstream": // the upstream of toolgate bench --gateway
		if err := bench.ServeEcho(context.Background(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if db := os.Getenv(childEnv); db != "" {
		os.Exit(child(db))
	}
	code := m.Run()
	if dir := binDir; dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

func decl(id string, in string, f ...func(*tools.Declaration)) tools.Declaration {
	d := tools.Declaration{
		ID: id, Version: "1.0.0", Name: id, Description: "test tool " + id,
		InputSchema: json.RawMessage(in), OutputSchema: json.RawMessage(objSchema),
		ResourceLimits: tools.ResourceLimits{MaxExecutionTime: 20 * time.Second},
	}
	for _, fn := range f {
		fn(&d)
	}
	return d
}

// testTools: noop (COMPLETED), fail (ROLLED_BACK), secret (DENIED: needs a
// capability nobody holds), slow (waits ms or until canceled), approve
// (requires approval), and noop at a second version.
func testTools() []tools.Tool {
	noop := func(ctx context.Context, env *tools.Env, in json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{}`), nil
	}
	return []tools.Tool{
		tools.NewRaw(decl("test.noop", objSchema, func(d *tools.Declaration) { d.Idempotent = true }), noop),
		tools.NewRaw(decl("test.noop", objSchema, func(d *tools.Declaration) { d.Version = "2.0.0+b7" }), noop),
		tools.NewRaw(decl("test.fail", objSchema), func(ctx context.Context, env *tools.Env, in json.RawMessage) (json.RawMessage, error) {
			return nil, errors.New("the disk is on fire")
		}),
		tools.NewRaw(decl("test.secret", objSchema, func(d *tools.Declaration) {
			d.RequiredCapabilities = []capability.Capability{capability.MustParse("state.write:secret")}
		}), noop),
		tools.NewRaw(decl("test.slow", slowSchema), func(ctx context.Context, env *tools.Env, in json.RawMessage) (json.RawMessage, error) {
			var v struct{ MS int }
			json.Unmarshal(in, &v)
			select {
			case <-time.After(time.Duration(v.MS) * time.Millisecond):
				return json.RawMessage(`{}`), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}),
		tools.NewRaw(decl("test.approve", objSchema, func(d *tools.Declaration) {
			d.RequiresApproval = true
			d.RequiredCapabilities = []capability.Capability{capability.MustParse("state.write:approved")}
		}), func(ctx context.Context, env *tools.Env, in json.RawMessage) (json.RawMessage, error) {
			n := 0
			if b, ok, err := env.State.Get("approved", "runs"); err == nil && ok {
				n, _ = strconv.Atoi(string(b))
			}
			if err := env.State.Put("approved", "runs", []byte(strconv.Itoa(n+1))); err != nil {
				return nil, err
			}
			return json.RawMessage(`{"msg":"ran"}`), nil
		}),
		tools.NewRaw(decl("test.big", bigSchema), noop),
	}
}

func testRegistry(tb testing.TB) *tools.Registry {
	reg := tools.NewRegistry()
	for _, t := range testTools() {
		if err := reg.Register(t); err != nil {
			tb.Fatal(err)
		}
	}
	reg.Freeze()
	return reg
}

func testOptions(reg *tools.Registry) *tgruntime.Options {
	return &tgruntime.Options{
		Registry: reg, NoSync: true,
		Grants: map[string][]capability.Capability{
			principal: {capability.MustParse("state.write:approved"), capability.MustParse("state.read:approved")},
			"agent-2": {capability.MustParse("state.write:approved")},
		},
	}
}

// child serves the test tools on stdin and stdout.
func child(db string) int {
	gctune.ForServer() // as toolgate mcp does
	reg := tools.NewRegistry()
	for _, t := range testTools() {
		if err := reg.Register(t); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	reg.Freeze()
	rt, err := tgruntime.Open(db, testOptions(reg))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv, err := mcp.New(rt, &mcp.Options{Principal: principal, ProgressInterval: 20 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	err = srv.Run(context.Background(), &sdk.StdioTransport{})
	if cerr := rt.Close(context.Background()); cerr != nil {
		fmt.Fprintln(os.Stderr, cerr)
		return 1
	}
	_ = err // the client went away
	return 0
}

// bareServer is the SDK alone: one raw tool that answers {} at once, no
// runtime behind it. Over stdio it is the floor of any MCP server in Go.
func bareServer() *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "bare"}, nil)
	s.AddTool(&sdk.Tool{Name: "test.noop", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "{}"}}, StructuredContent: json.RawMessage(`{}`)}, nil
		})
	return s
}

func bareChild() int {
	gctune.ForServer() // as toolgate's child: the same collector
	bareServer().Run(context.Background(), &sdk.StdioTransport{})
	return 0
}

// echoChild writes back each line it reads: two processes' round trip
// over pipes, with no MCP at all.
func echoChild() int {
	r := bufio.NewReader(os.Stdin)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return 0
		}
		if _, err := os.Stdout.Write(line); err != nil {
			return 0
		}
	}
}

// progress collects the progress notifications a client receives.
type progress struct {
	mu  sync.Mutex
	got []*sdk.ProgressNotificationParams
	ch  chan struct{}
}

func newProgress() *progress { return &progress{ch: make(chan struct{}, 1000)} }

func (p *progress) handler(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
	p.mu.Lock()
	p.got = append(p.got, r.Params)
	p.mu.Unlock()
	select {
	case p.ch <- struct{}{}:
	default:
	}
}

// stdioClient starts the child server on db and connects the SDK's client.
func stdioClient(t testing.TB, db string, p *progress) (*sdk.ClientSession, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+db)
	cmd.Stderr = os.Stderr
	return connect(t, &sdk.CommandTransport{Command: cmd}, p, ""), cmd
}

func connect(t testing.TB, tr sdk.Transport, p *progress, version string) *sdk.ClientSession {
	t.Helper()
	if p == nil {
		p = newProgress()
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{ProgressNotificationHandler: p.handler})
	var opts *sdk.ClientSessionOptions
	if version != "" {
		opts = &sdk.ClientSessionOptions{ProtocolVersion: version}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, tr, opts)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// open opens db after the server let go of it.
func open(t testing.TB, db string) *tgruntime.Runtime {
	t.Helper()
	o := testOptions(testRegistry(t))
	o.OpenTimeout = 10 * time.Second
	rt, err := tgruntime.Open(db, o)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Check(t, rt, db)
	return rt
}

var (
	binDir   string
	buildBin = sync.OnceValues(func() (string, error) {
		dir, err := os.MkdirTemp("", "toolgate-mcp-test-")
		if err != nil {
			return "", err
		}
		binDir = dir
		path := filepath.Join(dir, "toolgate")
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		out, err := exec.Command(gobin, "build", "-o", path, "github.com/toolgate/toolgate/cmd/toolgate").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("building toolgate: %v\n%s", err, out)
		}
		return path, nil
	})
)

// toolgate returns the path of the toolgate binary: $TOOLGATE_BIN when set
// (scripts/e2e-mcp.sh), else built once.
func toolgate(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("TOOLGATE_BIN"); p != "" {
		return p
	}
	p, err := buildBin()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
