package webui_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/webui"
)

// The UI's own config is checked as the server's config file is: a hash
// that is not 64 hex digits, an empty principal, one that cannot be
// recorded, a token listed twice (in either case) are errors that say
// which token, and no UI. A hash in capitals logs in, as the API accepts
// it from the config file.
func TestNew_ConfigIsChecked(t *testing.T) {
	rt, _ := testkit.Open(t, nil)
	good := server.HashToken(agentToken)
	for name, tc := range map[string]struct {
		cfg  *webui.Config
		want string
	}{
		"no config":       {nil, "a runtime and a config are required"},
		"short hash":      {&webui.Config{Tokens: []webui.Token{{Principal: "agent", SHA256: good[:10]}}}, "tokens[0]: the hash must be 64 hex digits"},
		"the token":       {&webui.Config{Tokens: []webui.Token{{Principal: "agent", SHA256: agentToken}}}, "never the token"},
		"empty principal": {&webui.Config{Tokens: []webui.Token{{Principal: " ", SHA256: good}}}, "tokens[0]: empty principal"},
		"bad principal":   {&webui.Config{Tokens: []webui.Token{{Principal: "a\nb", SHA256: good}}}, "tokens[0]:"},
		"twice": {&webui.Config{Tokens: []webui.Token{{Principal: "agent", SHA256: good},
			{Principal: "alice", SHA256: strings.ToUpper(good)}}}, "tokens[1]: the same token is listed twice"},
	} {
		t.Run(name, func(t *testing.T) {
			u, err := webui.New(rt, tc.cfg, nil)
			if err == nil || u != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, %v; want an error saying %q", u, err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), agentToken) {
				t.Errorf("the error quotes the token: %v", err)
			}
		})
	}

	cfg := &webui.Config{Tokens: []webui.Token{{Principal: "agent", SHA256: strings.ToUpper(good)}}}
	u, err := webui.New(rt, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tokens[0].Principal = "changed" // New copied it
	srv := httptest.NewServer(u)
	defer srv.Close()
	c := srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.PostForm(srv.URL+"/ui/login", url.Values{"token": {agentToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) == 0 {
		t.Errorf("a login with the token of a hash in capitals: %s; want it logged in (303 with the session cookie)", resp.Status)
	}
}

// A notifier's webhook is checked: an http or https URL (not quoted in
// the error: a chat tool's webhook URL is a secret), headers without line
// breaks.
func TestNewNotifier_WebhookIsChecked(t *testing.T) {
	for name, tc := range map[string]struct {
		hook *webui.Webhook
		want string
	}{
		"none":       {nil, "no webhook URL"},
		"no URL":     {&webui.Webhook{}, "no webhook URL"},
		"not http":   {&webui.Webhook{URL: "file:///secret-path"}, "not an http or https URL"},
		"no host":    {&webui.Webhook{URL: "https:///T0/B0"}, "not an http or https URL"},
		"line break": {&webui.Webhook{URL: "https://hooks.example.com/T0", Header: http.Header{"Authorization": {"Bearer x\r\nX-Evil: 1"}}}, "header Authorization holds a line break"},
	} {
		t.Run(name, func(t *testing.T) {
			n, err := webui.NewNotifier(tc.hook, "https://toolgate.example", nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret-path") {
				t.Errorf("NewNotifier: %v; want an error saying %q", err, tc.want)
			}
			if n != nil {
				t.Error("a notifier despite the error")
			}
		})
	}
}
