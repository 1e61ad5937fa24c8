package webui_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolgate/toolgate/client"
)

// The browser tests drive a real headless Chromium. They skip when none is
// installed, unless TOOLGATE_TEST_BROWSER=require (as .ci/run sets it),
// which makes a missing browser a failure.
const howToRun = "install Debian's chromium (apt-get install -y chromium) or point TOOLGATE_CHROMIUM at a Chrome binary; .ci/run installs it and sets TOOLGATE_TEST_BROWSER=require"

// chromium finds the browser binary, or skips (fails when required).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TOOLGATE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("TOOLGATE_TEST_BROWSER") == "require" {
		t.Fatal("no Chromium found and TOOLGATE_TEST_BROWSER=require: " + howToRun)
	}
	t.Skip("no Chromium found: " + howToRun)
	return ""
}

// newTab starts a headless Chromium with a fresh profile and returns a
// tab's context.
func newTab(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	// Chromium leaves org.chromium.Chromium.* directories in its TMPDIR:
	// give it one of its own, removed once the browser has stopped.
	tmp, err := os.MkdirTemp("", "toolgate-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, chromedp.Env("TMPDIR="+tmp))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc(); os.RemoveAll(tmp) })
	if err := chromedp.Do(ctx); err != nil { // start the browser, without a timeout (it would stop it)
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx
}

// run runs the steps with a deadline.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("the text of %s: %v", sel, err)
	}
	return v
}

// screenshots is where the pages' screenshots go: $TOOLGATE_UI_SCREENSHOTS,
// else the test's temporary directory.
func screenshots(t *testing.T) string {
	dir := os.Getenv("TOOLGATE_UI_SCREENSHOTS")
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// shoot saves a screenshot of the whole page as dir/name.png.
func shoot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

func login(t *testing.T, ctx context.Context, f *fixture, token string) {
	t.Helper()
	run(t, ctx, "log in",
		chromedp.Navigate(f.url+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#logout")),
	)
}

// An approver logs in, sees an intent proposed over the API appear on the
// open page (no reload), opens it, sees what it would run and that the
// policy allows it, and approves it; the intent then runs once through the
// API, and its execution's page shows the lifecycle.
func TestBrowser_ApproveAndRun(t *testing.T) {
	f := newFixture(t, false, nil, nil)
	ctx := newTab(t)
	dir := screenshots(t)

	login(t, ctx, f, aliceToken)
	if loc := eval[string](t, ctx, `location.pathname`); loc != "/ui/intents" {
		t.Fatalf("after login: %s", loc)
	}
	if p := text(t, ctx, "#principal"); p != "alice" {
		t.Fatalf("signed in as %q", p)
	}
	shoot(t, ctx, dir, "1-pending-empty")

	// Mark the page: a reload or a navigation would lose the mark.
	eval[bool](t, ctx, `window.__sameTab = true`)
	in := f.propose(t, agentToken, "hello from the agent")
	run(t, ctx, "the proposed intent appears", chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+in.ID+`"]`)))
	if !eval[bool](t, ctx, `window.__sameTab === true`) {
		t.Fatal("the page was reloaded: the intent did not appear live")
	}
	row := text(t, ctx, `tr[data-id="`+in.ID+`"]`)
	for _, want := range []string{"test.echo@1.0.0", "agent", `{"msg":"hello from the agent"}`, "ago"} {
		if !strings.Contains(row, want) {
			t.Errorf("the row lacks %q: %q", want, row)
		}
	}
	shoot(t, ctx, dir, "2-pending-live")

	run(t, ctx, "open the intent",
		chromedp.Click(chromedp.CSS(`tr[data-id="`+in.ID+`"] a`)),
		chromedp.WaitVisible(chromedp.CSS("#approve")),
	)
	for sel, want := range map[string]string{
		"#tool": "test.echo@1.0.0", "#proposer": "agent", "#hash": in.Hash, "#status": "pending",
		"#policy": "ALLOWED: agent may run test.echo@1.0.0",
	} {
		if got := text(t, ctx, sel); got != want {
			t.Errorf("%s: %q, want %q", sel, got, want)
		}
	}
	if got := text(t, ctx, "#input"); got != "{\n  \"msg\": \"hello from the agent\"\n}" {
		t.Errorf("the input is not pretty-printed: %q", got)
	}
	shoot(t, ctx, dir, "3-intent")

	run(t, ctx, "approve", chromedp.Click(chromedp.CSS("#approve")), chromedp.WaitVisible(chromedp.CSS("#notice")))
	if s := text(t, ctx, "#status"); s != "approved" {
		t.Fatalf("after approving: %s", s)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#approve, #reject").length`); n != 0 {
		t.Fatal("a decided intent still offers a decision")
	}
	if h := text(t, ctx, "#history"); !strings.Contains(h, "approved by alice") {
		t.Fatalf("history: %q", h)
	}
	shoot(t, ctx, dir, "4-approved")

	// The intent runs once through the API.
	agent := f.api(t, agentToken)
	res, err := agent.ExecuteIntent(context.Background(), in.ID, in.Hash)
	if err != nil || res.State != "COMPLETED" {
		t.Fatalf("executing the approved intent: %v %+v", err, res)
	}
	if _, err := agent.ExecuteIntent(context.Background(), in.ID, in.Hash); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("a second execution: %v, want a conflict", err)
	}

	run(t, ctx, "the executed intent links its execution",
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS("#history a")),
		chromedp.Click(chromedp.CSS("#history a")),
		chromedp.WaitVisible(chromedp.CSS("#timeline")),
	)
	if id := eval[string](t, ctx, `location.pathname`); id != "/ui/executions/"+res.ExecutionID {
		t.Fatalf("the history links to %s, want execution %s", id, res.ExecutionID)
	}
	tl := text(t, ctx, "#timeline tbody")
	states := []string{"VALIDATED", "AUTHORIZED", "EXECUTING", "COMPLETED"}
	last := -1
	for _, s := range states {
		i := strings.Index(tl, s)
		if i < 0 || i < last {
			t.Fatalf("the timeline lacks %s in order: %q", s, tl)
		}
		last = i
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#timeline tbody tr").length`); n < len(states) {
		t.Fatalf("%d transitions in the timeline", n)
	}
	if s := text(t, ctx, "#state"); s != "COMPLETED" {
		t.Fatalf("state %s", s)
	}
	if ws := text(t, ctx, "#writeset"); !strings.Contains(ws, "1 puts") || !strings.Contains(ws, "committed") {
		t.Fatalf("write set: %q", ws)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#events li code").length`); n < 4 {
		t.Fatalf("%d audit event ids", n)
	}
	shoot(t, ctx, dir, "5-execution")

	run(t, ctx, "executions list", chromedp.Navigate(f.url+"/ui/executions?principal=agent"), chromedp.WaitVisible(chromedp.CSS("#executions")))
	if !strings.Contains(text(t, ctx, "#executions"), res.ExecutionID) {
		t.Fatal("the execution is not listed")
	}
	shoot(t, ctx, dir, "6-executions")
	run(t, ctx, "audit page", chromedp.Navigate(f.url+"/ui/audit"), chromedp.WaitVisible(chromedp.CSS("#verdict")))
	if v := text(t, ctx, "#verdict"); !strings.HasPrefix(v, "Valid") {
		t.Fatalf("audit verdict: %q", v)
	}
	if r := text(t, ctx, "#records"); !strings.Contains(r, "all match") {
		t.Fatalf("records: %q", r)
	}
	shoot(t, ctx, dir, "7-audit")

	// Logging out ends the session: the pages need a login again.
	run(t, ctx, "log out", chromedp.Click(chromedp.CSS("#logout")), chromedp.WaitVisible(chromedp.CSS("#token")))
	run(t, ctx, "a page after logout", chromedp.Navigate(f.url+"/ui/intents/"+in.ID), chromedp.WaitVisible(chromedp.CSS("#token")))
	shoot(t, ctx, dir, "8-logged-out")
}

// Markup in a tool input, a principal and a rejection's reason is shown as
// text, in the server-rendered pages and in the rows the script builds:
// no element of it reaches the DOM and no script of it runs.
func TestBrowser_MarkupIsText(t *testing.T) {
	f := newFixture(t, false, nil, nil)
	ctx := newTab(t)
	dir := screenshots(t)
	const (
		input  = `<script>window.__pwned="input"</script><img id="injected-input" src="x" onerror="window.__pwned='img'">`
		reason = `<b id="injected-reason">no</b><script>window.__pwned="reason"</script>`
	)
	in := f.propose(t, markupToken, input)

	// clean: nothing injected ran or became an element.
	clean := func(where string) {
		t.Helper()
		if v := eval[string](t, ctx, `String(window.__pwned)`); v != "undefined" {
			t.Fatalf("%s: injected script ran: %s", where, v)
		}
		if n := eval[int](t, ctx, `document.querySelectorAll("#injected-input, #injected-principal, #injected-reason, img").length`); n != 0 {
			t.Fatalf("%s: %d injected elements in the DOM", where, n)
		}
	}
	login(t, ctx, f, aliceToken)
	clean("pending, as served")
	if row := text(t, ctx, `tr[data-id="`+in.ID+`"]`); !strings.Contains(row, markupName) || !strings.Contains(row, `<script>window.__pwned=\"input\"</script>`) {
		t.Fatalf("the markup is not shown as text: %q", row)
	}
	// The script rebuilds the rows: wait for a refresh.
	run(t, ctx, "a live refresh", chromedp.WaitVisible(chromedp.CSS("#live-status")))
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for !strings.HasPrefix(text(t, c, "#live-status"), "Refreshed at") {
		time.Sleep(100 * time.Millisecond)
	}
	clean("pending, refreshed by the script")
	if row := text(t, ctx, `tr[data-id="`+in.ID+`"]`); !strings.Contains(row, markupName) {
		t.Fatalf("the refreshed row: %q", row)
	}
	shoot(t, ctx, dir, "1-pending")

	run(t, ctx, "open the intent", chromedp.Click(chromedp.CSS(`tr[data-id="`+in.ID+`"] a`)), chromedp.WaitVisible(chromedp.CSS("#reject")))
	clean("intent page")
	if got := text(t, ctx, "#proposer"); got != markupName {
		t.Fatalf("proposer %q", got)
	}
	if got := text(t, ctx, "#input"); !strings.Contains(got, `<img id=\"injected-input\"`) {
		t.Fatalf("input %q", got)
	}
	if p := text(t, ctx, "#policy"); !strings.HasPrefix(p, "DENIED") {
		t.Fatalf("the policy grants the markup principal nothing: %q", p)
	}
	run(t, ctx, "reject with a reason",
		chromedp.SendKeys(chromedp.CSS("#reason"), reason),
		chromedp.Click(chromedp.CSS("#reject")),
		chromedp.WaitVisible(chromedp.CSS("#notice")),
	)
	clean("rejected intent page")
	if d := text(t, ctx, "#decided"); !strings.Contains(d, reason) {
		t.Fatalf("the reason is not shown as text: %q", d)
	}
	if h := text(t, ctx, "#history"); !strings.Contains(h, reason) || !strings.Contains(h, markupName) {
		t.Fatalf("history: %q", h)
	}
	shoot(t, ctx, dir, "2-rejected")
}
