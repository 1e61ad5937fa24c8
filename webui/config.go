package webui

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	tgruntime "github.com/toolgate/toolgate/runtime"
)

// Config is who may log in to the UI. It is the UI's own: `toolgate
// serve` builds it from its config file's tokens, the HTTP API's, so that
// a token logs in to the UI as the principal it calls the API as.
type Config struct {
	// Tokens are the tokens that log in, each under its principal.
	Tokens []Token
}

// Token is one token that logs in: stored as its SHA-256, never in clear.
type Token struct {
	Principal string // whom the token's holder acts as; a principal of the policy
	SHA256    string // the hex SHA-256 of the token (64 digits, either case)
	// Approver lets the token's holder decide intents and see every intent
	// and execution and the audit page; any other holder sees only its own
	// intents and executions.
	Approver bool
}

// check returns c with its hashes in lowercase, or what is wrong with it.
func (c *Config) check() (Config, error) {
	out := Config{Tokens: make([]Token, len(c.Tokens))}
	seen := map[string]bool{}
	for i, t := range c.Tokens {
		h := strings.ToLower(t.SHA256)
		if _, err := hex.DecodeString(h); err != nil || len(h) != 64 {
			return Config{}, fmt.Errorf("webui: tokens[%d]: the hash must be 64 hex digits (the SHA-256 of the token, never the token)", i)
		}
		if strings.TrimSpace(t.Principal) == "" {
			return Config{}, fmt.Errorf("webui: tokens[%d]: empty principal", i)
		}
		if err := tgruntime.CheckIdentity(t.Principal, ""); err != nil {
			return Config{}, fmt.Errorf("webui: tokens[%d]: %s", i, tgruntime.Message(err))
		}
		if seen[h] {
			return Config{}, fmt.Errorf("webui: tokens[%d]: the same token is listed twice", i)
		}
		seen[h] = true
		t.SHA256 = h
		out.Tokens[i] = t
	}
	return out, nil
}

// authenticate returns the configured token that token is, comparing its
// hash with every configured one in constant time (no early exit), as the
// HTTP API checks a bearer token.
func (c *Config) authenticate(token string) (Token, bool) {
	sum := sha256.Sum256([]byte(token))
	got := []byte(hex.EncodeToString(sum[:]))
	var found Token
	ok := 0
	for _, t := range c.Tokens {
		eq := subtle.ConstantTimeCompare(got, []byte(t.SHA256))
		if eq == 1 {
			found = t
		}
		ok |= eq
	}
	return found, ok == 1
}

// Webhook is where a [Notifier] posts: an http or https URL, and the
// headers each post carries (their values resolved: an Authorization
// header's secret included). `toolgate serve` builds it from its config
// file's notify.webhook, whose headers name environment variables.
type Webhook struct {
	URL    string
	Header http.Header
}

// check reports what is wrong with w.
func (w *Webhook) check() error {
	if w.URL == "" {
		return fmt.Errorf("webui: no webhook URL")
	}
	u, err := url.Parse(w.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("webui: the webhook URL is not an http or https URL") // not quoted: it can be a secret
	}
	for name, vs := range w.Header {
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n") {
				return fmt.Errorf("webui: the webhook header %s holds a line break", name)
			}
		}
	}
	return nil
}
