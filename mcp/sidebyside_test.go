package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
)

// One program serves toolgate's HTTP API and MCP from one runtime: the
// agent's call over MCP becomes an intent, a person approves it through
// the HTTP API while the MCP session goes on, and the agent runs it.
func TestSideBySide_ApproveOverHTTPWhileMCPRuns(t *testing.T) {
	rt, err := tgruntime.Open(testdb.Path(t, "tg.db"), testOptions(testRegistry(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	api, err := server.New(rt, &server.Config{Tokens: []server.TokenConfig{
		{Principal: "alice", SHA256: server.HashToken("alice-token"), Approver: true},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mcp.New(rt, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api.Handler())
	mux.Handle("/mcp", m.Handler(&mcp.HTTPOptions{Authenticate: func(tok string) (string, bool) {
		p, ok := tokens[tok]
		return p, ok
	}}))
	hs := httptest.NewServer(mux)
	defer func() { hs.CloseClientConnections(); hs.Close() }()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := httpClient(t, hs.URL+"/mcp", "s3cret-agent-2", "2025-11-25", nil)
	defer cs.Close()
	id, hash, _ := intentOf(t, call(t, ctx, cs, "test.approve", map[string]any{"msg": "side by side"}, nil))

	req, _ := http.NewRequest("POST", hs.URL+"/v1/intents/"+id+"/approve", nil)
	req.Header.Set("Authorization", "Bearer alice-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("approve over the HTTP API: %s", resp.Status)
	}
	completed(t, call(t, ctx, cs, mcp.ExecuteIntentTool, map[string]any{"id": id, "hash": hash}, nil))
	if runs, _, _ := rt.StateValue(ctx, "approved", "runs"); string(runs) != "1" {
		t.Errorf("the approved tool ran %q times, want once", runs)
	}
}
