package webui_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolgate/toolgate/audit"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/webui"
)

// A process tool's intent page shows the executable it resolves to now and
// the argv, one element each; the list shows the argv as its preview.
func TestIntentPage_ProcessTool(t *testing.T) {
	f := newFixture(t, false, nil, nil)
	in, err := f.rt.Propose(context.Background(), tgruntime.Invocation{Tool: "exec_status",
		Input: json.RawMessage(`{"command":"true","args":["--flag","two words"]}`), Principal: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	b := f.browser(t)
	b.login(aliceToken)
	_, page := b.get("/ui/intents/" + in.ID)
	for _, want := range []string{`<code id="executable">/`, `<li><code>true</code></li><li><code>--flag</code></li><li><code>two words</code></li>`, in.Hash,
		"DENIED: agent may not run exec_status"} {
		if !strings.Contains(page, want) {
			t.Errorf("the intent page lacks %q", want)
		}
	}
	if _, list := b.get("/ui/intents"); !strings.Contains(list, `true --flag &#34;two words&#34;`) {
		t.Errorf("the list's preview is not the argv:\n%s", list)
	}
}

// The executions list filters by state, tool, principal and time, newest
// first; a bad filter is refused with a message.
func TestExecutions_Filters(t *testing.T) {
	f := newFixture(t, false, nil, nil)
	api := f.api(t, aliceToken)
	var ids []string
	for _, m := range []string{"one", "two"} {
		in := f.propose(t, agentToken, m)
		if _, err := api.Approve(context.Background(), in.ID); err != nil {
			t.Fatal(err)
		}
		res, err := f.api(t, agentToken).ExecuteIntent(context.Background(), in.ID, in.Hash)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ExecutionID)
	}
	// A call that is DENIED: test.echo runs only as an approved intent.
	denied, _ := f.rt.Execute(context.Background(), tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(`{"msg":"x"}`), Principal: "mallory"})
	b := f.browser(t)
	b.login(aliceToken)
	ids3 := func(m [][]string) []string {
		var out []string
		for _, x := range m {
			out = append(out, x[1])
		}
		return out
	}
	get := func(q string) []string {
		t.Helper()
		resp, body := b.get("/ui/executions?" + q)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", q, resp.StatusCode)
		}
		return ids3(regexp.MustCompile(`href="/ui/executions/([0-9a-f-]+)"`).FindAllStringSubmatch(body, -1))
	}
	eq := func(q string, got, want []string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: %v, want %v", q, got, want)
		}
	}
	eq("all", get(""), []string{denied.ExecutionID, ids[1], ids[0]})
	eq("state", get("state=COMPLETED"), []string{ids[1], ids[0]})
	eq("denied", get("state=DENIED"), []string{denied.ExecutionID})
	eq("principal", get("principal=mallory"), []string{denied.ExecutionID})
	eq("tool", get("tool=exec_status"), nil)
	eq("since", get("since=1h"), []string{denied.ExecutionID, ids[1], ids[0]})
	eq("until", get("until="+url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format("2006-01-02T15:04"))), nil)
	// A failed execution's page shows its error, never a stack.
	if _, page := b.get("/ui/executions/" + denied.ExecutionID); !strings.Contains(page, `id="err"`) || !strings.Contains(page, denied.Error.Type) || strings.Contains(page, "goroutine") {
		t.Errorf("the DENIED execution's page lacks its error %+v", denied.Error)
	}
	for _, q := range []string{"state=SLEEPING", "since=yesterday"} {
		if resp, _ := b.get("/ui/executions?" + q); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, resp.StatusCode)
		}
	}
}

// An execution's trace id links to Jaeger when its address is given.
func TestExecutionPage_JaegerLink(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	f := newFixture(t, false, nil, &webui.Options{JaegerURL: "http://jaeger.example:16686/"}, func(o *tgruntime.Options) { o.TracerProvider = tp })
	in := f.propose(t, agentToken, "traced")
	f.api(t, aliceToken).Approve(context.Background(), in.ID)
	res, err := f.api(t, agentToken).ExecuteIntent(context.Background(), in.ID, in.Hash)
	if err != nil || res.TraceID == "" {
		t.Fatalf("%v, trace %q", err, res.TraceID)
	}
	b := f.browser(t)
	b.login(agentToken)
	_, page := b.get("/ui/executions/" + res.ExecutionID)
	if !strings.Contains(page, `href="http://jaeger.example:16686/trace/`+res.TraceID+`"`) {
		t.Fatalf("no Jaeger link to %s:\n%s", res.TraceID, page)
	}
	if _, err := webui.New(f.rt, uiConfig(), &webui.Options{JaegerURL: "javascript:alert(1)"}); err == nil {
		t.Fatal("a javascript: Jaeger URL accepted")
	}
}

// The audit page verifies the log and the records, shows the head, and
// checks the log against the configured checkpoint: one it extends, one
// it does not, and one that cannot be read.
func TestAuditPage(t *testing.T) {
	var cp *audit.Checkpoint
	var cpErr error
	f := newFixture(t, false, nil, &webui.Options{Checkpoint: func() (*audit.Checkpoint, error) { return cp, cpErr }})
	f.propose(t, agentToken, "a")
	b := f.browser(t)
	b.login(aliceToken)
	var v audit.Verifier
	if err := f.rt.VerifyAuditLog(context.Background(), &v); err != nil {
		t.Fatal(err)
	}
	c := audit.Checkpoint{Size: v.Len(), Hash: v.Hash()}
	cp = &c
	_, page := b.get("/ui/audit")
	for _, want := range []string{"Valid: 1 events", "The log extends it.", "all match", "1 intents"} {
		if !strings.Contains(page, want) {
			t.Errorf("audit page lacks %q:\n%s", want, page)
		}
	}
	bad := audit.Checkpoint{Size: 1}
	rand.Read(bad.Hash[:])
	cp = &bad
	if _, page := b.get("/ui/audit"); !strings.Contains(page, "Verification failed at event 1") || strings.Contains(page, "The log extends it.") {
		t.Errorf("a checkpoint the log does not extend:\n%s", page)
	}
	cp, cpErr = nil, errors.New("signature does not verify")
	if _, page := b.get("/ui/audit"); !strings.Contains(page, "signature does not verify") {
		t.Errorf("an unreadable checkpoint:\n%s", page)
	}
}

// A verification reads the whole store: views share one (many at once
// run it once), a view within AuditMaxAge of it shows it again, saying
// when it ran, unless the checkpoint changed; "Verify now" (an
// approver's, with the CSRF token) runs another whatever its age.
func TestAuditPage_OneVerificationAtATime(t *testing.T) {
	var cp atomic.Pointer[audit.Checkpoint]
	f := newFixture(t, false, nil, &webui.Options{Checkpoint: func() (*audit.Checkpoint, error) { return cp.Load(), nil }})
	f.propose(t, agentToken, "a")
	b := f.browser(t)
	b.login(aliceToken)
	verifiedAt := regexp.MustCompile(`id="verified">Verified at <time datetime="([^"]+)"`)
	// view returns the time of the verification the page shows and the
	// number of intents it counted.
	view := func() (string, string) {
		resp, page := b.get("/ui/audit")
		at, n := verifiedAt.FindStringSubmatch(page), regexp.MustCompile(`(\d+) intents`).FindStringSubmatch(page)
		if resp.StatusCode != http.StatusOK || at == nil || n == nil {
			t.Errorf("audit page: %d\n%s", resp.StatusCode, page)
			return "", ""
		}
		return at[1], n[1]
	}
	var mu sync.Mutex
	runs := map[string]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			at, _ := view()
			mu.Lock()
			runs[at] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(runs) != 1 {
		t.Fatalf("8 views at once show %d verifications, want 1: %v", len(runs), runs)
	}
	first, _ := view()
	f.propose(t, agentToken, "b")
	if at, n := view(); at != first || n != "1" {
		t.Errorf("a view within a minute: verified at %s (first %s), %s intents; want the first verification shown again", at, first, n)
	}
	if resp, _ := b.post("/ui/audit/verify", url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("verify now without the CSRF token: %d", resp.StatusCode)
	}
	if at, _ := view(); at != first {
		t.Error("verify now without the CSRF token verified")
	}
	if resp, _ := b.post("/ui/audit/verify", url.Values{"csrf": {b.csrf()}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("verify now: %d, want 303", resp.StatusCode)
	}
	second, n := view()
	if second == first || n != "2" {
		t.Errorf("after verify now: verified at %s (first %s), %s intents; want a new verification counting 2", second, first, n)
	}
	f.now.d += time.Minute
	f.propose(t, agentToken, "c")
	third, n := view()
	if third == second || n != "3" {
		t.Errorf("a view a minute later: verified at %s, %s intents; want a new verification counting 3", third, n)
	}
	var v audit.Verifier
	if err := f.rt.VerifyAuditLog(context.Background(), &v); err != nil {
		t.Fatal(err)
	}
	cp.Store(&audit.Checkpoint{Size: v.Len(), Hash: v.Hash()})
	if at, _ := view(); at == third {
		t.Error("a new checkpoint did not make a view verify again")
	}
	m := f.browser(t)
	m.login(agentToken)
	if resp, _ := m.post("/ui/audit/verify", url.Values{"csrf": {m.csrf()}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("verify now by a non-approver: %d", resp.StatusCode)
	}
}
