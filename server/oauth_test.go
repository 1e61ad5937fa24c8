package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/oauth"
	"github.com/toolgate/toolgate/oauth/oauthtest"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/txn"
)

const oauthResource = "http://toolgate.test"

// oauthFixture is a server that takes the static tokens and the tokens of
// a local issuer. The policy grants state.write:test to agent-7 (a
// token's sub), and to any token holding the scope tools.write.
func oauthFixture(t *testing.T) (*fixture, *oauthtest.Issuer) {
	t.Helper()
	is := oauthtest.New(t, oauthResource)
	cfg := testConfig()
	cfg.OAuth = &oauth.Config{Resource: oauthResource, Issuers: []oauth.Issuer{{Issuer: is.URL()}},
		Scopes: []string{"tools.call"}, ApproverScope: "toolgate.approve"}
	policy, err := capability.NewPolicy(map[string][]capability.Capability{
		"agent":             {capability.MustParse("state.write:test")},
		"agent-7":           {capability.MustParse("state.write:test")},
		"scope:tools.write": {capability.MustParse("state.write:test")},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, cfg, nil, true, func(o *tgruntime.Options) { o.Policy = policy })
	return f, is
}

func (f *fixture) get(t *testing.T, path, token string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.http.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := f.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// A call with the issuer's token runs as the token's principal, and its
// record and audit events name the issuer, the subject and the token's
// hash, never the token.
func TestServer_OAuthTokenRecorded(t *testing.T) {
	f, is := oauthFixture(t)
	tok := is.Token("k1", nil)
	code, _, body := f.post(t, "/v1/tools/test.echo/execute", tok, "application/json", `{"input":{"msg":"via-oauth"}}`)
	if code != 200 || body["state"] != "COMPLETED" {
		t.Fatalf("%d %v", code, body)
	}
	rec, err := f.rt.Execution(context.Background(), body["executionId"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Principal != "agent-7" || rec.Token == nil || rec.Token.Issuer != is.URL() || rec.Token.Subject != "agent-7" ||
		rec.Token.SHA256 != server.HashToken(tok) {
		t.Fatalf("record: principal %q, token %+v", rec.Principal, rec.Token)
	}
	log, err := f.rt.AuditLog(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range log {
		if strings.Contains(string(e.Event), tok) {
			t.Fatal("the token itself is in the audit log")
		}
		if strings.Contains(string(e.Event), rec.ExecutionID) {
			n++
			if !strings.Contains(string(e.Event), `"token":{"iss":"`+is.URL()+`","sub":"agent-7","sha256":"`+rec.Token.SHA256+`"}`) {
				t.Errorf("event without the token: %s", e.Event)
			}
		}
	}
	if n == 0 {
		t.Fatal("no audit events of the call")
	}
	rep, err := f.rt.VerifyRecords(context.Background(), nil)
	if err != nil || rep == nil {
		t.Fatalf("verify: %v", err)
	}
	// The static tokens keep working beside OAuth.
	if code, _, body := f.post(t, "/v1/tools/test.echo/execute", agentToken, "application/json", `{"input":{"msg":"static"}}`); code != 200 {
		t.Fatalf("static token: %d %v", code, body)
	}
}

// The policy grants by scope: a token whose principal the policy does not
// name runs with what its scopes are granted, and is denied without them.
func TestServer_OAuthGrantsByScope(t *testing.T) {
	f, is := oauthFixture(t)
	stranger := jwt.MapClaims{"sub": "stranger", "scope": "tools.call"}
	code, _, body := f.post(t, "/v1/tools/test.echo/execute", is.Token("k1", stranger), "application/json", `{"input":{"msg":"x"}}`)
	if code != 403 {
		t.Fatalf("without the scope's grant: %d %v", code, body)
	}
	stranger["scope"] = "tools.call tools.write"
	code, _, body = f.post(t, "/v1/tools/test.echo/execute", is.Token("k1", stranger), "application/json", `{"input":{"msg":"x"}}`)
	if code != 200 || body["state"] != "COMPLETED" {
		t.Fatalf("with the scope's grant: %d %v", code, body)
	}
}

// Every refusal of a token: the status, the challenge, and nothing runs
// or is recorded.
func TestServer_OAuthRefusals(t *testing.T) {
	f, is := oauthFixture(t)
	down := oauthtest.New(t, oauthResource)
	f2cfg := testConfig()
	f2cfg.OAuth = &oauth.Config{Resource: oauthResource, Issuers: []oauth.Issuer{{Issuer: down.URL()}}}
	f2 := newFixture(t, f2cfg, nil)
	downTok := down.Token("k1", nil)
	down.Close()

	meta := `resource_metadata="` + oauthResource + `/.well-known/oauth-protected-resource"`
	cases := []struct {
		name   string
		f      *fixture
		token  string
		status int
		header string
	}{
		{"no token", f, "", 401, meta},
		{"unknown static token", f, "not-a-token", 401, `error="invalid_token"`},
		{"expired", f, is.Token("k1", jwt.MapClaims{"exp": 1000, "iat": 900}), 401, `error="invalid_token"`},
		{"not yet valid", f, is.Token("k1", jwt.MapClaims{"nbf": 9999999999}), 401, `error="invalid_token"`},
		{"wrong audience", f, is.Token("k1", jwt.MapClaims{"aud": "http://other.test"}), 401, `error="invalid_token"`},
		{"wrong issuer", f, is.Token("k1", jwt.MapClaims{"iss": "http://evil.test"}), 401, `error="invalid_token"`},
		{"unknown key id", f, is.Token("k7", nil), 401, `error="invalid_token"`},
		{"missing scope", f, is.Token("k1", jwt.MapClaims{"scope": "other"}), 403, `error="insufficient_scope"`},
		{"JWKS unreachable", f2, downTok, 503, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(c.f.records(t, txn.Filter{}))
			code, h, body := c.f.post(t, "/v1/tools/test.echo/execute", c.token, "application/json", `{"input":{"msg":"x"}}`)
			if code != c.status {
				t.Fatalf("status %d, want %d: %v", code, c.status, body)
			}
			if c.header != "" && !strings.Contains(h.Get("WWW-Authenticate"), c.header) {
				t.Errorf("WWW-Authenticate %q lacks %s", h.Get("WWW-Authenticate"), c.header)
			}
			if c.status == 503 && h.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
			if after := len(c.f.records(t, txn.Filter{})); after != before {
				t.Errorf("a refused token left %d records", after-before)
			}
		})
	}
}

// The protected-resource metadata names the issuer and the scopes.
func TestServer_OAuthMetadata(t *testing.T) {
	f, is := oauthFixture(t)
	code, _, b := f.get(t, "/.well-known/oauth-protected-resource", "")
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	if m["resource"] != oauthResource || m["authorization_servers"].([]any)[0] != is.URL() {
		t.Fatalf("metadata %s", b)
	}
}

// A token holding the approver scope approves; one without is refused.
func TestServer_OAuthApproverScope(t *testing.T) {
	f, is := oauthFixture(t)
	in, err := f.rt.Propose(context.Background(), tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(`{"msg":"p"}`), Principal: "agent-7"})
	if err != nil {
		t.Fatal(err)
	}
	code, _, body := f.post(t, "/v1/intents/"+in.ID+"/approve", is.Token("k1", nil), "", "")
	if code != 403 {
		t.Fatalf("approve without the approver scope: %d %v", code, body)
	}
	code, _, body = f.post(t, "/v1/intents/"+in.ID+"/approve", is.Token("k1", jwt.MapClaims{"sub": "alice", "scope": "tools.call toolgate.approve"}), "", "")
	if code != 200 {
		t.Fatalf("approve with it: %d %v", code, body)
	}
}
