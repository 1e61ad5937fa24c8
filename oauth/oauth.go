// Package oauth is the resource-server side of OAuth 2.1 for toolgate's HTTP
// front ends (toolgate serve and toolgate mcp --http), as MCP's
// authorization specification asks of an HTTP server that authorizes:
//
//   - protected-resource metadata (RFC 9728) at
//     /.well-known/oauth-protected-resource, naming the authorization
//     servers and the scopes ([Verifier.MetadataHandler]);
//   - challenges: 401 with WWW-Authenticate: Bearer resource_metadata="..."
//     when no token or a bad one comes, 403 with error="insufficient_scope"
//     when the token lacks a scope ([Verifier.Challenge]);
//   - JWT access tokens (the RFC 9068 profile) checked for their signature
//     against the issuer's JWKS (fetched, cached, and fetched again for an
//     unknown key id, so a rotated key is found), iss, aud equal to this
//     server's canonical resource URI (RFC 8707), exp and nbf with a small
//     skew, and an algorithm the configuration allows (never none, never
//     an HMAC: a public key can never be taken for a shared secret).
//
// Opaque tokens (RFC 7662 introspection) are not supported: every
// authorization server MCP clients meet issues JWT access tokens, and
// introspection would add a network round trip to every call.
//
// A token's principal is the value of a configured claim (sub by default).
// The caller's token is never passed on: nothing in toolgate forwards the
// Authorization header, and the gateway calls its upstreams with its own
// configured credentials.
package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// Config is how toolgate accepts tokens of an organisation's authorization
// server. It is the "oauth" object of a serve config file.
type Config struct {
	// Resource is this server's canonical URI (RFC 8707), such as
	// https://tools.example.com or https://tools.example.com/mcp: a
	// token's aud must hold it exactly.
	Resource string `json:"resource"`
	// Issuers are the authorization servers whose tokens are accepted.
	Issuers []Issuer `json:"issuers"`
	// Scopes are the scopes a token must all hold to call at all; the
	// metadata lists them as scopes_supported, and a token without one is
	// answered 403 insufficient_scope.
	Scopes []string `json:"scopes,omitempty"`
	// PrincipalClaim names the claim whose value is the caller's principal:
	// "sub" (the default), "client_id", or another string claim.
	PrincipalClaim string `json:"principalClaim,omitempty"`
	// Skew is the clock difference allowed for exp and nbf: default 30s,
	// at most 5m.
	Skew Duration `json:"skew,omitempty"`
	// Algorithms are the signature algorithms accepted: default RS256,
	// ES256 and EdDSA. Only asymmetric ones may be named.
	Algorithms []string `json:"algorithms,omitempty"`
	// ApproverScope, if set, is the scope that makes a token's holder an
	// approver (as "approver": true does for a static token).
	ApproverScope string `json:"approverScope,omitempty"`
	// GrantClaims name the claims (such as "groups" or "roles") whose
	// values the policy may grant capabilities to, as
	// "claim:NAME=VALUE"; scopes are granted to as "scope:NAME", always.
	GrantClaims []string `json:"grantClaims,omitempty"`
}

// Issuer is one authorization server.
type Issuer struct {
	// Issuer is its identifier, exactly as tokens' iss says it.
	Issuer string `json:"issuer"`
	// JWKSURL is where its signing keys are published: default
	// ISSUER/.well-known/jwks.json.
	JWKSURL string `json:"jwksURL,omitempty"`
}

// Duration is a time.Duration written as a string ("30s") in JSON.
type Duration time.Duration

// UnmarshalJSON reads "30s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`a duration is a string such as "30s"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"30s\"", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes "30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// asymmetric are the algorithms a configuration may allow.
var asymmetric = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// Check reports the first mistake in c, naming the field.
func (c *Config) Check() error {
	if err := checkURI("resource", c.Resource); err != nil {
		return err
	}
	if len(c.Issuers) == 0 {
		return errors.New("issuers: name at least one authorization server")
	}
	for i, is := range c.Issuers {
		if err := checkURI(fmt.Sprintf("issuers[%d].issuer", i), is.Issuer); err != nil {
			return err
		}
		if is.JWKSURL != "" {
			if err := checkURI(fmt.Sprintf("issuers[%d].jwksURL", i), is.JWKSURL); err != nil {
				return err
			}
		}
	}
	for _, a := range c.Algorithms {
		if !slices.Contains(asymmetric, a) {
			return fmt.Errorf("algorithms: %q is not allowed: name asymmetric ones only (%s); none and the HMAC algorithms never are", a, strings.Join(asymmetric, ", "))
		}
	}
	for _, s := range c.Scopes {
		if s == "" || strings.ContainsAny(s, " \"\\") {
			return fmt.Errorf("scopes: %q is not a scope (no spaces, quotes or backslashes)", s)
		}
	}
	if c.Skew < 0 || time.Duration(c.Skew) > 5*time.Minute {
		return errors.New("skew: between 0s and 5m")
	}
	return nil
}

func checkURI(field, s string) error {
	u, err := url.Parse(s)
	if s == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Fragment != "" {
		return fmt.Errorf("%s: %q is not an absolute http(s) URI without a fragment", field, s)
	}
	return nil
}

// Identity is who a verified token says the caller is.
type Identity struct {
	Principal string   // the value of the principal claim
	Issuer    string   // iss
	Subject   string   // sub
	ClientID  string   // client_id, when the token has one
	Scopes    []string // the scope claim, split
	// TokenSHA256 is the hex SHA-256 of the token: what records keep of
	// it, never the token itself.
	TokenSHA256 string
	Expires     time.Time
	// Approver is set when the token holds Config.ApproverScope.
	Approver bool
	// Claims holds the values of Config.GrantClaims the token has.
	Claims map[string][]string
}

// PolicySubjects are the names under which a policy grants this token's
// holder capabilities besides its principal: "scope:S" for each scope,
// and "claim:NAME=VALUE" for each value of each grant claim.
func (id *Identity) PolicySubjects() []string {
	var out []string
	for _, s := range id.Scopes {
		out = append(out, "scope:"+s)
	}
	for _, name := range slices.Sorted(maps.Keys(id.Claims)) {
		for _, v := range id.Claims[name] {
			out = append(out, "claim:"+name+"="+v)
		}
	}
	return out
}

// Failure kinds, for errors.Is on what Verify returns.
var (
	// ErrInvalidToken: the token is missing, malformed, expired, not yet
	// valid, for another audience or issuer, signed by no known key, or
	// under an algorithm not allowed. Answered 401 invalid_token.
	ErrInvalidToken = errors.New("invalid_token")
	// ErrInsufficientScope: a valid token without a required scope.
	// Answered 403 insufficient_scope.
	ErrInsufficientScope = errors.New("insufficient_scope")
	// ErrUnavailable: the issuer's keys could not be fetched, so no token
	// of it can be checked now. Answered 503.
	ErrUnavailable = errors.New("temporarily_unavailable")
)

// Error is a refused token, with why in the caller's terms.
type Error struct {
	Kind   error // ErrInvalidToken, ErrInsufficientScope or ErrUnavailable
	Reason string
}

func (e *Error) Error() string        { return e.Reason }
func (e *Error) Is(target error) bool { return target == e.Kind }

func refuse(kind error, format string, a ...any) *Error {
	return &Error{Kind: kind, Reason: fmt.Sprintf(format, a...)}
}

// Verifier checks bearer tokens under a Config.
type Verifier struct {
	cfg     Config
	algs    []string
	skew    time.Duration
	claim   string
	issuers map[string]*issuerKeys
	now     func() time.Time
}

type issuerKeys struct {
	url string
	mu  sync.Mutex
	kf  keyfunc.Keyfunc // nil until the first fetch succeeds
	ctx context.Context
	hc  *http.Client
}

// Options adjust a Verifier, for tests and embedders.
type Options struct {
	// Client fetches the JWKS; default an http.Client with a 10 s timeout.
	Client *http.Client
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// NewVerifier checks cfg and prepares to fetch each issuer's keys. The
// keys are fetched at the first token of that issuer (and again for an
// unknown key id, at most once a second), so that a server starts while its
// authorization server is down, and answers 503 until it is up. ctx bounds
// the background refreshes: cancel it when the server stops.
func NewVerifier(ctx context.Context, cfg Config, o *Options) (*Verifier, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if o == nil {
		o = &Options{}
	}
	v := &Verifier{cfg: cfg, algs: cfg.Algorithms, skew: time.Duration(cfg.Skew), claim: cfg.PrincipalClaim,
		issuers: map[string]*issuerKeys{}, now: o.Now}
	if len(v.algs) == 0 {
		v.algs = []string{"RS256", "ES256", "EdDSA"}
	}
	if v.skew == 0 {
		v.skew = 30 * time.Second
	}
	if v.claim == "" {
		v.claim = "sub"
	}
	if v.now == nil {
		v.now = time.Now
	}
	hc := o.Client
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	for _, is := range cfg.Issuers {
		u := is.JWKSURL
		if u == "" {
			u = strings.TrimSuffix(is.Issuer, "/") + "/.well-known/jwks.json"
		}
		v.issuers[is.Issuer] = &issuerKeys{url: u, ctx: ctx, hc: hc}
	}
	return v, nil
}

// keys returns the issuer's key function, fetching its JWKS the first time.
func (k *issuerKeys) keys() (keyfunc.Keyfunc, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kf != nil {
		return k.kf, nil
	}
	st, err := jwkset.NewStorageFromHTTP(k.url, jwkset.HTTPClientStorageOptions{
		Client: k.hc, Ctx: k.ctx, HTTPTimeout: 10 * time.Second, RefreshInterval: time.Hour,
	})
	if err != nil {
		return nil, err
	}
	client, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs:          map[string]jwkset.Storage{k.url: st},
		RefreshUnknownKID: rate.NewLimiter(rate.Every(time.Second), 1),
		RateLimitWaitMax:  2 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	kf, err := keyfunc.New(keyfunc.Options{Ctx: k.ctx, Storage: client})
	if err != nil {
		return nil, err
	}
	k.kf = kf
	return kf, nil
}

// Verify checks a bearer token and returns who it names. Its errors are
// *Error, of the kinds above.
func (v *Verifier) Verify(ctx context.Context, token string) (*Identity, error) {
	if token == "" {
		return nil, refuse(ErrInvalidToken, "no bearer token")
	}
	if len(token) > 16<<10 || !utf8.ValidString(token) {
		return nil, refuse(ErrInvalidToken, "the token is not a JWT")
	}
	// Read iss first, unverified, only to pick the issuer's keys; every
	// claim is checked after the signature.
	var peek jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(token, &peek); err != nil {
		return nil, refuse(ErrInvalidToken, "the token is not a JWT")
	}
	keys, ok := v.issuers[peek.Issuer]
	if !ok {
		return nil, refuse(ErrInvalidToken, "the token's issuer %q is not one this server trusts", peek.Issuer)
	}
	kf, err := keys.keys()
	if err != nil {
		return nil, refuse(ErrUnavailable, "the signing keys of %s could not be fetched from %s; try again later", peek.Issuer, keys.url)
	}
	claims := jwt.MapClaims{}
	p := jwt.NewParser(
		jwt.WithValidMethods(v.algs),
		jwt.WithIssuer(peek.Issuer),
		jwt.WithAudience(v.cfg.Resource),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(v.skew),
		jwt.WithTimeFunc(v.now),
		jwt.WithIssuedAt(),
	)
	if _, err := p.ParseWithClaims(token, claims, kf.KeyfuncCtx(ctx)); err != nil {
		return nil, v.parseError(err, peek.Issuer)
	}
	id := &Identity{
		Issuer:   peek.Issuer,
		Subject:  claimString(claims, "sub"),
		ClientID: claimString(claims, "client_id"),
		Scopes:   scopes(claims),
	}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		id.Expires = exp.Time
	}
	id.Principal = claimString(claims, v.claim)
	if id.Principal == "" {
		return nil, refuse(ErrInvalidToken, "the token has no %s claim to name its principal", v.claim)
	}
	if len(id.Subject) > 256 || !printable(id.Subject) || len(id.Issuer) > 256 {
		return nil, refuse(ErrInvalidToken, "the token's iss or sub is not printable text of at most 256 bytes")
	}
	if len(id.Principal) > 256 || !printable(id.Principal) {
		return nil, refuse(ErrInvalidToken, "the token's %s claim is not a principal (printable text of at most 256 bytes)", v.claim)
	}
	id.Approver = v.cfg.ApproverScope != "" && slices.Contains(id.Scopes, v.cfg.ApproverScope)
	for _, name := range v.cfg.GrantClaims {
		var vals []string
		switch x := claims[name].(type) {
		case string:
			vals = []string{x}
		case []any:
			for _, e := range x {
				if s, ok := e.(string); ok {
					vals = append(vals, s)
				}
			}
		}
		if len(vals) > 0 {
			if id.Claims == nil {
				id.Claims = map[string][]string{}
			}
			id.Claims[name] = vals
		}
	}
	for _, s := range v.cfg.Scopes {
		if !slices.Contains(id.Scopes, s) {
			return id, refuse(ErrInsufficientScope, "the token lacks the scope %q", s)
		}
	}
	sum := sha256.Sum256([]byte(token))
	id.TokenSHA256 = hex.EncodeToString(sum[:])
	return id, nil
}

func (v *Verifier) parseError(err error, iss string) *Error {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return refuse(ErrInvalidToken, "the token expired")
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return refuse(ErrInvalidToken, "the token is not valid yet")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return refuse(ErrInvalidToken, "the token is not for this server: its audience does not include %s", v.cfg.Resource)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return refuse(ErrInvalidToken, "the token's issuer is not %s", iss)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return refuse(ErrInvalidToken, "the token has no expiry (exp)")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid) && strings.Contains(err.Error(), "signing method"):
		return refuse(ErrInvalidToken, "the token's algorithm is not one this server allows (%s)", strings.Join(v.algs, ", "))
	case errors.Is(err, keyfunc.ErrKeyfunc), errors.Is(err, jwt.ErrTokenUnverifiable):
		return refuse(ErrInvalidToken, "the token is signed by no key %s publishes", iss)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return refuse(ErrInvalidToken, "the token's signature does not verify")
	case errors.Is(err, jwt.ErrTokenMalformed):
		return refuse(ErrInvalidToken, "the token is not a JWT")
	}
	return refuse(ErrInvalidToken, "the token is not valid")
}

func claimString(c jwt.MapClaims, name string) string {
	s, _ := c[name].(string)
	return s
}

// scopes reads the scope claim: a space-separated string (RFC 9068), or a
// list (scp, as some servers write it).
func scopes(c jwt.MapClaims) []string {
	if s, ok := c["scope"].(string); ok {
		return strings.Fields(s)
	}
	var out []string
	for _, name := range []string{"scope", "scp"} {
		if l, ok := c[name].([]any); ok {
			for _, x := range l {
				if s, ok := x.(string); ok {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

// MetadataPath is where the protected-resource metadata is served for a
// resource URI: /.well-known/oauth-protected-resource, followed by the
// resource's path when it has one (RFC 9728 §3.1).
func MetadataPath(resource string) string {
	u, err := url.Parse(resource)
	p := "/.well-known/oauth-protected-resource"
	if err == nil && u.Path != "" && u.Path != "/" {
		p += u.Path
	}
	return p
}

// MetadataURL is the absolute URL of the metadata, for the challenges.
func (v *Verifier) MetadataURL() string {
	u, _ := url.Parse(v.cfg.Resource)
	return u.Scheme + "://" + u.Host + MetadataPath(v.cfg.Resource)
}

// Metadata is the RFC 9728 document.
func (v *Verifier) Metadata() map[string]any {
	servers := make([]string, 0, len(v.cfg.Issuers))
	for _, is := range v.cfg.Issuers {
		servers = append(servers, is.Issuer)
	}
	m := map[string]any{
		"resource":                 v.cfg.Resource,
		"authorization_servers":    servers,
		"bearer_methods_supported": []string{"header"},
	}
	if len(v.cfg.Scopes) > 0 {
		m["scopes_supported"] = v.cfg.Scopes
	}
	return m
}

// MetadataHandler serves the metadata document.
func (v *Verifier) MetadataHandler() http.Handler {
	b, _ := json.Marshal(v.Metadata())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Write(b)
	})
}

// Challenge is the WWW-Authenticate value for a refusal of err (nil: no
// token came), and the HTTP status to answer with.
func (v *Verifier) Challenge(err error) (status int, header string) {
	h := fmt.Sprintf(`Bearer resource_metadata=%q`, v.MetadataURL())
	if len(v.cfg.Scopes) > 0 {
		h += fmt.Sprintf(`, scope=%q`, strings.Join(v.cfg.Scopes, " "))
	}
	var e *Error
	switch {
	case err == nil:
		return http.StatusUnauthorized, h
	case errors.As(err, &e) && e.Kind == ErrInsufficientScope:
		return http.StatusForbidden, h + `, error="insufficient_scope", error_description=` + quote(e.Reason)
	case errors.As(err, &e) && e.Kind == ErrUnavailable:
		return http.StatusServiceUnavailable, ""
	case errors.As(err, &e):
		return http.StatusUnauthorized, h + `, error="invalid_token", error_description=` + quote(e.Reason)
	}
	return http.StatusUnauthorized, h + `, error="invalid_token"`
}

// SetChallenge writes the answer to a refused bearer token into h
// (WWW-Authenticate; Retry-After when the issuer's keys cannot be fetched)
// and returns the status to answer with: Challenge's, for the front ends.
// v may be nil, a server of static tokens only: 401 with a challenge that
// names no metadata (error="invalid_token" when a token came, err != nil).
func (v *Verifier) SetChallenge(h http.Header, err error) int {
	if v == nil {
		c := `Bearer realm="toolgate"`
		if err != nil {
			c += `, error="invalid_token"`
		}
		h.Set("WWW-Authenticate", c)
		return http.StatusUnauthorized
	}
	status, c := v.Challenge(err)
	if c != "" {
		h.Set("WWW-Authenticate", c)
	}
	if status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "5")
	}
	return status
}

// quote writes s as an RFC 7230 quoted-string, dropping what it cannot hold.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
