package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
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
// protocol's own cost without the second process's scheduling.
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
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if _, err := rt.Execute(ctx, tgruntime.Invocation{Tool: "test.noop", Input: in, Principal: principal}); err != nil {
			b.Fatal(err)
		}
	}
	inproc := time.Since(start)
	start = time.Now()
	for range b.N {
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
	over := time.Since(start)
	start = time.Now()
	for range b.N {
		res, err := pcs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
	pipe := time.Since(start)
	n := float64(b.N)
	b.ReportMetric(float64(pipe.Microseconds())/n, "pipe-µs/call")
	b.ReportMetric(float64(inproc.Microseconds())/n, "execute-µs/call")
	b.ReportMetric(float64(over.Microseconds())/n, "mcp-µs/call")
	b.ReportMetric(float64((over-inproc).Microseconds())/n, "added-µs/call")
}
