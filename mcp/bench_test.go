package mcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// BenchmarkNoopOverMCP measures a no-op tool called over MCP stdio (the
// SDK's client in this process, the server a child process) against the
// same call through in-process Execute, sync off, in the same run:
//
//   - execute-µs/call: in-process Execute;
//   - mcp-µs/call: the call over MCP stdio to toolgate's server;
//   - added-µs/call: their difference, what a call costs more over MCP;
//   - sdk-µs/call: the same call to a bare SDK server over stdio (a raw
//     tool answering {} at once, no runtime): the floor of any MCP server
//     in Go with the SDK's client, toolgate or not;
//   - toolgate-µs/call: mcp − execute − sdk, what toolgate's MCP layer
//     adds above that floor;
//   - pipe-µs/call: a line to a child process that writes it back, no
//     MCP at all: the round trip of two Go processes over pipes.
//
// The four loops take turns in ten rounds, so that a change of load on a
// shared machine falls on each alike.
//
//	go test -run '^$' -bench NoopOverMCP -benchtime 5000x ./mcp
func BenchmarkNoopOverMCP(b *testing.B) {
	ctx := context.Background()
	rt, err := tgruntime.Open(filepath.Join(b.TempDir(), "in.db"), testOptions(testRegistry(b)))
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(ctx)
	cs, cmd := stdioClient(b, filepath.Join(b.TempDir(), "mcp.db"), nil)
	defer func() { cs.Close(); cmd.Wait() }()
	bare := exec.Command(os.Args[0], "-test.run=^$")
	bare.Env = append(os.Environ(), bareEnv+"=sdk")
	bare.Stderr = os.Stderr
	fcs := connect(b, &sdk.CommandTransport{Command: bare}, nil, "")
	defer func() { fcs.Close(); bare.Wait() }()

	in := json.RawMessage(`{}`)
	params := &sdk.CallToolParams{Name: "test.noop", Arguments: in}
	execute := func() {
		if _, err := rt.Execute(ctx, tgruntime.Invocation{Tool: "test.noop", Input: in, Principal: principal}); err != nil {
			b.Fatal(err)
		}
	}
	over := func(cs *sdk.ClientSession) func() {
		return func() {
			if res, err := cs.CallTool(ctx, params); err != nil || res.IsError {
				b.Fatal(err, res)
			}
		}
	}
	echo := exec.Command(os.Args[0], "-test.run=^$")
	echo.Env = append(os.Environ(), bareEnv+"=echo")
	echoIn, err := echo.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	echoOut, err := echo.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := echo.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { echoIn.Close(); echo.Wait() }()
	echoed := bufio.NewReader(echoOut)
	line := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test.noop","arguments":{}}}` + "\n")
	pingPong := func() {
		if _, err := echoIn.Write(line); err != nil {
			b.Fatal(err)
		}
		if _, err := echoed.ReadSlice('\n'); err != nil {
			b.Fatal(err)
		}
	}
	loops := []func(){execute, over(cs), over(fcs), pingPong}
	for _, f := range loops { // warm up
		for range 200 {
			f()
		}
	}
	b.ResetTimer()
	var spent [4]time.Duration
	var serverCPU [2]time.Duration // toolgate's child, the bare SDK's
	const rounds = 10
	for r := range rounds {
		n := b.N/rounds + min(1, max(0, b.N%rounds-r))
		for i, f := range loops {
			var child *os.Process
			switch i {
			case 1:
				child = cmd.Process
			case 2:
				child = bare.Process
			}
			cpu0 := processCPU(child)
			start := time.Now()
			for range n {
				f()
			}
			spent[i] += time.Since(start)
			if child != nil {
				serverCPU[i-1] += processCPU(child) - cpu0
			}
		}
	}
	perCall := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N) }
	ex, mc, sd, pp := perCall(spent[0]), perCall(spent[1]), perCall(spent[2]), perCall(spent[3])
	b.ReportMetric(pp, "pipe-µs/call")
	b.ReportMetric(ex, "execute-µs/call")
	b.ReportMetric(mc, "mcp-µs/call")
	b.ReportMetric(mc-ex, "added-µs/call")
	b.ReportMetric(sd, "sdk-µs/call")
	b.ReportMetric(mc-ex-sd, "toolgate-µs/call")
	if serverCPU[0] > 0 && serverCPU[1] > 0 {
		b.ReportMetric(perCall(serverCPU[0]), "mcp-server-cpu-µs/call")
		b.ReportMetric(perCall(serverCPU[1]), "sdk-server-cpu-µs/call")
	}
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

// BenchmarkGatewayEcho splits what an agent pays for a call through the
// gateway (issue 29, "What a user of the gateway feels"; `toolgate bench
// --gateway` measures the whole of it for a user). The upstream is the
// one of toolgate bench --gateway (bench.ServeEcho: a stdio server built
// from the SDK with one echo tool, here run from the test binary); four
// loops take turns, one call each, b.N times after 20 warm-up calls:
//
//   - direct: the SDK's client calls the upstream: one SDK hop;
//   - nosync: in-process Execute of the gateway tool, sync off: the
//     runtime, the gateway tool and its hop to the upstream;
//   - sync: the same on a durable database;
//   - gateway: the SDK's client calls `toolgate mcp` (built, durable),
//     which calls the upstream: what the agent feels.
//
// It reports each loop's p50 and, from them, ratio (gateway / direct),
// layer-µs (nosync − direct: the runtime and the gateway tool, above the
// upstream hop), durable-µs (sync − nosync: the claim's and the commit's
// writes and syncs) and outer-µs (gateway − sync: the agent's hop to
// toolgate mcp and its MCP layer).
//
//	go test -run '^$' -bench GatewayEcho -benchtime 500x ./mcp
func BenchmarkGatewayEcho(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	file := echoUpstreamFile(b, dir, self)
	open := func(name string, noSync bool) *tgruntime.Runtime {
		return echoRuntime(b, file, filepath.Join(dir, name), noSync)
	}
	rtNoSync, rtSync := open("nosync.db", true), open("sync.db", false)

	direct := exec.Command(self, "-test.run=^$")
	direct.Env = []string{"PATH=" + tools.DefaultSearchPath, bareEnv + "=upstream"} // as the gateway starts it
	direct.Stderr = os.Stderr
	dcs := connect(b, &sdk.CommandTransport{Command: direct}, nil, "")
	defer dcs.Close()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOOLGATE_") {
			env = append(env, kv)
		}
	}
	gateway := exec.Command(toolgate(b), "--db", filepath.Join(dir, "gateway.db"), "--registry", file,
		"mcp", "--principal", principal, "--allow", "mcp.call:bench", "--no-local-socket")
	gateway.Env, gateway.Stderr = env, os.Stderr
	gcs := connect(b, &sdk.CommandTransport{Command: gateway}, nil, "")
	defer gcs.Close()

	args := json.RawMessage(`{"text":"hello, upstream"}`)
	over := func(cs *sdk.ClientSession, name string) func() {
		params := &sdk.CallToolParams{Name: name, Arguments: args}
		return func() {
			if res, err := cs.CallTool(ctx, params); err != nil || res.IsError {
				b.Fatal(err, res)
			}
		}
	}
	execute := func(rt *tgruntime.Runtime) func() {
		inv := tgruntime.Invocation{Tool: "bench.echo", Input: args, Principal: principal}
		return func() {
			if res, err := rt.Execute(ctx, inv); err != nil || res.State != "COMPLETED" {
				b.Fatal(err, res)
			}
		}
	}
	loops := []func(){over(dcs, "echo"), execute(rtNoSync), execute(rtSync), over(gcs, "bench.echo")}
	for range 20 {
		for _, f := range loops {
			f()
		}
	}
	lat := make([][]time.Duration, len(loops))
	b.ResetTimer()
	for range b.N {
		for i, f := range loops {
			start := time.Now()
			f()
			lat[i] = append(lat[i], time.Since(start))
		}
	}
	b.StopTimer()
	p50 := make([]float64, len(loops))
	for i, l := range lat {
		slices.Sort(l)
		p50[i] = float64(l[len(l)/2].Nanoseconds()) / 1e3
	}
	b.ReportMetric(p50[0], "direct-µs")
	b.ReportMetric(p50[1], "nosync-µs")
	b.ReportMetric(p50[2], "sync-µs")
	b.ReportMetric(p50[3], "gateway-µs")
	b.ReportMetric(p50[3]/p50[0], "ratio")
	b.ReportMetric(p50[1]-p50[0], "layer-µs")
	b.ReportMetric(p50[2]-p50[1], "durable-µs")
	b.ReportMetric(p50[3]-p50[2], "outer-µs")
	b.ReportMetric(0, "ns/op") // the loops' sum, which says nothing
}

// echoUpstreamFile writes a registry file putting the upstream of toolgate
// bench --gateway (bench.ServeEcho, run from the test binary self) behind
// the gateway as the server "bench".
func echoUpstreamFile(b *testing.B, dir, self string) string {
	file := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(`mcp_servers:
  - name: bench
    command: %q
    args: ["-test.run=^$"]
    env: {%s: upstream}
    limits: {max_execution_time: 30s}
`, self, bareEnv)), 0o600); err != nil {
		b.Fatal(err)
	}
	return file
}

// echoRuntime opens a runtime on db with the gateway tools of file, the
// principal granted mcp.call:bench.
func echoRuntime(b *testing.B, file, db string, noSync bool) *tgruntime.Runtime {
	gw := mcp.NewGateway(&mcp.GatewayOptions{Stderr: os.Stderr})
	b.Cleanup(func() { gw.Close() })
	reg, err := tools.LoadRegistryFileWith(file, gw.Tools)
	if err != nil {
		b.Fatal(err)
	}
	grants := map[string][]capability.Capability{principal: {capability.MustParse("mcp.call:bench")}}
	rt, err := tgruntime.Open(db, &tgruntime.Options{Registry: reg, NoSync: noSync, Grants: grants})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

// BenchmarkGatewayTool is the in-process part of a gateway call alone:
// Execute of the upstream's echo tool (the runtime, the gateway tool, its
// hop to the upstream), sync off; its allocations are the toolgate
// process's (the upstream is a child).
//
//	go test -run '^$' -bench GatewayTool -benchtime 2000x -benchmem ./mcp
func BenchmarkGatewayTool(b *testing.B) {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	rt := echoRuntime(b, echoUpstreamFile(b, dir, self), filepath.Join(dir, "nosync.db"), true)
	ctx := context.Background()
	inv := tgruntime.Invocation{Tool: "bench.echo", Input: json.RawMessage(`{"text":"hello, upstream"}`), Principal: principal}
	for range 20 {
		if _, err := rt.Execute(ctx, inv); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if res, err := rt.Execute(ctx, inv); err != nil || res.State != "COMPLETED" {
			b.Fatal(err, res)
		}
	}
}
