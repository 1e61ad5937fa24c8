package webui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/webui"
)

// fill stores n executions (test.echo called directly: DENIED, it runs
// only as an approved intent) by agent, and m pending intents.
func (f *fixture) fill(tb testing.TB, n, m int) {
	tb.Helper()
	const workers = 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				res, err := f.rt.Execute(context.Background(), tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(`{"msg":"x` + strconv.Itoa(i) + `"}`), Principal: "agent"})
				if res == nil || res.State != "DENIED" {
					errs <- fmt.Errorf("execution %d: %v %v", i, res, err)
					return
				}
			}
			for i := w; i < m; i += workers {
				if _, err := f.rt.Propose(context.Background(), tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(`{"msg":"p` + strconv.Itoa(i) + `"}`), Principal: "agent"}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}

// BenchmarkPages measures one view of each page of a store with 100,000
// executions and 2,000 pending intents, as an approver (the handler
// alone, no network); audit/verify is one verification of that store.
func BenchmarkPages(b *testing.B) {
	f := newFixture(b, false, nil, &webui.Options{Logger: slog.New(slog.DiscardHandler)},
		func(o *tgruntime.Options) { o.MaxPendingIntents = -1 }) // 2,000 pending of one proposer
	f.fill(b, 100_000, 2_000)
	cookie := f.session(b, aliceToken)
	view := func(b *testing.B, method, path string, body url.Values, want int) {
		req := httptest.NewRequest(method, path, strings.NewReader(body.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(cookie)
		w := httptest.NewRecorder()
		f.ui.ServeHTTP(w, req)
		if w.Code != want {
			b.Fatalf("%s %s: %d", method, path, w.Code)
		}
	}
	for _, path := range []string{"/ui/executions", "/ui/intents", "/ui/intents/live", "/ui/audit"} {
		b.Run(path[len("/ui/"):], func(b *testing.B) {
			view(b, "GET", path, nil, http.StatusOK) // the audit page: its verification, shown again by the views that follow
			b.ReportAllocs()
			for b.Loop() {
				view(b, "GET", path, nil, http.StatusOK)
			}
		})
	}
	// Verify now: one verification of the whole store.
	b.Run("audit/verify", func(b *testing.B) {
		req := httptest.NewRequest("GET", "/ui/audit", nil)
		req.AddCookie(cookie)
		w := httptest.NewRecorder()
		f.ui.ServeHTTP(w, req)
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(w.Body.String())
		if m == nil {
			b.Fatal("no CSRF token")
		}
		b.ReportAllocs()
		for b.Loop() {
			view(b, "POST", "/ui/audit/verify", url.Values{"csrf": {m[1]}}, http.StatusSeeOther)
		}
	})
}

// session logs in with token over HTTP and returns the session cookie.
func (f *fixture) session(tb testing.TB, token string) *http.Cookie {
	tb.Helper()
	c := *f.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.PostForm(f.url+"/ui/login", url.Values{"token": {token}})
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	for _, k := range resp.Cookies() {
		if k.Name == "toolgate_session" {
			return k
		}
	}
	tb.Fatalf("login: %d, no session cookie", resp.StatusCode)
	return nil
}
