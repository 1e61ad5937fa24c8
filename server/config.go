package server

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/toolgate/toolgate/oauth"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/ratelimit"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// Config is the server's configuration file (JSON):
//
//	{
//	  "tokens": [
//	    {"principal": "agent-1", "sha256": "<hex SHA-256 of the token>"},
//	    {"principal": "alice",   "sha256": "<...>", "approver": true}
//	  ],
//	  "rateLimits": {"perPrincipal": {"perSecond": 50, "burst": 100},
//	                 "perTool":      {"perSecond": 200, "burst": 400}},
//	  "maxConcurrent": 64,
//	  "maxBodyBytes": 5242880,
//	  "idempotencyTTL": "24h",
//	  "notify": {"baseURL": "https://toolgate.example.com",
//	             "webhook": {"url": "https://hooks.example.com/T0/B0",
//	                         "headers": {"Authorization": "TOOLGATE_WEBHOOK_AUTH"}}}
//	}
//
// Tokens are stored as their SHA-256, never in clear: `toolgate serve
// --hash-token` prints the hash of a token read from stdin. A webhook's
// headers name environment variables, never their values: a secret stays
// out of the file.
type Config struct {
	Tokens        []TokenConfig `json:"tokens"`
	RateLimits    RateLimits    `json:"rateLimits"`
	MaxConcurrent int           `json:"maxConcurrent"` // executions at once; default 64
	MaxBodyBytes  int64         `json:"maxBodyBytes"`  // default 5 MiB
	ReadTimeout   Duration      `json:"readTimeout"`   // default 10s
	WriteTimeout  Duration      `json:"writeTimeout"`  // default 5m (an execution's answer)
	IdleTimeout   Duration      `json:"idleTimeout"`   // default 60s
	GracePeriod   Duration      `json:"gracePeriod"`   // default 10s
	// IdempotencyTTL is how long an Idempotency-Key holds its call's
	// result (the runtime's Options.IdempotencyTTL); default 24h. It is
	// fixed when a key is first used: a key written under another TTL keeps
	// its own expiry.
	IdempotencyTTL Duration `json:"idempotencyTTL"`
	// Notify says whom to tell when an intent waits for approval.
	Notify NotifyConfig `json:"notify"`
	// OAuth, if set, also accepts OAuth 2.1 access tokens of the
	// organisation's authorization server (package oauth): a bearer token
	// that is not one of Tokens is checked as a JWT access token, and the
	// server publishes its protected-resource metadata.
	OAuth *oauth.Config `json:"oauth,omitempty"`
}

// NotifyConfig is where new pending intents are announced.
type NotifyConfig struct {
	// BaseURL is the address people reach toolgate serve at (through a
	// reverse proxy, say), for the links in notifications; "" means
	// http://ADDR of the listener.
	BaseURL string `json:"baseURL"`
	// Webhook, if set, receives one POST per new pending intent.
	Webhook *WebhookConfig `json:"webhook"`
}

// WebhookConfig is an HTTP endpoint that receives a JSON POST per new
// pending intent (a chat tool's incoming webhook, say).
type WebhookConfig struct {
	URL string `json:"url"` // http or https
	// Headers maps a header name to the name of the environment variable
	// that holds its value (a secret, such as an Authorization header).
	Headers map[string]string `json:"headers"`
}

var (
	envNameRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

func (n *NotifyConfig) check() error {
	if n.BaseURL != "" {
		u, err := url.Parse(n.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("notify.baseURL: %q is not an http or https URL", n.BaseURL)
		}
	}
	w := n.Webhook
	if w == nil {
		return nil
	}
	u, err := url.Parse(w.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("notify.webhook.url: %q is not an http or https URL", w.URL)
	}
	for h, env := range w.Headers {
		if !headerNameRE.MatchString(h) {
			return fmt.Errorf("notify.webhook.headers: %q is not a header name", h)
		}
		if !envNameRE.MatchString(env) {
			return fmt.Errorf("notify.webhook.headers.%s: %q is not the name of an environment variable (the file names the variable that holds the value, never the value)", h, env)
		}
	}
	return nil
}

// ResolveHeaders reads the webhook's header values from the environment
// (getenv is os.LookupEnv in toolgate serve). A variable that is not set,
// or is empty, is an error: a webhook is never called without the
// credentials it was configured with.
func (w *WebhookConfig) ResolveHeaders(getenv func(string) (string, bool)) (http.Header, error) {
	h := http.Header{}
	for name, env := range w.Headers {
		v, ok := getenv(env)
		if !ok || v == "" {
			return nil, fmt.Errorf("notify.webhook.headers.%s: the environment variable %s is not set", name, env)
		}
		if strings.ContainsAny(v, "\r\n") {
			return nil, fmt.Errorf("notify.webhook.headers.%s: the environment variable %s holds a line break", name, env)
		}
		h.Set(name, v)
	}
	return h, nil
}

// TokenConfig maps one bearer token to a principal.
type TokenConfig struct {
	Principal string `json:"principal"`
	SHA256    string `json:"sha256"`   // hex SHA-256 of the token
	Approver  bool   `json:"approver"` // may approve intents
	// Identity is set for a request made with an OAuth access token: who
	// the token names (never in a config file).
	Identity *oauth.Identity `json:"-"`
}

// RateLimits are token buckets per principal and per tool; zero means no
// limit. A tool's bucket counts its direct calls and the executions of its
// approved intents alike. They are the MCP server's too (mcp.RateLimits is the same type):
// toolgate mcp reads them from the same config file.
type RateLimits = ratelimit.Limits

// Rate is a token bucket.
type Rate = ratelimit.Rate

// Duration is a time.Duration written as a string such as "10s".
type Duration time.Duration

// UnmarshalJSON parses "10s", "1m30s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"10s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("%q is not a duration such as \"10s\"", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the string form.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// LoadConfig reads and checks a configuration file. Unknown fields, a
// token hash that is not 64 hex digits, a duplicate hash and an empty
// principal are errors.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("server config: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	var c Config
	if err := d.Decode(&c); err != nil {
		return nil, fmt.Errorf("server config %s: %w", path, err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("server config %s: %w", path, err)
	}
	return &c, nil
}

func (c *Config) check() error {
	seen := map[string]bool{}
	for i, t := range c.Tokens {
		h := strings.ToLower(t.SHA256)
		if _, err := hex.DecodeString(h); err != nil || len(h) != 64 {
			return fmt.Errorf("tokens[%d]: sha256 must be 64 hex digits (the SHA-256 of the token, never the token)", i)
		}
		if strings.TrimSpace(t.Principal) == "" {
			return fmt.Errorf("tokens[%d]: empty principal", i)
		}
		if err := tgruntime.CheckIdentity(t.Principal, ""); err != nil {
			return fmt.Errorf("tokens[%d]: %v", i, strings.TrimPrefix(err.Error(), "runtime: "))
		}
		if seen[h] {
			return fmt.Errorf("tokens[%d]: the same token is listed twice", i)
		}
		seen[h] = true
		c.Tokens[i].SHA256 = h
	}
	if err := c.RateLimits.Check(); err != nil {
		return err
	}
	if c.OAuth != nil {
		if err := c.OAuth.Check(); err != nil {
			return fmt.Errorf("oauth.%v", err)
		}
	}
	if c.MaxConcurrent < 0 || c.MaxBodyBytes < 0 {
		return errors.New("maxConcurrent and maxBodyBytes must not be negative")
	}
	return c.Notify.check()
}

func (c *Config) fill() {
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = 64
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 5 << 20
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = Duration(10 * time.Second)
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = Duration(5 * time.Minute)
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = Duration(time.Minute)
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = Duration(10 * time.Second)
	}
}

// ApplyTo sets the runtime options the config file holds (the
// idempotency TTL) on o, which toolgate serve then opens its runtime with.
// A zero setting leaves o's value, so the runtime's default applies.
func (c *Config) ApplyTo(o *tgruntime.Options) {
	if c.IdempotencyTTL > 0 {
		o.IdempotencyTTL = time.Duration(c.IdempotencyTTL)
	}
}

// HashToken returns the hex SHA-256 of a token, as the config stores it.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Authenticate returns the configured token that token is, comparing its
// hash with every configured one in constant time: the web UI's login
// checks a token as the API does.
func (c *Config) Authenticate(token string) (TokenConfig, bool) { return c.authenticate(token) }

// authenticate finds the principal of a bearer token, comparing its hash
// with every configured one in constant time (no early exit).
func (c *Config) authenticate(token string) (TokenConfig, bool) {
	sum := sha256.Sum256([]byte(token))
	got := []byte(hex.EncodeToString(sum[:]))
	var found TokenConfig
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
