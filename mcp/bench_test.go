package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// BenchmarkNoopOverMCP measures a no-op tool called over MCP stdio (the
// SDK's client, the server a child process) against the same call through
// in-process Execute, sync off, in the same run: mcp-µs/call,
// execute-µs/call and their difference, added-µs/call. pipe-µs/call is the
// same MCP call to a server in this process over a pair of pipes: the
// protocol's own cost without the second process's scheduling, and
// sdk-pipe-µs/call the SDK's alone (a bare SDK server whose tool answers {}
// at once), the floor of any MCP server in Go. The
// -cpu-µs/call figures are the process's CPU time per call, which a loaded
// machine inflates less than the wall-clock ones.
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
	// The same server in this process, over pipes.
	crd, swr := io.Pipe()
	srd, cwr := io.Pipe()
	prt, err := tgruntime.Open(filepath.Join(b.TempDir(), "pipe.db"), testOptions(testRegistry(b)))
	if err != nil {
		b.Fatal(err)
	}
	srv, err := mcp.New(prt, &mcp.Options{Principal: principal})
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Run(ctx, &sdk.IOTransport{Reader: srd, Writer: swr})
	}()
	pcs := connect(b, &sdk.IOTransport{Reader: crd, Writer: cwr}, nil, "")
	defer func() { pcs.Close(); cwr.Close(); <-served; prt.Close(ctx) }()

	// The floor: the SDK alone, a raw tool answering {} over pipes.
	frd, fwr := io.Pipe()
	brd, bwr := io.Pipe()
	bare := sdk.NewServer(&sdk.Implementation{Name: "bare"}, nil)
	bare.AddTool(&sdk.Tool{Name: "test.noop", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "{}"}}, StructuredContent: json.RawMessage(`{}`)}, nil
		})
	go bare.Run(ctx, &sdk.IOTransport{Reader: brd, Writer: fwr})
	fcs := connect(b, &sdk.IOTransport{Reader: frd, Writer: bwr}, nil, "")
	defer func() { fcs.Close(); bwr.Close() }()

	in := json.RawMessage(`{}`)
	params := &sdk.CallToolParams{Name: "test.noop", Arguments: in}
	for range 100 { // warm both paths up
		if _, err := rt.Execute(ctx, tgruntime.Invocation{Tool: "test.noop", Input: in, Principal: principal}); err != nil {
			b.Fatal(err)
		}
		if res, err := cs.CallTool(ctx, params); err != nil || res.IsError {
			b.Fatal(err, res)
		}
		if res, err := pcs.CallTool(ctx, params); err != nil || res.IsError {
			b.Fatal(err, res)
		}
		if res, err := fcs.CallTool(ctx, params); err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for range b.N {
		if _, err := rt.Execute(ctx, tgruntime.Invocation{Tool: "test.noop", Input: in, Principal: principal}); err != nil {
			b.Fatal(err)
		}
	}
	inproc, inprocCPU := time.Since(start), cpuTime()-cpu0
	start = time.Now()
	for range b.N {
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
	over := time.Since(start)
	start, cpu0 = time.Now(), cpuTime()
	for range b.N {
		res, err := pcs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
	pipe, pipeCPU := time.Since(start), cpuTime()-cpu0
	start, cpu0 = time.Now(), cpuTime()
	for range b.N {
		if _, err := fcs.CallTool(ctx, params); err != nil {
			b.Fatal(err)
		}
	}
	floor, floorCPU := time.Since(start), cpuTime()-cpu0
	n := float64(b.N)
	b.ReportMetric(float64(floor.Microseconds())/n, "sdk-pipe-µs/call")
	b.ReportMetric(float64(floorCPU.Microseconds())/n, "sdk-pipe-cpu-µs/call")
	// CPU time (user and system, every thread of this process): what the
	// calls cost, whatever else the machine runs. The pipe loop's includes
	// the client's and the server's work.
	b.ReportMetric(float64(inprocCPU.Microseconds())/n, "execute-cpu-µs/call")
	b.ReportMetric(float64(pipeCPU.Microseconds())/n, "pipe-cpu-µs/call")
	b.ReportMetric(float64(pipe.Microseconds())/n, "pipe-µs/call")
	b.ReportMetric(float64(inproc.Microseconds())/n, "execute-µs/call")
	b.ReportMetric(float64(over.Microseconds())/n, "mcp-µs/call")
	b.ReportMetric(float64((over-inproc).Microseconds())/n, "added-µs/call")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
