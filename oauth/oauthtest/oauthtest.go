// Package oauthtest is a local authorization server for tests: RSA keys
// published as a JWKS by a real HTTP server on loopback, and JWT access
// tokens signed with them. It checks nothing; it issues what a test asks
// for, good or bad.
package oauthtest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Issuer is the test authorization server.
type Issuer struct {
	t        testing.TB
	srv      *httptest.Server
	resource string
	mu       sync.Mutex
	keys     map[string]*rsa.PrivateKey // kid -> key, published
}

// New starts an issuer whose tokens name resource as their audience, with
// one published key, "k1". It stops when the test ends.
func New(t testing.TB, resource string) *Issuer {
	t.Helper()
	is := &Issuer{t: t, resource: resource, keys: map[string]*rsa.PrivateKey{}}
	is.srv = httptest.NewServer(http.HandlerFunc(is.serve))
	t.Cleanup(is.srv.Close)
	is.AddKey("k1")
	return is
}

func (is *Issuer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/.well-known/jwks.json" {
		http.NotFound(w, r)
		return
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	var keys []map[string]string
	for kid, k := range is.keys {
		keys = append(keys, map[string]string{
			"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
			"n": base64.RawURLEncoding.EncodeToString(k.N.Bytes()),
			"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(k.E)).Bytes()),
		})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"keys": keys})
}

// URL is the issuer's identifier (its iss) and base URL.
func (is *Issuer) URL() string { return is.srv.URL }

// Handler serves the JWKS, for a test that puts it behind its own server.
func (is *Issuer) Handler() http.Handler { return http.HandlerFunc(is.serve) }

// Close stops the issuer's server: its JWKS can no longer be fetched.
func (is *Issuer) Close() { is.srv.Close() }

// AddKey generates and publishes a key under kid.
func (is *Issuer) AddKey(kid string) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		is.t.Fatal(err)
	}
	is.mu.Lock()
	is.keys[kid] = k
	is.mu.Unlock()
	return k
}

// Key returns the published key kid, or nil.
func (is *Issuer) Key(kid string) *rsa.PrivateKey {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.keys[kid]
}

// Token signs claims with the key kid (an unpublished one if the issuer
// has no such key). The defaults, which claims override (a nil value
// removes one): iss, sub "agent-7", aud the resource, client_id "ci", exp
// in an hour, iat now, scope "tools.call".
func (is *Issuer) Token(kid string, claims jwt.MapClaims) string {
	is.t.Helper()
	now := time.Now()
	c := jwt.MapClaims{
		"iss": is.URL(), "sub": "agent-7", "aud": is.resource, "client_id": "ci",
		"exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "scope": "tools.call",
	}
	for k, v := range claims {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	tok.Header["kid"] = kid
	k := is.Key(kid)
	if k == nil {
		var err error
		if k, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			is.t.Fatal(err)
		}
	}
	s, err := tok.SignedString(k)
	if err != nil {
		is.t.Fatal(err)
	}
	return s
}
