package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/tools"
)

// GatewayOptions configure RunGateway.
type GatewayOptions struct {
	// Toolgate is the path of the toolgate binary: RunGateway starts it as
	// `toolgate mcp` (the gateway) and, through EchoCommand, as the
	// upstream server.
	Toolgate string

	// Calls is the number of measured calls of each kind (direct and
	// through the gateway); Warmup the number of calls of each kind made
	// first and not measured. Calls must be at least 1, Warmup at least 0.
	Calls, Warmup int

	// Dir is where the temporary directory holding the gateway's database
	// and registry file is made; "" means os.TempDir(). It is removed when
	// RunGateway returns.
	Dir string

	// ProfileFile, if not "", receives a CPU profile of the `toolgate mcp`
	// process (its --cpuprofile), written when it exits at the end.
	ProfileFile string

	// Progress, as Options.Progress.
	Progress func(string)
}

// EchoCommand is the hidden toolgate subcommand that serves the upstream
// of RunGateway (ServeEcho) on its standard input and output.
const EchoCommand = "bench-echo-server"

// The upstream's tool, and its id behind the gateway (server "bench").
const (
	echoTool      = "echo"
	gatewayServer = "bench"
	gatewayTool   = gatewayServer + "." + echoTool
	echoText      = "hello, upstream"
)

// GatewayReport is the result of RunGateway. Latencies are in microseconds,
// of one tools/call as the agent (an SDK client in this process) sees it.
type GatewayReport struct {
	Calls  int `json:"calls"`
	Warmup int `json:"warmup"`
	// Sync is always true: the gateway's database is durable, as a user's.
	Sync bool   `json:"sync"`
	Dir  string `json:"dir"`

	FsyncP50us float64 `json:"fsync_p50_us"`

	// Direct: the agent's client calls the upstream server itself.
	// Gateway: the same client calls it through `toolgate mcp`.
	Direct  Latency `json:"direct"`
	Gateway Latency `json:"gateway"`

	// RatioP50 is Gateway.P50us over Direct.P50us; AddedP50us their
	// difference, what the gateway adds to a call.
	RatioP50   float64 `json:"ratio_p50"`
	AddedP50us float64 `json:"added_p50_us"`

	// GatewayCPUus is the CPU time (user and system) the `toolgate mcp`
	// process used per measured call; 0 where /proc cannot tell.
	GatewayCPUus float64 `json:"gateway_cpu_us_per_call,omitempty"`

	// Profile is the CPU profile written (GatewayOptions.ProfileFile).
	Profile string `json:"profile,omitempty"`
}

// Latency sums up the measured calls of one kind.
type Latency struct {
	P50us  float64 `json:"p50_us"`
	P90us  float64 `json:"p90_us"`
	P99us  float64 `json:"p99_us"`
	MeanUs float64 `json:"mean_us"`
}

// Validate reports options RunGateway cannot use.
func (o *GatewayOptions) Validate() error {
	var errs []error
	if o.Toolgate == "" {
		errs = append(errs, errors.New("the path of the toolgate binary is missing"))
	}
	if o.Calls < 1 {
		errs = append(errs, fmt.Errorf("calls must be at least 1, not %d", o.Calls))
	}
	if o.Warmup < 0 {
		errs = append(errs, fmt.Errorf("warm-up calls must not be negative, not %d", o.Warmup))
	}
	return errors.Join(errs...)
}

// RunGateway measures what an agent feels of the gateway: an SDK client
// calling the echo tool of an upstream MCP server (ServeEcho, a stdio
// server built from the SDK) directly, and the same client calling it
// through `toolgate mcp` with a registry file putting that server behind
// it, on a fresh durable database. Both upstreams are processes of the
// same program, started alike. After Warmup calls of each, the direct and
// the gateway calls alternate, one each, Calls times, so that a change of
// load on the machine falls on both alike; each call is timed alone.
func RunGateway(ctx context.Context, opts GatewayOptions) (*GatewayReport, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(opts.Dir, "toolgate-bench-gateway-")
	if err != nil {
		return nil, fmt.Errorf("bench: temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	progress := func(s string) {
		if opts.Progress != nil {
			opts.Progress(s)
		}
	}
	fail := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %v", ErrInterrupted, context.Cause(ctx))
		}
		return err
	}
	rep := &GatewayReport{Calls: opts.Calls, Warmup: opts.Warmup, Sync: true, Dir: dir}

	progress("bench: measuring fsync latency")
	fsyncs, err := measureFsync(ctx, filepath.Join(dir, "fsync.tmp"))
	if err != nil {
		return nil, fail(err)
	}
	rep.FsyncP50us = micros(percentile(fsyncs, 50))

	progress("bench: starting the upstream and toolgate mcp")
	direct := exec.Command(opts.Toolgate, EchoCommand)
	// The environment the gateway gives its upstream (no env: in the file).
	direct.Env = []string{"PATH=" + tools.DefaultSearchPath}
	var directErr, gatewayErr lockedBuffer
	direct.Stderr = &directErr
	dcs, err := connectClient(ctx, direct)
	if err != nil {
		return nil, fail(fmt.Errorf("bench: the upstream server: %v%s", err, directErr.tail()))
	}
	defer dcs.Close() // closes its standard input and waits for it to exit

	registry := filepath.Join(dir, "gateway.yaml")
	file := fmt.Sprintf("mcp_servers:\n  - name: %s\n    command: %s\n    args: [%s]\n    limits: {max_execution_time: 30s}\n",
		gatewayServer, strconv.Quote(opts.Toolgate), EchoCommand)
	if err := os.WriteFile(registry, []byte(file), 0o600); err != nil {
		return nil, fmt.Errorf("bench: registry file: %w", err)
	}
	args := []string{"--db", filepath.Join(dir, "gateway.db"), "--registry", registry,
		"mcp", "--allow", "mcp.call:" + gatewayServer, "--no-local-socket"}
	if opts.ProfileFile != "" {
		args = append(args, "--cpuprofile", opts.ProfileFile)
	}
	gateway := exec.Command(opts.Toolgate, args...)
	gateway.Env = childEnv()
	gateway.Stderr = &gatewayErr
	gcs, err := connectClient(ctx, gateway)
	if err != nil {
		return nil, fail(fmt.Errorf("bench: toolgate mcp: %v%s", err, gatewayErr.tail()))
	}
	gatewayOpen := true
	closeGateway := func() error {
		if !gatewayOpen {
			return nil
		}
		gatewayOpen = false
		err := gcs.Close() // closes its standard input and waits for it to exit
		if st := gateway.ProcessState; st == nil || !st.Success() {
			return fmt.Errorf("bench: toolgate mcp did not exit cleanly: %v%s", err, gatewayErr.tail())
		}
		return nil
	}
	defer closeGateway()

	args2 := json.RawMessage(`{"text":` + strconv.Quote(echoText) + `}`)
	call := func(cs *sdk.ClientSession, name string) (time.Duration, error) {
		start := time.Now()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args2})
		d := time.Since(start)
		switch {
		case err != nil:
			return 0, err
		case res.IsError:
			return 0, fmt.Errorf("the call failed: %s", resultText(res))
		}
		// Both answer the upstream's structured result.
		got, _ := json.Marshal(res.StructuredContent)
		if !bytes.Equal(got, []byte(`{"echoed":`+strconv.Quote(echoText)+`}`)) {
			return 0, fmt.Errorf("the call answered %s, not the echo of its text", got)
		}
		return d, nil
	}
	both := func(i int, lat [2][]time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, err := call(dcs, echoTool)
		if err != nil {
			return fmt.Errorf("bench: calling the upstream directly: %v%s", err, directErr.tail())
		}
		g, err := call(gcs, gatewayTool)
		if err != nil {
			return fmt.Errorf("bench: calling through toolgate mcp: %v%s", err, gatewayErr.tail())
		}
		if lat[0] != nil {
			lat[0][i], lat[1][i] = d, g
		}
		if i%50 == 0 {
			progress(fmt.Sprintf("bench: gateway, call %d of %d", i, opts.Calls))
		}
		return nil
	}
	for i := range opts.Warmup {
		if err := both(i, [2][]time.Duration{}); err != nil {
			return nil, fail(err)
		}
	}
	lat := [2][]time.Duration{make([]time.Duration, opts.Calls), make([]time.Duration, opts.Calls)}
	cpu0 := processCPU(gateway.Process)
	for i := range opts.Calls {
		if err := both(i, lat); err != nil {
			return nil, fail(err)
		}
	}
	if cpu := processCPU(gateway.Process) - cpu0; cpu0 > 0 && cpu > 0 {
		rep.GatewayCPUus = micros(cpu) / float64(opts.Calls)
	}
	rep.Direct, rep.Gateway = summary(lat[0]), summary(lat[1])
	rep.RatioP50 = ratio(rep.Gateway.P50us, rep.Direct.P50us)
	rep.AddedP50us = rep.Gateway.P50us - rep.Direct.P50us
	// The profile is written as toolgate mcp exits, once its client left.
	if err := closeGateway(); err != nil {
		return nil, fail(err)
	}
	if opts.ProfileFile != "" {
		rep.Profile = opts.ProfileFile
	}
	return rep, nil
}

// childEnv is the environment of toolgate mcp: this process's without
// toolgate's own variables (TOOLGATE_DB, TOOLGATE_POLICY, ...: its flags
// say what it uses).
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOOLGATE_") {
			env = append(env, kv)
		}
	}
	return env
}

func connectClient(ctx context.Context, cmd *exec.Cmd) (*sdk.ClientSession, error) {
	c := sdk.NewClient(&sdk.Implementation{Name: "toolgate-bench", Version: "1.0.0"}, nil)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.Connect(cctx, &sdk.CommandTransport{Command: cmd}, nil)
}

func summary(d []time.Duration) Latency {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return Latency{
		P50us:  micros(percentileSorted(s, 50)),
		P90us:  micros(percentileSorted(s, 90)),
		P99us:  micros(percentileSorted(s, 99)),
		MeanUs: micros(sum) / float64(len(d)),
	}
}

func resultText(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// processCPU is the CPU time (user and system) p has used, read from
// /proc; zero where there is no /proc.
func processCPU(p *os.Process) time.Duration {
	if p == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid))
	if err != nil {
		return 0
	}
	// Fields 14 and 15 (utime, stime), counted after the command name,
	// which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// lockedBuffer keeps the last 4 KiB a child wrote on its standard error,
// to say why it failed.
type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	if n := len(l.b); n > 4<<10 {
		l.b = slices.Clone(l.b[n-4<<10:])
	}
	return len(p), nil
}

// tail is what the child wrote, as the end of an error message.
func (l *lockedBuffer) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := strings.TrimSpace(string(l.b)); s != "" {
		return "; it wrote: " + s
	}
	return ""
}

// The upstream's echo tool: it answers its text, as structured content
// and as text.
const (
	echoInput  = `{"type":"object","properties":{"text":{"type":"string","description":"what to echo"}},"required":["text"],"additionalProperties":false}`
	echoOutput = `{"type":"object","properties":{"echoed":{"type":"string","description":"the text"}},"required":["echoed"],"additionalProperties":false}`
)

// ServeEcho is the upstream MCP server of RunGateway: a server built from
// the SDK with one tool, echo, serving MCP on the process's standard input
// and output (in and out) until its client leaves.
func ServeEcho(ctx context.Context, in io.ReadCloser, out io.WriteCloser) error {
	s := sdk.NewServer(&sdk.Implementation{Name: "toolgate-bench-upstream", Version: "1.0.0"}, nil)
	s.AddTool(&sdk.Tool{Name: echoTool, Description: "Answers its text.", InputSchema: json.RawMessage(echoInput), OutputSchema: json.RawMessage(echoOutput)},
		func(ctx context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var in struct{ Text string }
			if err := json.Unmarshal(r.Params.Arguments, &in); err != nil {
				return nil, err
			}
			out := map[string]any{"echoed": in.Text}
			b, err := json.Marshal(out)
			if err != nil {
				return nil, err
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}, StructuredContent: out}, nil
		})
	err := s.Run(ctx, &sdk.IOTransport{Reader: in, Writer: out})
	if err != nil && (ctx.Err() != nil || errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "closed")) {
		return nil // the client left
	}
	return err
}
