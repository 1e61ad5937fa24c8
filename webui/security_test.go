package webui_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	tgruntime "github.com/toolgate/toolgate/runtime"
)

func setCookie(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == "toolgate_session" {
			return c
		}
	}
	t.Fatalf("no session cookie set (status %d, Set-Cookie %q)", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	return nil
}

// The session cookie is HttpOnly, SameSite=Strict, scoped to /ui/, expiring
// with the session, and Secure when the request came over TLS (directly,
// or through a proxy that says so), not otherwise; a wrong token gets no
// cookie.
func TestSession_CookieAttributes(t *testing.T) {
	f := newFixture(t, false, nil, webuiOpts{SessionTTL: time.Hour}.o())
	b := f.browser(t)
	resp := b.login("not-a-token")
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("a wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	resp = b.login(aliceToken)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	c := setCookie(t, resp)
	raw := resp.Header.Get("Set-Cookie")
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui/" || c.Secure ||
		c.MaxAge < 3590 || c.MaxAge > 3600 || time.Until(c.Expires) > time.Hour+time.Minute || len(c.Value) < 40 {
		t.Fatalf("cookie over plain HTTP: %s", raw)
	}
	// Behind a TLS-terminating proxy.
	req, _ := http.NewRequest("POST", f.url+"/ui/login", strings.NewReader(url.Values{"token": {aliceToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-Proto", "https")
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if c := setCookie(t, resp); !c.Secure || !c.HttpOnly {
		t.Fatalf("cookie behind a TLS proxy: %s", resp.Header.Get("Set-Cookie"))
	}
	// Over TLS itself.
	tf := newFixture(t, true, nil, nil)
	if c := setCookie(t, tf.browser(t).login(aliceToken)); !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie over TLS: %+v", c)
	}
}

type webuiOpts struct{ SessionTTL time.Duration }

// Logging out ends the session on the server: the old cookie, replayed,
// gets the login page, and a POST with it is refused.
func TestSession_LogoutEndsIt(t *testing.T) {
	f := newFixture(t, false, nil, nil)
	b := f.browser(t)
	b.login(aliceToken)
	old, csrf := b.cookie(), b.csrf()
	if resp, _ := b.get("/ui/intents"); resp.StatusCode != http.StatusOK {
		t.Fatalf("logged in: %d", resp.StatusCode)
	}
	resp, _ := b.post("/ui/logout", url.Values{"csrf": {csrf}})
	if resp.StatusCode != http.StatusSeeOther || setCookie(t, resp).MaxAge >= 0 {
		t.Fatalf("logout: %d %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	// Replay the old cookie, as a thief who copied it would.
	thief := f.browser(t)
	u, _ := url.Parse(f.url + "/ui/")
	thief.jar.SetCookies(u, []*http.Cookie{{Name: "toolgate_session", Value: old, Path: "/ui/"}})
	if resp, _ := thief.get("/ui/intents"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login") {
		t.Fatalf("the ended session's cookie still works: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	in := f.propose(t, agentToken, "x")
	if resp, _ := thief.post("/ui/intents/"+in.ID+"/approve", url.Values{"csrf": {csrf}, "hash": {in.Hash}}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a POST with the ended session: %d", resp.StatusCode)
	}
	if s := f.status(t, in.ID); s != tgruntime.IntentPending {
		t.Fatalf("the intent is %s", s)
	}
}

// A session expires on the server at its TTL, whatever the browser keeps.
func TestSession_Expires(t *testing.T) {
	f := newFixture(t, false, nil, webuiOpts{SessionTTL: time.Hour}.o())
	b := f.browser(t)
	b.login(aliceToken)
	if resp, _ := b.get("/ui/intents"); resp.StatusCode != http.StatusOK {
		t.Fatalf("logged in: %d", resp.StatusCode)
	}
	f.now.d = time.Hour + time.Second
	if resp, _ := b.get("/ui/intents"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("an expired session still works: %d", resp.StatusCode)
	}
}

// A state-changing POST needs the session's own CSRF token: none, another
// session's, or a form sent from another site is refused and decides
// nothing; the right one decides.
func TestCSRF(t *testing.T) {
	f := newFixture(t, false, nil, nil)
	alice, other := f.browser(t), f.browser(t)
	alice.login(aliceToken)
	other.login(aliceToken) // the same person in another browser: another session
	in := f.propose(t, agentToken, "x")
	path := "/ui/intents/" + in.ID + "/approve"
	for name, form := range map[string]url.Values{
		"no token":               {"hash": {in.Hash}},
		"empty token":            {"hash": {in.Hash}, "csrf": {""}},
		"another session's":      {"hash": {in.Hash}, "csrf": {other.csrf()}},
		"a made-up token":        {"hash": {in.Hash}, "csrf": {"AAAA"}},
		"the token in the query": nil,
	} {
		p := path
		if form == nil {
			p, form = path+"?csrf="+url.QueryEscape(alice.csrf()), url.Values{"hash": {in.Hash}}
		}
		if resp, _ := alice.post(p, form); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, resp.StatusCode)
		}
	}
	if resp, _ := alice.post(path, url.Values{"hash": {in.Hash}, "csrf": {alice.csrf()}}, "Sec-Fetch-Site", "cross-site"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site form with the right token: %d, want 403", resp.StatusCode)
	}
	if resp, _ := alice.post("/ui/logout", url.Values{}); resp.StatusCode != http.StatusForbidden || alice.cookie() == "" {
		t.Errorf("a logout without the token: %d", resp.StatusCode)
	}
	if s := f.status(t, in.ID); s != tgruntime.IntentPending {
		t.Fatalf("a refused POST decided the intent: %s", s)
	}
	if resp, _ := alice.post(path, url.Values{"hash": {in.Hash}, "csrf": {alice.csrf()}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the session's own token: %d", resp.StatusCode)
	}
	if s := f.status(t, in.ID); s != tgruntime.IntentApproved {
		t.Fatalf("not approved: %s", s)
	}
}

// A principal that is not an approver sees its own intents and executions
// only (another's intent is not found, as in the API), and cannot decide
// one, even its own (403), nor see the audit page.
func TestNonApprover(t *testing.T) {
	f := newFixture(t, false, nil, nil)
	mine := f.propose(t, agentToken, "agent's own")
	theirs := f.propose(t, malloryToken, "mallory's secret")
	agent := f.browser(t)
	agent.login(agentToken)
	_, list := agent.get("/ui/intents")
	if !strings.Contains(list, mine.ID) || strings.Contains(list, theirs.ID) || strings.Contains(list, "secret") {
		t.Fatalf("the agent's list:\n%s", list)
	}
	if resp, _ := agent.get("/ui/intents/live"); resp.StatusCode != http.StatusOK {
		t.Fatalf("live: %d", resp.StatusCode)
	}
	if _, live := agent.get("/ui/intents/live"); strings.Contains(live, theirs.ID) || !strings.Contains(live, mine.ID) {
		t.Fatalf("the agent's live list: %s", live)
	}
	if resp, body := agent.get("/ui/intents/" + theirs.ID); resp.StatusCode != http.StatusNotFound || strings.Contains(body, "secret") {
		t.Fatalf("another's intent: %d", resp.StatusCode)
	}
	_, page := agent.get("/ui/intents/" + mine.ID)
	if strings.Contains(page, `id="approve"`) {
		t.Fatal("a non-approver is offered the approve button")
	}
	csrf := agent.csrf()
	for _, id := range []string{mine.ID, theirs.ID} {
		in, _ := f.rt.Intent(t.Context(), id)
		if resp, _ := agent.post("/ui/intents/"+id+"/approve", url.Values{"csrf": {csrf}, "hash": {in.Hash}}); resp.StatusCode != http.StatusForbidden {
			t.Errorf("a non-approver approving: %d, want 403", resp.StatusCode)
		}
		if resp, _ := agent.post("/ui/intents/"+id+"/reject", url.Values{"csrf": {csrf}, "hash": {in.Hash}, "reason": {"no"}}); resp.StatusCode != http.StatusForbidden {
			t.Errorf("a non-approver rejecting: %d, want 403", resp.StatusCode)
		}
		if s := f.status(t, id); s != tgruntime.IntentPending {
			t.Fatalf("decided by a non-approver: %s", s)
		}
	}
	if resp, _ := agent.get("/ui/audit"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("audit page for a non-approver: %d", resp.StatusCode)
	}

	// Executions: each sees its own.
	alice := f.browser(t)
	alice.login(aliceToken)
	alice.post("/ui/intents/"+theirs.ID+"/approve", url.Values{"csrf": {alice.csrf()}, "hash": {theirs.Hash}})
	res, err := f.api(t, malloryToken).ExecuteIntent(t.Context(), theirs.ID, theirs.Hash)
	if err != nil {
		t.Fatal(err)
	}
	if _, body := agent.get("/ui/executions"); strings.Contains(body, res.ExecutionID) {
		t.Fatal("the agent sees mallory's execution in the list")
	}
	if resp, _ := agent.get("/ui/executions/" + res.ExecutionID); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the agent opens mallory's execution: %d", resp.StatusCode)
	}
	if _, body := alice.get("/ui/executions?principal=mallory"); !strings.Contains(body, res.ExecutionID) {
		t.Fatal("the approver does not see mallory's execution")
	}
}

// A decision is final: a second one is refused and changes nothing; a
// rejection needs a reason; a form showing another hash decides nothing.
func TestDecisions(t *testing.T) {
	f := newFixture(t, false, nil, nil)
	b := f.browser(t)
	b.login(aliceToken)
	csrf := b.csrf()
	in := f.propose(t, agentToken, "x")
	if resp, body := b.post("/ui/intents/"+in.ID+"/reject", url.Values{"csrf": {csrf}, "hash": {in.Hash}, "reason": {"  "}}); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "needs a reason") {
		t.Fatalf("a rejection without a reason: %d", resp.StatusCode)
	}
	if resp, _ := b.post("/ui/intents/"+in.ID+"/approve", url.Values{"csrf": {csrf}, "hash": {strings.Repeat("0", 64)}}); resp.StatusCode != http.StatusConflict {
		t.Fatalf("another hash: %d", resp.StatusCode)
	}
	if s := f.status(t, in.ID); s != tgruntime.IntentPending {
		t.Fatalf("decided: %s", s)
	}
	if resp, _ := b.post("/ui/intents/"+in.ID+"/reject", url.Values{"csrf": {csrf}, "hash": {in.Hash}, "reason": {"not today"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("reject: %d", resp.StatusCode)
	}
	resp, body := b.post("/ui/intents/"+in.ID+"/approve", url.Values{"csrf": {csrf}, "hash": {in.Hash}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "a decision is final") {
		t.Fatalf("a second decision: %d\n%s", resp.StatusCode, body)
	}
	if s := f.status(t, in.ID); s != tgruntime.IntentRejected {
		t.Fatalf("the second decision changed it: %s", s)
	}
	_, page := b.get("/ui/intents/" + in.ID)
	if strings.Contains(page, `id="approve"`) || !strings.Contains(page, "not today") {
		t.Fatal("a decided intent offers a decision, or hides its reason")
	}
}

// Every page carries a Content-Security-Policy that allows no inline
// script and no other origin, and no page has an inline script or style.
func TestHeaders(t *testing.T) {
	f := newFixture(t, false, nil, nil)
	b := f.browser(t)
	check := func(path string, resp *http.Response, body string) {
		t.Helper()
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "script-src 'self'", "object-src 'none'", "frame-ancestors 'none'", "form-action 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "http") || strings.Contains(csp, "*") {
			t.Errorf("%s: CSP %q allows inline code or another origin", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", path)
		}
		if strings.Contains(body, "<script>") || strings.Contains(body, "style=") || strings.Contains(body, "<style") || strings.Contains(body, " on") && strings.Contains(body, "onclick") {
			t.Errorf("%s: inline script or style in the page", path)
		}
	}
	resp, body := b.get("/ui/login")
	check("/ui/login", resp, body)
	b.login(aliceToken)
	in := f.propose(t, agentToken, "x")
	for _, p := range []string{"/ui/intents", "/ui/intents/" + in.ID, "/ui/executions", "/ui/audit", "/ui/static/app.js", "/ui/nope"} {
		resp, body := b.get(p)
		check(p, resp, body)
	}
	if resp, _ := b.get("/ui/static/app.js"); resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "javascript") {
		t.Errorf("app.js: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// Only a path of the UI after login: never another site.
	resp, err := b.c.PostForm(f.url+"/ui/login", url.Values{"token": {aliceToken}, "next": {"//evil.example/x"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); loc != "/ui/intents" {
		t.Errorf("login's next to another site: %q", loc)
	}
}
