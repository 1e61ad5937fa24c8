package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/txn"
)

// rawPost posts one JSON-RPC message with the test token and returns the
// status, the session header and the JSON-RPC answer (from a JSON body or
// the first message of an event stream; nil when there is none).
func rawPost(t *testing.T, ctx context.Context, url, body string, hdr map[string]string) (int, string, map[string]any) {
	t.Helper()
	resp, err := post(ctx, url, body, hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var data []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				data = []byte(d)
				break
			}
		}
	} else {
		data, _ = io.ReadAll(resp.Body)
	}
	var m map[string]any
	json.Unmarshal(data, &m)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), m
}

// post posts one message with the test token and hdr.
func post(ctx context.Context, url, body string, hdr map[string]string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer s3cret-agent-2")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return http.DefaultClient.Do(req)
}

// rawText posts one message and returns the status and the body.
func rawText(t *testing.T, ctx context.Context, url, body string, hdr map[string]string) (int, string) {
	t.Helper()
	resp, err := post(ctx, url, body, hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// statelessMeta is what a request of protocol 2026-07-28 carries in its
// _meta instead of a session.
const statelessMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}`

func statelessHeaders(tool string) map[string]string {
	return map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool}
}

// An unknown method and params of the wrong type over HTTP (a session of
// protocol 2025-11-25, as over stdio): the protocol's errors, and the
// session goes on.
func TestHTTP_RefusalsJSONRPC(t *testing.T) {
	_, hs := httpServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	status, session, m := rawPost(t, ctx, hs.URL, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	if status != http.StatusOK || session == "" || m["result"] == nil {
		t.Fatalf("initialize: %d, session %q, %v", status, session, m)
	}
	hdr := map[string]string{"Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-11-25"}
	if status, _, _ := rawPost(t, ctx, hs.URL, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, hdr); status != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d", status)
	}
	code := func(m map[string]any) float64 {
		e, _ := m["error"].(map[string]any)
		c, _ := e["code"].(float64)
		return c
	}
	// An unknown method: the SDK's session handler answers 400 with its
	// text (not a JSON-RPC error, as over stdio and stateless HTTP).
	if status, text := rawText(t, ctx, hs.URL, `{"jsonrpc":"2.0","id":4,"method":"tools/explode"}`, hdr); status != http.StatusBadRequest ||
		!strings.Contains(text, "tools/explode") || strings.Contains(text, "goroutine") {
		t.Errorf("unknown method: %d %q, want 400 naming the method", status, text)
	}
	for _, tc := range []struct {
		name, body string
		code       float64
	}{
		{"params of the wrong type", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":5}}`, -32602},
		{"params not an object", `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":"x"}`, -32602},
	} {
		_, _, m := rawPost(t, ctx, hs.URL, tc.body, hdr)
		if got := code(m); got != tc.code {
			t.Errorf("%s: answer %v, want error %v", tc.name, m, tc.code)
		}
		if s := jsonString(m); strings.Contains(s, "goroutine") || strings.Contains(s, "io.toolgate/rpc-") {
			t.Errorf("%s: the answer shows internals: %s", tc.name, s)
		}
	}
	// The session goes on.
	_, _, m = rawPost(t, ctx, hs.URL, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"test.noop","arguments":{}}}`, hdr)
	if r, _ := m["result"].(map[string]any); r == nil || r["isError"] == true {
		t.Errorf("a good call after the bad ones: %v", m)
	}
	// Stateless (2026-07-28): an unknown method is refused the same way.
	if _, _, m := rawPost(t, ctx, hs.URL, `{"jsonrpc":"2.0","id":8,"method":"tools/explode","params":{`+statelessMeta+`}}`,
		map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/explode"}); code(m) != -32601 {
		t.Errorf("stateless unknown method: %v, want error -32601", m)
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A stateless HTTP request (protocol 2026-07-28) whose client drops the
// connection mid-call cancels the call: ABORTED, then ROLLED_BACK,
// recorded, as when a stdio client leaves.
func TestHTTP_StatelessDisconnectCancels(t *testing.T) {
	rt, hs := httpServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rctx, drop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"test.slow","arguments":{"ms":600000},` + statelessMeta + `}}`
		if resp, err := post(rctx, hs.URL, body, statelessHeaders("test.slow")); err == nil {
			io.Copy(io.Discard, resp.Body) // until the drop
			resp.Body.Close()
		}
	}()
	// Wait until the call runs (test.slow is read-only: it has no claim to
	// see while it runs).
	for i := 0; ; i++ {
		if rt.Running() == 1 {
			break
		}
		if i > 3000 {
			t.Fatal("the call never ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
	drop()
	<-done
	var recs []*txn.Record
	for i := 0; ; i++ {
		if recs = records(t, rt, "test.slow"); len(recs) == 1 && !recs[0].EndedAt.IsZero() {
			break
		}
		if i > 3000 {
			t.Fatalf("the dropped call did not end: %+v", recs[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := recs[0]
	if r.State != "ROLLED_BACK" || r.Error == nil || r.Error.Code != "canceled" || !slices.ContainsFunc(r.Transitions, func(tr txn.Transition) bool { return tr.To == "ABORTED" }) {
		t.Errorf("the dropped call: %s %+v %+v, want canceled: ABORTED, then ROLLED_BACK", r.State, r.Error, r.Transitions)
	}
	if !strings.HasSuffix(r.CallID, ":3") {
		t.Errorf("call id %q, want it to end with the request id 3", r.CallID)
	}
}
