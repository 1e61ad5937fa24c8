package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/oauth"
	"github.com/toolgate/toolgate/oauth/oauthtest"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// Cedar policies see an OAuth token's claims over HTTP: a deploy message
// is forbidden unless the token's team claim holds release; the denial
// names the policy (code cedar_forbidden) and nothing runs.
func TestServer_CedarSeesTokenClaims(t *testing.T) {
	dir := t.TempDir()
	src := `@id("deploy-release-only")
forbid(principal, action in Toolgate::Action::"test.echo", resource)
when { context.input.msg == "deploy" }
unless { principal.claims has team && principal.claims.team.contains("release") };
`
	if err := os.WriteFile(filepath.Join(dir, "deploy.cedar"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	pj := `{"version": 1, "principals": {"agent": ["state.write:test"], "agent-7": ["state.write:test"]}, "cedar": ["deploy.cedar"]}`
	if err := os.WriteFile(filepath.Join(dir, "policy.json"), []byte(pj), 0o600); err != nil {
		t.Fatal(err)
	}
	policy, err := capability.LoadPolicy(filepath.Join(dir, "policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	is := oauthtest.New(t, oauthResource)
	cfg := testConfig()
	cfg.OAuth = &oauth.Config{Resource: oauthResource, Issuers: []oauth.Issuer{{Issuer: is.URL()}},
		Scopes: []string{"tools.call"}, GrantClaims: []string{"team"}}
	f := newFixtureWith(t, cfg, nil, true, func(o *tgruntime.Options) { o.Policy = policy })

	release := is.Token("k1", jwt.MapClaims{"team": []string{"release", "ops"}})
	code, _, body := f.post(t, "/v1/tools/test.echo/execute", release, "application/json", `{"input":{"msg":"deploy"}}`)
	if code != 200 || body["state"] != "COMPLETED" {
		t.Fatalf("a release token: %d %v", code, body)
	}
	other := is.Token("k1", jwt.MapClaims{"team": "web"})
	code, _, body = f.post(t, "/v1/tools/test.echo/execute", other, "application/json", `{"input":{"msg":"deploy"}}`)
	if detail, _ := body["detail"].(string); code != 403 || body["code"] != "cedar_forbidden" || !strings.HasPrefix(detail, "denied: test.echo: forbidden by Cedar policy deploy-release-only") {
		t.Fatalf("another team's token: %d %v", code, body)
	}
	if code, _, body := f.post(t, "/v1/tools/test.echo/execute", other, "application/json", `{"input":{"msg":"status"}}`); code != 200 {
		t.Fatalf("another message: %d %v", code, body)
	}
}
