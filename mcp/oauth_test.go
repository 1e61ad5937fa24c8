package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/mcp"
	"github.com/toolgate/toolgate/oauth"
	"github.com/toolgate/toolgate/oauth/oauthtest"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// oauthHTTPServer serves the test tools over streamable HTTP, taking the
// access tokens of a local issuer whose audience is the server's URL. The
// policy grants state.write:secret to tokens holding the scope secrets.
func oauthHTTPServer(t *testing.T) (*tgruntime.Runtime, *httptest.Server, *oauthtest.Issuer) {
	t.Helper()
	o := testOptions(testRegistry(t))
	o.Grants["scope:secrets"] = []capability.Capability{capability.MustParse("state.write:secret")}
	rt, err := tgruntime.Open(filepath.Join(t.TempDir(), "tg.db"), o)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mcp.New(rt, &mcp.Options{Principal: "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(nil)
	hs.Start()
	resource := hs.URL + "/mcp"
	is := oauthtest.New(t, resource)
	ctx, cancel := context.WithCancel(context.Background())
	v, err := oauth.NewVerifier(ctx, oauth.Config{Resource: resource, Issuers: []oauth.Issuer{{Issuer: is.URL()}}, Scopes: []string{"tools.call"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(oauth.MetadataPath(resource), v.MetadataHandler())
	mux.Handle("/mcp", srv.Handler(&mcp.HTTPOptions{OAuth: v}))
	hs.Config.Handler = mux
	t.Cleanup(func() {
		cancel()
		hs.CloseClientConnections()
		hs.Close()
		rt.Close(context.Background())
	})
	return rt, hs, is
}

// A client of the Go SDK with an access token: its calls run as the
// token's principal, with what the policy grants its scopes, and are
// recorded with the token's issuer, subject and hash.
func TestHTTP_OAuthToken(t *testing.T) {
	rt, hs, is := oauthHTTPServer(t)
	tok := is.Token("k1", jwt.MapClaims{"sub": "agent-9", "scope": "tools.call"})
	cs := httpClient(t, hs.URL+"/mcp", tok, "", nil)
	completed(t, call(t, context.Background(), cs, "test.noop", map[string]any{}, nil))
	if o := failed(t, call(t, context.Background(), cs, "test.secret", map[string]any{}, nil)); o.State != "DENIED" {
		t.Fatalf("secret without the scope: %+v", o)
	}
	cs.Close()
	cs = httpClient(t, hs.URL+"/mcp", is.Token("k1", jwt.MapClaims{"sub": "agent-9", "scope": "tools.call secrets"}), "", nil)
	completed(t, call(t, context.Background(), cs, "test.secret", map[string]any{}, nil))
	cs.Close()
	recs, err := rt.Executions(context.Background(), txn.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	for _, r := range recs {
		if r.Principal != "agent-9" || r.Token == nil || r.Token.Issuer != is.URL() || r.Token.Subject != "agent-9" || len(r.Token.SHA256) != 64 {
			t.Errorf("record %s: principal %q, token %+v", r.ToolID, r.Principal, r.Token)
		}
	}
	if _, err := rt.VerifyRecords(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// Refused tokens get the specification's challenges, and nothing runs.
func TestHTTP_OAuthRefusals(t *testing.T) {
	rt, hs, is := oauthHTTPServer(t)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	meta := `Bearer resource_metadata="` + hs.URL + `/.well-known/oauth-protected-resource/mcp", scope="tools.call"`
	for _, c := range []struct {
		name   string
		token  string
		status int
		header string
	}{
		{"no token", "", 401, meta},
		{"unknown", "guess", 401, `error="invalid_token"`},
		{"expired", is.Token("k1", jwt.MapClaims{"exp": time.Now().Add(-time.Hour).Unix(), "iat": time.Now().Add(-2 * time.Hour).Unix()}), 401, `error="invalid_token"`},
		{"wrong audience", is.Token("k1", jwt.MapClaims{"aud": hs.URL}), 401, `error="invalid_token"`},
		{"missing scope", is.Token("k1", jwt.MapClaims{"scope": "other"}), 403, `error="insufficient_scope"`},
	} {
		req, _ := http.NewRequest("POST", hs.URL+"/mcp", strings.NewReader(init))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(resp.Header.Get("WWW-Authenticate"), c.header) {
			t.Errorf("%s: %d %q, want %d with %s", c.name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), c.status, c.header)
		}
	}
	resp, err := http.Get(hs.URL + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("metadata: %d", resp.StatusCode)
	}
	if recs, _ := rt.Executions(context.Background(), txn.Filter{}); len(recs) != 0 {
		t.Errorf("%d records after refusals", len(recs))
	}
}

// The caller's token is never passed on: through the gateway, an HTTP
// upstream gets the credential the registry file names, and never the
// access token the agent's client sent to toolgate.
func TestGateway_OAuthTokenNeverPassedOn(t *testing.T) {
	up := sdk.NewServer(&sdk.Implementation{Name: "web", Version: "0.3.0"}, nil)
	up.AddTool(&sdk.Tool{Name: "ping", Description: "answers", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "pong"}}}, nil
		})
	var mu sync.Mutex
	var seen []string
	uh := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return up }, nil)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		uh.ServeHTTP(w, r)
	}))
	defer upstream.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "gateway.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf("mcp_servers:\n  - name: web\n    url: %s\n    headers_from_env: {Authorization: WEB_MCP_AUTH}\n    limits: {max_execution_time: 10s}\n", upstream.URL)), 0o600)
	t.Setenv("WEB_MCP_AUTH", "Bearer the-gateway-own")
	gw := mcp.NewGateway(nil)
	defer gw.Close()
	reg, err := tools.LoadRegistryFileWith(file, gw.Tools)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := tgruntime.Open(filepath.Join(dir, "tg.db"), &tgruntime.Options{Registry: reg, NoSync: true,
		Grants: map[string][]capability.Capability{"agent-9": {capability.MustParse("mcp.call:web")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	srv, err := mcp.New(rt, &mcp.Options{Principal: "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(nil)
	defer hs.Close()
	is := oauthtest.New(t, hs.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := oauth.NewVerifier(ctx, oauth.Config{Resource: hs.URL, Issuers: []oauth.Issuer{{Issuer: is.URL()}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler = srv.Handler(&mcp.HTTPOptions{OAuth: v})
	tok := is.Token("k1", jwt.MapClaims{"sub": "agent-9"})
	cs := httpClient(t, hs.URL, tok, "", nil)
	defer cs.Close()
	completed(t, call(t, context.Background(), cs, "web.ping", map[string]any{}, nil))
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("the upstream was never reached")
	}
	for _, h := range seen {
		if strings.Contains(h, tok) || h != "Bearer the-gateway-own" {
			t.Fatalf("the upstream got Authorization %q", h)
		}
	}
}

// tools/list shows a caller the tools it could call: a token without the
// scope that the policy grants state.write:secret for does not see
// test.secret, one with it does; the answer is marked private for caching.
func TestHTTP_ToolsListPerCaller(t *testing.T) {
	_, hs, is := oauthHTTPServer(t)
	list := func(tok string) map[string]bool {
		cs := httpClient(t, hs.URL+"/mcp", tok, "", nil)
		defer cs.Close()
		names := map[string]bool{}
		for tool, err := range cs.Tools(context.Background(), nil) {
			if err != nil {
				t.Fatal(err)
			}
			names[tool.Name] = true
		}
		return names
	}
	plain := list(is.Token("k1", jwt.MapClaims{"scope": "tools.call"}))
	if plain["test.secret"] || !plain["test.noop"] || !plain["toolgate.execute_intent"] {
		t.Errorf("without the scope: %v", plain)
	}
	scoped := list(is.Token("k1", jwt.MapClaims{"scope": "tools.call secrets"}))
	if !scoped["test.secret"] || !scoped["test.noop"] {
		t.Errorf("with the scope: %v", scoped)
	}
	// Protocol 2026-07-28: the list is private to its caller.
	req, _ := http.NewRequest("POST", hs.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/list")
	req.Header.Set("Authorization", "Bearer "+is.Token("k1", nil))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"cacheScope":"private"`) {
		t.Errorf("tools/list under 2026-07-28 is not marked private: %d %s", resp.StatusCode, b)
	}
}
