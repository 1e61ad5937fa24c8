package mcp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// tokens: s3cret-empty maps to no principal (an embedder's mistake),
// which must not mean Options.Principal.
var tokens = map[string]string{"s3cret-agent-2": "agent-2", "s3cret-empty": ""}

// httpServer serves a fresh runtime over streamable HTTP on loopback.
func httpServer(t *testing.T) (*tgruntime.Runtime, *httptest.Server) {
	t.Helper()
	rt, err := tgruntime.Open(testdb.Path(t, "tg.db"), testOptions(testRegistry(t)))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mcp.New(rt, &mcp.Options{Principal: "nobody", ProgressInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler(&mcp.HTTPOptions{Authenticate: func(tok string) (string, bool) {
		p, ok := tokens[tok]
		return p, ok
	}}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		rt.Close(context.Background())
	})
	return rt, hs
}

func httpClient(t *testing.T, url, token, version string, p *progress) *sdk.ClientSession {
	t.Helper()
	tr := &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token}}, MaxRetries: -1}
	return connect(t, tr, p, version)
}

// Both protocol generations: 2025-11-25 through the stateful handler,
// 2026-07-28 through the stateless one, with the principal of the token.
func TestHTTP_Lifecycle(t *testing.T) {
	for _, tc := range []struct{ ask, want string }{{"2025-11-25", "2025-11-25"}, {"", "2026-07-28"}} {
		t.Run(tc.want, func(t *testing.T) {
			rt, hs := httpServer(t)
			p := newProgress()
			cs := httpClient(t, hs.URL, "s3cret-agent-2", tc.ask, p)
			if got := cs.InitializeResult().ProtocolVersion; got != tc.want {
				t.Fatalf("negotiated %s, want %s", got, tc.want)
			}
			lifecycle(t, cs, p)

			// Approval: an intent, approved in process, run once, replayed.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := map[string]any{"msg": "over http"}
			id, hash, _ := intentOf(t, call(t, ctx, cs, "test.approve", args, nil))
			if _, err := rt.Approve(ctx, id, "alice"); err != nil {
				t.Fatal(err)
			}
			first := call(t, ctx, cs, "test.approve", args, nil)
			completed(t, first)
			again := call(t, ctx, cs, mcp.ExecuteIntentTool, map[string]any{"id": id, "hash": hash}, nil)
			completed(t, again)
			if again.Meta[mcp.MetaReplayed] != true || first.Meta[mcp.MetaReplayed] == true {
				t.Errorf("first run %v, second %v: want one run, then a replay", first.Meta, again.Meta)
			}
			cs.Close()
			checkRecords(t, rt, "agent-2")
		})
	}
}

func TestHTTP_Refusals(t *testing.T) {
	_, hs := httpServer(t)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	post := func(body string, hdr map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", hs.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer s3cret-agent-2")
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, tc := range []struct {
		name string
		body string
		hdr  map[string]string
		want int
	}{
		{"no token", init, map[string]string{"Authorization": ""}, http.StatusUnauthorized},
		{"unknown token", init, map[string]string{"Authorization": "Bearer guess"}, http.StatusUnauthorized},
		{"a token of no principal", init, map[string]string{"Authorization": "Bearer s3cret-empty"}, http.StatusUnauthorized},
		{"DNS rebinding", init, map[string]string{"Host": "evil.example"}, http.StatusForbidden},
		{"10 MB body", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"test.big","arguments":{"data":"` + strings.Repeat("x", 10<<20) + `"}}}`, nil, http.StatusRequestEntityTooLarge},
		{"malformed JSON", `{"jsonrpc":`, nil, http.StatusBadRequest},
		{"unknown session", init, map[string]string{"Mcp-Session-Id": "nope"}, http.StatusNotFound},
	} {
		if got := post(tc.body, tc.hdr); got.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got.StatusCode, tc.want)
		}
	}
	// The server goes on serving.
	cs := httpClient(t, hs.URL, "s3cret-agent-2", "", nil)
	completed(t, call(t, context.Background(), cs, "test.noop", map[string]any{}, nil))
	cs.Close()
}

// Over HTTP, params the SDK cannot decode are answered here, in the
// protocol's terms: the SDK's answer quoted them, the tag's key with them,
// and named Go types;
// and a tools/call whose method is written with escapes ("tools\/call",
// which the SDK reads as tools/call) is tagged all the same: its record
// names the MCP request. A tools/call whose id is not an integer, or with
// a member name in another case, is refused, not run under another id.
func TestHTTP_TagKeyHiddenAndEscapedMethodTagged(t *testing.T) {
	rt, hs := httpServer(t)
	post, session := rawHTTPSession(t, hs.URL, "2025-11-25")
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"test.noop","arguments":{},"inputResponses":{"x":5}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"test.noop","arguments":{},"requestState":7}}`,
	} {
		body, _ := post(line)
		if !strings.Contains(body, "-32602") {
			t.Errorf("%s: answer %.400s", line, body)
		}
		for _, internal := range []string{"io.toolgate/rpc-", "*mcp.", "json: ", "unmarshaling"} {
			if strings.Contains(body, internal) {
				t.Errorf("%s: the answer shows internals (%q): %.400s", line, internal, body)
			}
		}
	}
	// An id that is a number but not an integer: the SDK would answer and
	// run it as id 1.
	if body, _ := post(`{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"test.noop","arguments":{}}}`); !strings.Contains(body, "-32600") {
		t.Errorf("an id of 1.5: answer %.400s", body)
	}
	// A member name in another case: the SDK reads method, the tagging
	// read METHOD, and the call ran untagged.
	if body, _ := post(`{"jsonrpc":"2.0","id":"case","method":"tools/call","METHOD":"tools/list","params":{"name":"test.noop","arguments":{}}}`); !strings.Contains(body, "-32600") {
		t.Errorf("a member METHOD: answer %.400s", body)
	}
	body, _ := post(`{"jsonrpc":"2.0","id":"esc","method":"tools\/call","params":{"name":"test.noop","arguments":{}}}`)
	if !strings.Contains(body, `"io.toolgate/callId":"mcp:`+session+`:esc"`) {
		t.Errorf("tools\\/call: answer %.400s, want the call id mcp:%s:esc", body, session)
	}
	recs, err := rt.Executions(context.Background(), txn.Filter{ToolID: "test.noop"})
	if err != nil || len(recs) != 1 || recs[0].CallID != "mcp:"+session+":esc" || recs[0].Principal != "agent-2" {
		t.Errorf("records %v %+v", err, recs)
	}
	auditVerifies(t, rt)
}

// rawHTTPSession opens a session of protocol version over raw POSTs and
// returns the function that posts a body in it (the answer's body and
// headers), and the session's id.
func rawHTTPSession(t *testing.T, url, version string) (post func(body string) (string, http.Header), session string) {
	post = func(body string) (string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer s3cret-agent-2")
		req.Header.Set("Mcp-Protocol-Version", version)
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), resp.Header
	}
	_, h := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + version + `","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if session = h.Get("Mcp-Session-Id"); session == "" {
		t.Fatal("no session")
	}
	post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return post, session
}

// A JSON-RPC batch (which a client of a protocol before 2025-06-18 may
// send, and the SDK accepts) is refused, as over stdio: its tools/call was
// not tagged, so that it ran under a call id that does not name the MCP
// request.
func TestHTTP_BatchRefused(t *testing.T) {
	rt, hs := httpServer(t)
	post, _ := rawHTTPSession(t, hs.URL, "2025-03-26")
	body, _ := post(`[{"jsonrpc":"2.0","id":"b1","method":"tools/call","params":{"name":"test.noop","arguments":{}}}]`)
	if !strings.Contains(body, "-32600") || !strings.Contains(body, "batch") {
		t.Errorf("a batch: answer %.400s", body)
	}
	recs, err := rt.Executions(context.Background(), txn.Filter{})
	if err != nil || len(recs) != 0 {
		t.Errorf("records %v %+v, want none", err, recs)
	}
	auditVerifies(t, rt)
}
