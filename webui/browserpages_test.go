package webui_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolgate/toolgate/webui"
)

// until polls the JavaScript expression cond in the page until it is true
// (a minute at most: a wait, not a measure).
func until(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	for range 600 {
		if eval[bool](t, ctx, cond) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: still not %s", what, cond)
}

// In a browser: 60 pending intents show as a page of 50, which the live
// refresh keeps (the title says there are more), and an "Older" link to
// the other 10, a page that does not refresh itself; a login past the
// limit of failures shows the page saying how long to wait.
func TestBrowser_PagesAndLoginLimit(t *testing.T) {
	f := newFixture(t, false, nil, &webui.Options{LoginLimits: webui.LoginLimits{PerAddress: webui.Limit{Burst: 1, Every: time.Hour}}})
	f.fill(t, 0, 60)
	ctx := newTab(t)
	dir := screenshots(t)
	login(t, ctx, f, aliceToken)
	if n := eval[int](t, ctx, `document.querySelectorAll("#intents tbody tr").length`); n != 50 {
		t.Fatalf("the first page has %d rows, want 50", n)
	}
	until(t, ctx, "the live refresh", `document.getElementById("live-status").textContent.startsWith("Refreshed")`)
	if n, title := eval[int](t, ctx, `document.querySelectorAll("#intents tbody tr").length`), eval[string](t, ctx, `document.title`); n != 50 || !strings.HasPrefix(title, "(50+) ") {
		t.Errorf("after the live refresh: %d rows, title %q; want 50 and (50+)", n, title)
	}
	shoot(t, ctx, dir, "1-first-page")
	run(t, ctx, "older", chromedp.Click(chromedp.CSS("#older")), chromedp.WaitVisible(chromedp.CSS("#newest")))
	if n := eval[int](t, ctx, `document.querySelectorAll("#intents tbody tr").length`); n != 10 {
		t.Errorf("the older page has %d rows, want 10", n)
	}
	if eval[bool](t, ctx, `"live" in document.getElementById("intents").dataset || document.getElementById("older") !== null`) {
		t.Error("the last page refreshes itself or links to an older one")
	}
	shoot(t, ctx, dir, "2-older-page")

	run(t, ctx, "log out", chromedp.Click(chromedp.CSS("#logout")), chromedp.WaitVisible(chromedp.CSS("#token")))
	for i, want := range []string{"That token is not known to this server.", "Too many failed logins from your address: try again in 60 minutes."} {
		run(t, ctx, "a bad login",
			chromedp.SendKeys(chromedp.CSS("#token"), "wrong-token"),
			chromedp.Click(chromedp.CSS("#login")),
			chromedp.WaitVisible(chromedp.CSS("#error")))
		if got := text(t, ctx, "#error"); got != want {
			t.Errorf("bad login %d: %q, want %q", i, got, want)
		}
		run(t, ctx, "back to the form", chromedp.Navigate(f.url+"/ui/login"), chromedp.WaitVisible(chromedp.CSS("#token")))
	}
	run(t, ctx, "the limited page", chromedp.SendKeys(chromedp.CSS("#token"), aliceToken), chromedp.Click(chromedp.CSS("#login")), chromedp.WaitVisible(chromedp.CSS("#error")))
	shoot(t, ctx, dir, "3-login-limited")
}
