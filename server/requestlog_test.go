package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/server"
)

// requests returns the request log lines written so far.
func (l *lockedBuffer) requests(t *testing.T) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("a log line that is not JSON: %s", sc.Bytes())
		}
		if m["msg"] == "request" {
			out = append(out, m)
		}
	}
	return out
}

// With Options.RequestLog, every request is one structured line once
// answered: method, path, principal, status, execution id, duration;
// requests refused at the boundary (rate limited, malformed, not
// authenticated, no such endpoint) included.
// Without it, none.
func TestServer_RequestLog(t *testing.T) {
	var sink lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&sink, nil))
	cfg := testConfig()
	cfg.RateLimits.PerTool = server.Rate{PerSecond: 0.001, Burst: 1} // one call of a tool, no refill during the test
	f := newFixture(t, cfg, &server.Options{Logger: logger, RequestLog: logger})
	res, err := f.client(t, agentToken).Execute(context.Background(), inv("test.echo", `{"msg":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	// Refused at the boundary, before any execution: past test.echo's
	// rate limit (429), and a body without an input (400).
	if status, _, _ := f.post(t, "/v1/tools/test.echo/execute", agentToken, "application/json", `{"input":{"msg":"again"}}`); status != 429 {
		t.Fatalf("past the rate limit: %d", status)
	}
	if status, _, _ := f.post(t, "/v1/tools/test.fail/execute", agentToken, "application/json", `{}`); status != 400 {
		t.Fatalf("no input: %d", status)
	}
	get := func(path, token string) int {
		req, _ := http.NewRequest(http.MethodGet, f.http.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := f.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	get("/v1/executions/"+res.ExecutionID, agentToken)
	get("/v1/tools", "")
	get("/nowhere", agentToken)

	want := []struct {
		method, path, principal string
		status                  float64
		executionID             string
	}{
		{"POST", "/v1/tools/test.echo/execute", "agent", 200, res.ExecutionID},
		{"POST", "/v1/tools/test.echo/execute", "agent", 429, ""},
		{"POST", "/v1/tools/test.fail/execute", "agent", 400, ""},
		{"GET", "/v1/executions/" + res.ExecutionID, "agent", 200, res.ExecutionID},
		{"GET", "/v1/tools", "", 401, ""},
		{"GET", "/nowhere", "", 404, ""},
	}
	var lines []map[string]any
	// A line is written as its handler returns, which may be just after
	// the answer arrives (on a loaded machine, seconds after).
	for guard := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		if lines = sink.requests(t); len(lines) >= len(want) || time.Now().After(guard) { // a hang guard, not a timing assertion
			break
		}
	}
	if len(lines) != len(want) {
		t.Fatalf("%d request log lines, want %d:\n%v", len(lines), len(want), lines)
	}
	for i, w := range want {
		l := lines[i]
		d, ok := l["duration"].(float64)
		if l["method"] != w.method || l["path"] != w.path || l["principal"] != w.principal || l["status"] != w.status ||
			l["executionId"] != w.executionID || !ok || d <= 0 || l["level"] != "INFO" {
			t.Errorf("line %d: %v; want %+v and a duration", i, l, w)
		}
	}

	// Off unless asked for.
	var quiet lockedBuffer
	ql := slog.New(slog.NewJSONHandler(&quiet, nil))
	g := newFixture(t, nil, &server.Options{Logger: ql})
	if _, err := g.client(t, agentToken).Execute(context.Background(), inv("test.echo", `{"msg":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	if l := quiet.requests(t); len(l) != 0 {
		t.Errorf("request log lines without RequestLog: %v", l)
	}
}
