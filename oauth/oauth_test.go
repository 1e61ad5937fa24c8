package oauth_test

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolgate/toolgate/oauth"
	"github.com/toolgate/toolgate/oauth/oauthtest"
)

type Issuer = oauthtest.Issuer

func NewIssuer(t *testing.T) *Issuer { return oauthtest.New(t, resource) }

const resource = "https://tools.example.com/mcp"

func verifier(t *testing.T, is *Issuer, mod func(*oauth.Config)) *oauth.Verifier {
	t.Helper()
	cfg := oauth.Config{Resource: resource, Issuers: []oauth.Issuer{{Issuer: is.URL()}}, Scopes: []string{"tools.call"}}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := oauth.NewVerifier(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerify_Accepts(t *testing.T) {
	is := NewIssuer(t)
	v := verifier(t, is, nil)
	tok := is.Token("k1", jwt.MapClaims{"scope": "tools.call other"})
	id, err := v.Verify(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	if id.Principal != "agent-7" || id.Issuer != is.URL() || id.Subject != "agent-7" || id.ClientID != "ci" {
		t.Fatalf("identity = %+v", id)
	}
	if len(id.TokenSHA256) != 64 || strings.Contains(id.TokenSHA256, tok) {
		t.Fatalf("token hash = %q", id.TokenSHA256)
	}
	// The principal from another claim.
	v = verifier(t, is, func(c *oauth.Config) { c.PrincipalClaim = "client_id" })
	if id, err := v.Verify(context.Background(), tok); err != nil || id.Principal != "ci" {
		t.Fatalf("client_id principal: %+v, %v", id, err)
	}
}

// Every refusal the issue lists: the kind, and the status and header the
// front ends answer with.
func TestVerify_Refusals(t *testing.T) {
	is := NewIssuer(t)
	v := verifier(t, is, nil)
	now := time.Now()
	rsaPub := is.Key("k1").Public().(*rsa.PublicKey)
	der, _ := x509.MarshalPKIXPublicKey(rsaPub)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})

	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": is.URL(), "sub": "x", "aud": resource, "exp": now.Add(time.Hour).Unix(), "scope": "tools.call"})
	hs.Header["kid"] = "k1"
	hsTok, err := hs.SignedString(pubPEM) // the public key's bytes as an HMAC secret
	if err != nil {
		t.Fatal(err)
	}
	none := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"iss": is.URL(), "sub": "x", "aud": resource, "exp": now.Add(time.Hour).Unix(), "scope": "tools.call"})
	none.Header["kid"] = "k1"
	noneTok, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)

	down := NewIssuer(t)
	downURL := down.URL()
	downTok := down.Token("k1", nil)
	down.Close()
	vDown := verifier(t, down, nil)

	cases := []struct {
		name   string
		v      *oauth.Verifier
		token  string
		kind   error
		status int
		header string // a part the WWW-Authenticate header must hold
		reason string // a part of the message
	}{
		{"missing", v, "", oauth.ErrInvalidToken, 401, `error="invalid_token"`, "no bearer token"},
		{"garbage", v, "not.a.jwt", oauth.ErrInvalidToken, 401, `error="invalid_token"`, "not a JWT"},
		{"expired", v, is.Token("k1", jwt.MapClaims{"exp": now.Add(-time.Hour).Unix(), "iat": now.Add(-2 * time.Hour).Unix()}), oauth.ErrInvalidToken, 401, `error="invalid_token"`, "expired"},
		{"not yet valid", v, is.Token("k1", jwt.MapClaims{"nbf": now.Add(time.Hour).Unix()}), oauth.ErrInvalidToken, 401, `error="invalid_token"`, "not valid yet"},
		{"no exp", v, is.Token("k1", jwt.MapClaims{"exp": nil}), oauth.ErrInvalidToken, 401, `error="invalid_token"`, "no expiry"},
		{"wrong audience", v, is.Token("k1", jwt.MapClaims{"aud": "https://other.example.com"}), oauth.ErrInvalidToken, 401, `error="invalid_token"`, "audience"},
		{"audience prefix", v, is.Token("k1", jwt.MapClaims{"aud": "https://tools.example.com"}), oauth.ErrInvalidToken, 401, `error="invalid_token"`, "audience"},
		{"wrong issuer", v, is.Token("k1", jwt.MapClaims{"iss": "https://evil.example.com"}), oauth.ErrInvalidToken, 401, `error="invalid_token"`, "not one this server trusts"},
		{"unknown key id", v, is.Token("k9", nil), oauth.ErrInvalidToken, 401, `error="invalid_token"`, "no key"},
		{"alg none", v, noneTok, oauth.ErrInvalidToken, 401, `error="invalid_token"`, "algorithm"},
		{"HS256 with the RSA public key", v, hsTok, oauth.ErrInvalidToken, 401, `error="invalid_token"`, "algorithm"},
		{"tampered", v, tamper(is.Token("k1", jwt.MapClaims{"scope": "tools.call other"})), oauth.ErrInvalidToken, 401, `error="invalid_token"`, "signature"},
		{"missing scope", v, is.Token("k1", jwt.MapClaims{"scope": "other"}), oauth.ErrInsufficientScope, 403, `error="insufficient_scope"`, `"tools.call"`},
		{"no principal", v, is.Token("k1", jwt.MapClaims{"sub": nil}), oauth.ErrInvalidToken, 401, `error="invalid_token"`, "no sub claim"},
		{"JWKS unreachable", vDown, downTok, oauth.ErrUnavailable, 503, "", downURL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := c.v.Verify(context.Background(), c.token)
			if err == nil {
				t.Fatalf("accepted: %+v", id)
			}
			if !errors.Is(err, c.kind) {
				t.Fatalf("err = %v, want kind %v", err, c.kind)
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Errorf("message %q does not say %q", err, c.reason)
			}
			var e *oauth.Error
			if !errors.As(err, &e) {
				t.Fatalf("not an *oauth.Error: %T", err)
			}
			if c.token == "" {
				err = nil
			}
			status, h := c.v.Challenge(err)
			if status != c.status {
				t.Errorf("status = %d, want %d", status, c.status)
			}
			if c.status != 503 {
				if !strings.HasPrefix(h, `Bearer resource_metadata="https://tools.example.com/.well-known/oauth-protected-resource/mcp"`) || !strings.Contains(h, `scope="tools.call"`) {
					t.Errorf("header %q", h)
				}
				if c.token != "" && !strings.Contains(h, c.header) {
					t.Errorf("header %q lacks %s", h, c.header)
				}
			}
		})
	}
}

func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	var c map[string]any
	b, _ := base64.RawURLEncoding.DecodeString(parts[1])
	json.Unmarshal(b, &c)
	c["sub"] = "admin"
	b, _ = json.Marshal(c)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}

// A key the issuer starts publishing after the first fetch is found: an
// unknown key id fetches the JWKS again.
func TestVerify_KeyRotation(t *testing.T) {
	is := NewIssuer(t)
	v := verifier(t, is, nil)
	if _, err := v.Verify(context.Background(), is.Token("k1", jwt.MapClaims{"scope": "tools.call other"})); err != nil {
		t.Fatal(err)
	}
	is.AddKey("k2")
	time.Sleep(1100 * time.Millisecond) // the refetch of an unknown kid is limited to once a second
	if _, err := v.Verify(context.Background(), is.Token("k2", nil)); err != nil {
		t.Fatalf("rotated key: %v", err)
	}
}

// A verifier made while the issuer is down works once it is up.
func TestVerify_IssuerComesUp(t *testing.T) {
	is := NewIssuer(t)
	var upNow atomic.Bool
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !upNow.Load() {
			http.Error(w, "down", 503)
			return
		}
		is.Handler().ServeHTTP(w, r)
	}))
	defer front.Close()
	v := verifier(t, is, func(c *oauth.Config) { c.Issuers[0].JWKSURL = front.URL + "/.well-known/jwks.json" })
	tok := is.Token("k1", jwt.MapClaims{"scope": "tools.call other"})
	if _, err := v.Verify(context.Background(), tok); !errors.Is(err, oauth.ErrUnavailable) {
		t.Fatalf("down: %v", err)
	}
	upNow.Store(true)
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Fatalf("up: %v", err)
	}
}

func TestConfig_Check(t *testing.T) {
	ok := oauth.Config{Resource: resource, Issuers: []oauth.Issuer{{Issuer: "https://id.example.com"}}}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		name string
		mod  func(*oauth.Config)
		want string
	}{
		{"no resource", func(c *oauth.Config) { c.Resource = "" }, "resource"},
		{"relative resource", func(c *oauth.Config) { c.Resource = "/mcp" }, "resource"},
		{"fragment", func(c *oauth.Config) { c.Resource = resource + "#x" }, "resource"},
		{"no issuers", func(c *oauth.Config) { c.Issuers = nil }, "issuers"},
		{"bad issuer", func(c *oauth.Config) { c.Issuers[0].Issuer = "id.example.com" }, "issuers[0].issuer"},
		{"HS256", func(c *oauth.Config) { c.Algorithms = []string{"HS256"} }, "HS256"},
		{"none", func(c *oauth.Config) { c.Algorithms = []string{"none"} }, "none"},
		{"scope with space", func(c *oauth.Config) { c.Scopes = []string{"a b"} }, "scopes"},
		{"skew", func(c *oauth.Config) { c.Skew = oauth.Duration(time.Hour) }, "skew"},
	}
	for _, b := range bad {
		c := ok
		c.Issuers = slicesClone(ok.Issuers)
		b.mod(&c)
		err := c.Check()
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: err = %v, want one naming %s", b.name, err, b.want)
		}
	}
}

func slicesClone(s []oauth.Issuer) []oauth.Issuer { return append([]oauth.Issuer(nil), s...) }

func TestMetadata(t *testing.T) {
	is := NewIssuer(t)
	v := verifier(t, is, nil)
	if got := oauth.MetadataPath(resource); got != "/.well-known/oauth-protected-resource/mcp" {
		t.Errorf("path = %s", got)
	}
	if got := oauth.MetadataPath("https://tools.example.com"); got != "/.well-known/oauth-protected-resource" {
		t.Errorf("root path = %s", got)
	}
	rec := httptest.NewRecorder()
	v.MetadataHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["resource"] != resource || m["authorization_servers"].([]any)[0] != is.URL() || m["scopes_supported"].([]any)[0] != "tools.call" {
		t.Errorf("metadata = %v", m)
	}
}

func TestIdentity_PolicySubjectsAndApprover(t *testing.T) {
	is := NewIssuer(t)
	v := verifier(t, is, func(c *oauth.Config) {
		c.ApproverScope = "toolgate.approve"
		c.GrantClaims = []string{"groups", "team"}
	})
	id, err := v.Verify(context.Background(), is.Token("k1", jwt.MapClaims{"scope": "tools.call toolgate.approve", "groups": []any{"ops", "dev"}, "team": "red", "roles": []any{"x"}}))
	if err != nil {
		t.Fatal(err)
	}
	if !id.Approver {
		t.Error("the approver scope did not make an approver")
	}
	got := strings.Join(id.PolicySubjects(), " ")
	if want := "scope:tools.call scope:toolgate.approve claim:groups=ops claim:groups=dev claim:team=red"; got != want {
		t.Errorf("subjects = %q, want %q", got, want)
	}
	id, err = v.Verify(context.Background(), is.Token("k1", jwt.MapClaims{"scope": "tools.call other"}))
	if err != nil || id.Approver {
		t.Errorf("a token without the approver scope: %+v, %v", id, err)
	}
}
