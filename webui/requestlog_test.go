package webui_test

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate/server"
)

// instrumented serves f's UI as toolgate serve does, through
// a server with a request log and a tracer; it returns a fixture
// reaching that server, the log and the spans.
func instrumented(t *testing.T, f *fixture) (*fixture, *logBuffer, *tracetest.SpanRecorder) {
	t.Helper()
	logs := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	spans := tracetest.NewSpanRecorder()
	sopts := &server.Options{Logger: logger, RequestLog: logger,
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))}
	sopts.Handlers = map[string]http.Handler{"/ui/": f.ui} // the server instruments what it mounts
	srv, err := server.New(f.rt, testConfig(), sopts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	g := *f
	g.srv, g.url = hs, hs.URL
	return &g, logs, spans
}

type logLine struct {
	Msg, Method, Path, Principal string
	Status                       int
}

func requestLines(t *testing.T, logs *logBuffer) []logLine {
	t.Helper()
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("a log line that is not JSON: %s", sc.Bytes())
		}
		if l.Msg == "request" {
			out = append(out, l)
		}
	}
	return out
}

// The UI's requests are in the server's request log, as the API's are:
// method, path (never the query, the session cookie or the CSRF token),
// status, and the principal once known; each has a span named by its
// route.
func TestRequestLog_UIRequests(t *testing.T) {
	f, logs, spans := instrumented(t, newFixture(t, false, nil, nil))
	in := f.propose(t, agentToken, "hello")
	b := f.browser(t)
	if resp := b.login("not-a-token"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bad login: %d", resp.StatusCode)
	}
	if resp := b.login(aliceToken); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	if resp, _ := b.get("/ui/intents?status=all"); resp.StatusCode != http.StatusOK {
		t.Fatalf("intents: %d", resp.StatusCode)
	}
	csrf := b.csrf() // another GET /ui/intents
	if resp, _ := b.post("/ui/intents/"+in.ID+"/approve", url.Values{"csrf": {csrf}, "hash": {in.Hash}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("approve: %d", resp.StatusCode)
	}
	cookie := b.cookie()
	want := []logLine{
		{Method: "POST", Path: "/v1/intents", Principal: "agent", Status: 201},
		{Method: "POST", Path: "/ui/login", Principal: "", Status: 401},
		{Method: "POST", Path: "/ui/login", Principal: "alice", Status: 303},
		{Method: "GET", Path: "/ui/intents", Principal: "alice", Status: 200},
		{Method: "GET", Path: "/ui/intents", Principal: "alice", Status: 200},
		{Method: "POST", Path: "/ui/intents/" + in.ID + "/approve", Principal: "alice", Status: 303},
	}
	got := requestLines(t, logs)
	if len(got) != len(want) {
		t.Fatalf("%d request lines, want %d:\n%s", len(got), len(want), logs)
	}
	for i, w := range want {
		w.Msg = "request"
		if got[i] != w {
			t.Errorf("line %d: %+v, want %+v", i, got[i], w)
		}
	}
	out := logs.String()
	for what, secret := range map[string]string{"session cookie": cookie, "CSRF token": csrf, "token": aliceToken, "guessed token": "not-a-token", "query": "status=all"} {
		if secret == "" || strings.Contains(out, secret) {
			t.Errorf("the log holds the %s (%q):\n%s", what, secret, out)
		}
	}
	names := map[string]int{}
	for _, s := range spans.Ended() {
		names[s.Name()]++
	}
	for name, n := range map[string]int{"POST /ui/login": 2, "GET /ui/intents": 2, "POST /ui/intents/{id}/approve": 1, "POST /v1/intents": 1} {
		if names[name] != n {
			t.Errorf("%d spans named %q, want %d (spans: %v)", names[name], name, n, names)
		}
	}
}
