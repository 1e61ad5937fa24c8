package webui_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/webui"
)

// from is a client whose connections come from the loopback address ip
// (127.0.0.2, say: any 127/8 address is this machine's), not following
// redirects.
func (f *fixture) from(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// tryLogin posts token to the login form with c, with the extra headers
// given as name, value pairs; it returns the status, Retry-After and body.
func (f *fixture) tryLogin(t *testing.T, c *http.Client, token string, header ...string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.url+"/ui/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, body := do(t, c, req)
	return resp.StatusCode, resp.Header.Get("Retry-After"), body
}

// Failed logins from one address are limited: past the burst, 429 with
// Retry-After and a page saying so, even for a good token and whatever
// X-Forwarded-For claims; a good token from another address still logs
// in; once the window has passed, the address may try again. The failures
// are logged, the guessed tokens never.
func TestLogin_FailedLoginsLimited(t *testing.T) {
	logs := &logBuffer{}
	f := newFixture(t, false, nil, &webui.Options{Logger: slog.New(slog.NewTextHandler(logs, nil)),
		LoginLimits: webui.LoginLimits{PerAddress: webui.Limit{Burst: 3, Every: time.Minute}}})
	attacker, other := f.from(t, "127.0.0.2"), f.from(t, "127.0.0.3")
	guess := func(i int) string { return "guessed-token-" + strconv.Itoa(i) }
	for i := range 3 {
		if code, _, _ := f.tryLogin(t, attacker, guess(i)); code != http.StatusUnauthorized {
			t.Fatalf("bad login %d: %d, want 401", i, code)
		}
	}
	for i, hdr := range [][]string{nil, {"X-Forwarded-For", "203.0.113.7"}, {"X-Real-IP", "203.0.113.8"}} {
		code, retry, body := f.tryLogin(t, attacker, guess(10+i), hdr...)
		if code != http.StatusTooManyRequests {
			t.Fatalf("bad login past the limit (headers %q): %d, want 429", hdr, code)
		}
		if s, err := strconv.Atoi(retry); err != nil || s < 1 || s > 60 {
			t.Errorf("Retry-After %q: want 1 to 60 seconds", retry)
		}
		if !strings.Contains(body, "Too many failed logins from your address: try again in") {
			t.Errorf("the 429 page does not say why:\n%s", body)
		}
	}
	// The limit holds for a good token too: the attacker learns nothing.
	if code, _, _ := f.tryLogin(t, attacker, aliceToken); code != http.StatusTooManyRequests {
		t.Fatalf("good token from the limited address: %d, want 429", code)
	}
	if code, _, _ := f.tryLogin(t, other, aliceToken); code != http.StatusSeeOther {
		t.Fatalf("good token from another address: %d, want 303", code)
	}
	f.now.d += time.Minute // one failure's worth refilled
	if code, _, _ := f.tryLogin(t, attacker, guess(20)); code != http.StatusUnauthorized {
		t.Fatalf("bad login after the window: %d, want 401", code)
	}
	if code, _, _ := f.tryLogin(t, attacker, aliceToken); code != http.StatusTooManyRequests {
		t.Fatalf("a second login in the window: %d, want 429", code)
	}
	f.now.d += time.Minute
	if code, _, _ := f.tryLogin(t, attacker, aliceToken); code != http.StatusSeeOther {
		t.Fatalf("good token after the window: %d, want 303", code)
	}
	out := logs.String()
	if n := strings.Count(out, "ui login refused"); n != 4 {
		t.Errorf("%d refusals logged, want 4 (one per failed login):\n%s", n, out)
	}
	if !strings.Contains(out, "client=127.0.0.2") {
		t.Errorf("the refusals do not name the address:\n%s", out)
	}
	if strings.Contains(out, "guessed-token") {
		t.Errorf("a guessed token is in the log:\n%s", out)
	}
}

// Successful logins take nothing from the buckets: many of them in a row
// from one address are all let in.
func TestLogin_SuccessesNotLimited(t *testing.T) {
	f := newFixture(t, false, nil, &webui.Options{LoginLimits: webui.LoginLimits{
		PerAddress: webui.Limit{Burst: 2, Every: time.Hour}, Overall: webui.Limit{Burst: 2, Every: time.Hour}}})
	c := f.from(t, "127.0.0.2")
	for i := range 10 {
		if code, _, _ := f.tryLogin(t, c, agentToken); code != http.StatusSeeOther {
			t.Fatalf("login %d: %d, want 303", i, code)
		}
	}
}

// Failures from many addresses together are limited too: past the overall
// burst nobody logs in until it refills, the page says the server is
// limited.
func TestLogin_OverallLimit(t *testing.T) {
	f := newFixture(t, false, nil, &webui.Options{LoginLimits: webui.LoginLimits{
		PerAddress: webui.Limit{Burst: 2, Every: time.Minute}, Overall: webui.Limit{Burst: 4, Every: 10 * time.Second}}})
	for i := range 4 {
		c := f.from(t, "127.0.0."+strconv.Itoa(10+i/2))
		if code, _, _ := f.tryLogin(t, c, "guess-"+strconv.Itoa(i)); code != http.StatusUnauthorized {
			t.Fatalf("bad login %d: %d, want 401", i, code)
		}
	}
	code, retry, body := f.tryLogin(t, f.from(t, "127.0.0.20"), aliceToken)
	if code != http.StatusTooManyRequests || retry == "" || !strings.Contains(body, "Too many failed logins on this server") {
		t.Fatalf("login with the overall bucket empty: %d, Retry-After %q, want 429 saying the server is limited:\n%s", code, retry, body)
	}
	f.now.d += 10 * time.Second
	if code, _, _ := f.tryLogin(t, f.from(t, "127.0.0.20"), aliceToken); code != http.StatusSeeOther {
		t.Fatalf("login once the overall bucket refilled: %d, want 303", code)
	}
}

// do sends req with c and reads the answer's body.
func do(t *testing.T, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}
