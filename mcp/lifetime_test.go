package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// The MCP front end does not own its runtime: a stdio session that ends
// (Run returns) and an HTTP server of its Handler that closes leave the
// runtime open, to its owner, who runs a call on it after them and closes
// it without error (testkit's Close, at the end).
func TestServer_LeavesTheRuntimeOpen(t *testing.T) {
	rt, _ := testkit.Open(t, testOptions(testRegistry(t)))
	srv, err := mcp.New(rt, &mcp.Options{Principal: principal})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	noop := func(cs *sdk.ClientSession) {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "test.noop", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			t.Fatalf("tools/call: %v %+v", err, res)
		}
	}

	crd, swr := io.Pipe()
	srd, cwr := io.Pipe()
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(context.Background(), &sdk.IOTransport{Reader: srd, Writer: swr}) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.IOTransport{Reader: crd, Writer: cwr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	noop(cs)
	cs.Close()
	cwr.Close()
	select {
	case <-ran:
	case <-ctx.Done():
		t.Fatal("Run did not return once the client left")
	}

	hs := httptest.NewServer(srv.Handler(nil))
	hcs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: &http.Client{}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	noop(hcs)
	hcs.Close()
	hs.CloseClientConnections()
	hs.Close()

	res, err := rt.Execute(ctx, tgruntime.Invocation{Tool: "test.noop", Input: json.RawMessage(`{}`), Principal: principal})
	if err != nil || res.State != "COMPLETED" {
		t.Fatalf("a call on the runtime after its MCP sessions ended: %v; want it run, COMPLETED", err)
	}
	if n := rt.Running(); n != 0 {
		t.Errorf("%d calls still run", n)
	}
}
