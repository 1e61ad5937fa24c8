package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// lockedBuffer is a log destination read while the server writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *lockedBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *lockedBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// limitedServer is an MCP server with limits over a fresh runtime, its
// refusal log, and clients over stdio (the server's principal) and over
// streamable HTTP (the principal of the token: "agent-1" or "agent-2").
type limitedServer struct {
	rt  *tgruntime.Runtime
	srv *mcp.Server
	log *lockedBuffer
	url string
}

func newLimitedServer(t *testing.T, limits mcp.RateLimits) *limitedServer {
	t.Helper()
	rt, err := tgruntime.Open(filepath.Join(t.TempDir(), "tg.db"), testOptions(testRegistry(t)))
	if err != nil {
		t.Fatal(err)
	}
	log := &lockedBuffer{}
	srv, err := mcp.New(rt, &mcp.Options{Principal: principal, RateLimits: limits, RefusalLog: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler(&mcp.HTTPOptions{Authenticate: func(tok string) (string, bool) {
		p, ok := map[string]string{"tok-1": "agent-1", "tok-2": "agent-2"}[tok]
		return p, ok
	}}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		rt.Close(context.Background())
	})
	return &limitedServer{rt: rt, srv: srv, log: log, url: hs.URL}
}

// stdio connects the SDK's client over a pair of pipes, served by Run with
// an IOTransport: the server's own line reader, as toolgate mcp serves
// stdin and stdout.
func (l *limitedServer) stdio(t *testing.T) *sdk.ClientSession {
	t.Helper()
	crd, swr := io.Pipe()
	srd, cwr := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.srv.Run(context.Background(), &sdk.IOTransport{Reader: srd, Writer: swr})
	}()
	cs := connect(t, &sdk.IOTransport{Reader: crd, Writer: cwr}, nil, "")
	t.Cleanup(func() {
		cs.Close()
		cwr.Close()
		swr.Close()
		<-done
	})
	return cs
}

// rateLimited checks that res is the refusal of a rate-limited call: an
// isError result, state REFUSED, ResourceError rate_limited naming limit,
// and retryAfter (whole seconds, at least 1) in the error and in _meta.
func rateLimited(t *testing.T, res *sdk.CallToolResult, limit string) {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want a rate-limited refusal, got a result: %s", text(t, res))
	}
	var body struct {
		State string `json:"state"`
		Error struct {
			Type, Code, Message string
			RetryAfter          int `json:"retryAfter"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(text(t, res)), &body); err != nil {
		t.Fatalf("the refusal's text is not JSON: %v", err)
	}
	if body.State != "REFUSED" || body.Error.Type != "ResourceError" || body.Error.Code != "rate_limited" ||
		body.Error.RetryAfter < 1 || !strings.Contains(body.Error.Message, "rateLimits."+limit) {
		t.Fatalf("refusal %s; want REFUSED, ResourceError rate_limited naming rateLimits.%s, retryAfter >= 1", text(t, res), limit)
	}
	meta, _ := json.Marshal(res.Meta)
	var m map[string]any
	json.Unmarshal(meta, &m)
	if ra, _ := m[mcp.MetaRetryAfter].(float64); int(ra) != body.Error.RetryAfter {
		t.Errorf("_meta %s = %v, want %d (the error's retryAfter)", mcp.MetaRetryAfter, m[mcp.MetaRetryAfter], body.Error.RetryAfter)
	}
	if e, _ := m[mcp.MetaError].(map[string]any); e["code"] != "rate_limited" || e["retryAfter"] != float64(body.Error.RetryAfter) {
		t.Errorf("_meta %s = %v, want code rate_limited and retryAfter", mcp.MetaError, m[mcp.MetaError])
	}
	if m[mcp.MetaExecutionID] != nil {
		t.Errorf("a refused call has an execution: %v", m[mcp.MetaExecutionID])
	}
}

// A burst over the principal's limit: the calls past the burst are
// refused with when to retry, run nothing, and are logged; another
// principal, with its own bucket, still runs; toolgate.execute_intent
// counts against the principal too. Over stdio and over HTTP.
func TestRateLimit_PerPrincipal(t *testing.T) {
	limits := mcp.RateLimits{PerPrincipal: mcp.Rate{PerSecond: 0.001, Burst: 3}} // no refill during the test
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l := newLimitedServer(t, limits)
			var cs, other *sdk.ClientSession
			who := principal
			if transport == "stdio" {
				cs = l.stdio(t)
			} else {
				cs = httpClient(t, l.url, "tok-1", "", nil)
				other = httpClient(t, l.url, "tok-2", "", nil)
				who = "agent-1"
			}
			// The burst, across tools and versions.
			completed(t, call(t, ctx, cs, "test.noop", map[string]any{}, nil))
			completed(t, call(t, ctx, cs, "test.noop--1.0.0", map[string]any{}, nil))
			if o := failed(t, call(t, ctx, cs, "test.fail", map[string]any{}, nil)); o.State != "ROLLED_BACK" {
				t.Fatalf("test.fail: %s, want ROLLED_BACK (it ran)", o.State)
			}
			before := len(records(t, l.rt, "test.noop"))
			rateLimited(t, call(t, ctx, cs, "test.noop", map[string]any{}, nil), "perPrincipal")
			rateLimited(t, call(t, ctx, cs, "test.fail", map[string]any{}, nil), "perPrincipal")
			rateLimited(t, call(t, ctx, cs, mcp.ExecuteIntentTool, map[string]any{"id": "x", "hash": "y"}, nil), "perPrincipal")
			if n := len(records(t, l.rt, "test.noop")); n != before {
				t.Errorf("refused calls ran: %d executions of test.noop, want %d", n, before)
			}
			if other != nil {
				completed(t, call(t, ctx, other, "test.noop", map[string]any{}, nil))
			}
			log := l.log.String()
			if got := strings.Count(log, "call refused"); got != 3 {
				t.Errorf("refusal log: %d lines, want 3:\n%s", got, log)
			}
			for _, want := range []string{"code=rate_limited", "limit=perPrincipal", "principal=" + who, "tool=test.fail", "retryAfter="} {
				if !strings.Contains(log, want) {
					t.Errorf("refusal log lacks %q:\n%s", want, log)
				}
			}
		})
	}
}

// A burst over a tool's limit: its calls past the burst are refused for
// every principal, whatever version they name; other tools still run.
// Over stdio and over HTTP.
func TestRateLimit_PerTool(t *testing.T) {
	limits := mcp.RateLimits{PerTool: mcp.Rate{PerSecond: 0.001, Burst: 2}}
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l := newLimitedServer(t, limits)
			var cs, other *sdk.ClientSession
			if transport == "stdio" {
				cs = l.stdio(t)
			} else {
				cs = httpClient(t, l.url, "tok-1", "", nil)
				other = httpClient(t, l.url, "tok-2", "", nil)
			}
			completed(t, call(t, ctx, cs, "test.noop", map[string]any{}, nil))
			completed(t, call(t, ctx, cs, "test.noop--2.0.0_b7", map[string]any{}, nil))
			rateLimited(t, call(t, ctx, cs, "test.noop", map[string]any{}, nil), "perTool")
			rateLimited(t, call(t, ctx, cs, "test.noop--1.0.0", map[string]any{}, nil), "perTool")
			if other != nil {
				rateLimited(t, call(t, ctx, other, "test.noop", map[string]any{}, nil), "perTool")
			}
			if o := failed(t, call(t, ctx, cs, "test.fail", map[string]any{}, nil)); o.State != "ROLLED_BACK" {
				t.Fatalf("test.fail: %s, want ROLLED_BACK (another tool's bucket)", o.State)
			}
			if n := len(records(t, l.rt, "test.noop")); n != 2 {
				t.Errorf("%d executions of test.noop, want the burst's 2", n)
			}
			if log := l.log.String(); !strings.Contains(log, "limit=perTool") || !strings.Contains(log, "tool=test.noop") {
				t.Errorf("refusal log lacks the per-tool refusal:\n%s", log)
			}
		})
	}
}

// Limits that toolgate serve's config would refuse are refused here too.
func TestRateLimit_BadLimits(t *testing.T) {
	rt, err := tgruntime.Open(filepath.Join(t.TempDir(), "tg.db"), testOptions(testRegistry(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	_, err = mcp.New(rt, &mcp.Options{RateLimits: mcp.RateLimits{PerTool: mcp.Rate{PerSecond: 5}}})
	if err == nil || !strings.Contains(err.Error(), "rateLimits.perTool") {
		t.Fatalf("a rate without a burst: %v, want an error naming rateLimits.perTool", err)
	}
}
