package webui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/webui"
)

// receiver is a webhook on loopback that records what it gets and
// answers as its handler says.
type receiver struct {
	mu     sync.Mutex
	bodies []webui.Notification
	auth   []string
	hits   atomic.Int64
	srv    *httptest.Server
	answer func(n int64, w http.ResponseWriter, r *http.Request) // n: the hit's number, from 1
}

func newReceiver(t testing.TB, answer func(n int64, w http.ResponseWriter, r *http.Request)) *receiver {
	rc := &receiver{answer: answer}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := rc.hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		var m webui.Notification
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if r.Method != "POST" || r.Header.Get("Content-Type") != "application/json" || d.Decode(&m) != nil {
			t.Errorf("the webhook got %s %s %q", r.Method, r.Header.Get("Content-Type"), b)
		}
		if rc.answer != nil {
			rc.answer(n, w, r)
		}
		rc.mu.Lock()
		rc.bodies = append(rc.bodies, m)
		rc.auth = append(rc.auth, r.Header.Get("Authorization"))
		rc.mu.Unlock()
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) got() []webui.Notification {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]webui.Notification(nil), rc.bodies...)
}

// logBuffer collects the notifier's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// notifying is a fixture whose runtime announces its proposals to rc.
func notifying(t testing.TB, rc *receiver, o webui.NotifierOptions) (*fixture, *webui.Notifier, *logBuffer) {
	var hook atomic.Pointer[webui.Notifier]
	f := newFixture(t, false, func(in *tgruntime.Intent) {
		if n := hook.Load(); n != nil {
			n.Notify(in)
		}
	}, nil)
	logs := &logBuffer{}
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	n, err := webui.NewNotifier(&webui.Webhook{URL: rc.srv.URL + "/hook", Header: http.Header{"Authorization": {"Bearer hook-secret"}}},
		"https://toolgate.example", f.rt.Registry(), &o)
	if err != nil {
		t.Fatal(err)
	}
	hook.Store(n)
	t.Cleanup(func() { n.Close(context.Background()) })
	return f, n, logs
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Each new pending intent, proposed over the API or on the runtime
// directly (as the MCP front end does), is POSTed once with the documented
// body and the header from the environment; decisions are not.
func TestWebhook_OnePostPerIntent(t *testing.T) {
	rc := newReceiver(t, nil)
	f, _, logs := notifying(t, rc, webui.NotifierOptions{})
	a := f.propose(t, agentToken, "first")
	b := f.propose(t, malloryToken, "second")
	direct, err := f.rt.Propose(context.Background(), tgruntime.Invocation{Tool: "exec_status", Input: json.RawMessage(`{"command":"true","args":["--x","a b"]}`), Principal: "mcp-agent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.api(t, aliceToken).Approve(context.Background(), a.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three notifications", func() bool { return len(rc.got()) >= 3 })
	time.Sleep(50 * time.Millisecond) // a fourth would be a bug: give it a chance to arrive
	got := rc.got()
	if len(got) != 3 {
		t.Fatalf("%d notifications, want 3: %+v", len(got), got)
	}
	byID := map[string]webui.Notification{}
	for _, m := range got {
		byID[m.ID] = m
	}
	want := map[string]webui.Notification{
		a.ID:      {ID: a.ID, Tool: "test.echo", Version: "1.0.0", Proposer: "agent", Preview: `{"msg":"first"}`, Link: "https://toolgate.example/ui/intents/" + a.ID},
		b.ID:      {ID: b.ID, Tool: "test.echo", Version: "1.0.0", Proposer: "mallory", Preview: `{"msg":"second"}`, Link: "https://toolgate.example/ui/intents/" + b.ID},
		direct.ID: {ID: direct.ID, Tool: "exec_status", Version: direct.Version, Proposer: "mcp-agent", Preview: `true --x "a b"`, Link: "https://toolgate.example/ui/intents/" + direct.ID},
	}
	for id, w := range want {
		g := byID[id]
		text := g.Text
		g.Text = ""
		if g != w {
			t.Errorf("notification of %s:\n got %+v\nwant %+v", id, g, w)
		}
		if !strings.Contains(text, w.Proposer) || !strings.Contains(text, w.Tool+"@"+w.Version) || !strings.Contains(text, w.Link) {
			t.Errorf("text of %s: %q", id, text)
		}
	}
	for _, h := range rc.auth {
		if h != "Bearer hook-secret" {
			t.Errorf("Authorization %q, want the environment's", h)
		}
	}
	if strings.Count(logs.String(), "webhook: delivered") != 3 {
		t.Errorf("the deliveries are not logged:\n%s", logs)
	}
}

// A receiver that fails is retried with backoff until it accepts; every
// attempt is logged.
func TestWebhook_RetriesAFailingReceiver(t *testing.T) {
	rc := newReceiver(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		if n <= 2 {
			w.WriteHeader(http.StatusBadGateway)
		}
	})
	f, _, logs := notifying(t, rc, webui.NotifierOptions{BaseDelay: 10 * time.Millisecond})
	in := f.propose(t, agentToken, "retry me")
	waitFor(t, "the third attempt", func() bool { return strings.Contains(logs.String(), "webhook: delivered") })
	if n := rc.hits.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	l := logs.String()
	if strings.Count(l, "attempt failed, retrying") != 2 || !strings.Contains(l, "status=502") || !strings.Contains(l, "intent="+in.ID) {
		t.Fatalf("the attempts are not logged:\n%s", l)
	}
	if strings.Contains(l, rc.srv.URL) {
		t.Fatalf("the log shows the webhook's URL (it can be a secret):\n%s", l)
	}
}

// A receiver that hangs does not hold proposals back: they all complete
// while it holds every delivery; each hung attempt times out, is logged
// and retried; the webhook gives up after its attempts.
func TestWebhook_HangingReceiverDoesNotBlockProposals(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	f, _, logs := notifying(t, rc, webui.NotifierOptions{Timeout: 50 * time.Millisecond, BaseDelay: time.Millisecond, Attempts: 2, Workers: 1})
	for i := range 20 {
		f.propose(t, agentToken, "while the receiver hangs "+string(rune('a'+i)))
	}
	// All 20 proposals returned while the receiver held (or timed out)
	// every delivery.
	if all, _ := f.rt.Intents(context.Background(), tgruntime.IntentFilter{Status: tgruntime.IntentPending}); len(all) != 20 {
		t.Fatalf("%d intents proposed", len(all))
	}
	waitFor(t, "a retried attempt", func() bool { return strings.Contains(logs.String(), "giving up") })
	l := logs.String()
	if !strings.Contains(l, "attempt failed, retrying") || !strings.Contains(l, "attempt=2") {
		t.Fatalf("a hung attempt is not logged and retried:\n%s", l)
	}
}

// BenchmarkPropose measures a proposal's latency with no webhook and with
// a webhook whose receiver hangs: the two must be alike (the notifier is
// off the proposal's path).
func BenchmarkPropose(b *testing.B) {
	b.Run("no-webhook", func(b *testing.B) {
		f := newFixture(b, false, nil, nil)
		benchPropose(b, f)
	})
	b.Run("hanging-webhook", func(b *testing.B) {
		release := make(chan struct{})
		rc := newReceiver(b, func(n int64, w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		defer close(release)
		f, _, _ := notifying(b, rc, webui.NotifierOptions{Timeout: time.Minute, Queue: 8192})
		benchPropose(b, f)
		b.StopTimer()
		waitFor(b, "the receiver to be held", func() bool { return rc.hits.Load() > 0 })
	})
}

func benchPropose(b *testing.B, f *fixture) {
	ctx := context.Background()
	inv := tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(`{"msg":"bench"}`)}
	b.ResetTimer()
	for i := range b.N {
		inv.Principal = "agent-" + strconv.Itoa(i/500) // under the pending limit of each proposer
		if _, err := f.rt.Propose(ctx, inv); err != nil {
			b.Fatal(err)
		}
	}
}
