package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/oauth"
)

func invalidParams(msg string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
}

func internalError(msg string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: msg}
}

// Run serves one session over t until the client disconnects or ctx ends.
// An *sdk.StdioTransport or *sdk.IOTransport is served by this package's
// own reading of its lines (see lineTransport): the JSON-RPC id of each
// tools/call is recorded in its call id (see "Call ids" in the package
// documentation), and a line that is not a message is answered with the
// protocol's error rather than ending the session. Any other transport is
// served as it is. An invocation still running when the client leaves is
// canceled, as notifications/cancelled would cancel it: nobody is left to
// receive its result. It ends ABORTED, then ROLLED_BACK, and is recorded
// (runtime.Runtime.Close waits for it). toolgate serve's HTTP API does the
// opposite, because there a retry with the same Idempotency-Key can still
// collect the result.
func (s *Server) Run(ctx context.Context, t sdk.Transport) error {
	session := randomHex(8)
	switch tt := t.(type) {
	case *sdk.StdioTransport:
		t = &lineTransport{s: s, r: os.Stdin, w: nopWriteCloser{os.Stdout}, session: session, max: lineMax(tt.MaxLineLength)}
	case *sdk.IOTransport:
		t = &lineTransport{s: s, r: tt.Reader, w: tt.Writer, session: session, max: lineMax(tt.MaxLineLength)}
	}
	return s.sdk.Run(ctx, t)
}

func lineMax(n int) int {
	switch {
	case n == 0:
		return sdk.DefaultMaxLineLength
	case n < 0:
		return 1 << 62
	}
	return n
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// HTTPOptions configure Handler. A nil *HTTPOptions means the zero value.
type HTTPOptions struct {
	// Authenticate maps a bearer token to the principal its calls run as;
	// a token it maps to "" is refused like one it does not know (401). Nil
	// means no authentication: every call runs as Options.Principal.
	Authenticate func(token string) (principal string, ok bool)
	// OAuth, if set, checks a bearer token that Authenticate does not know
	// (or every token, without Authenticate) as an OAuth 2.1 access token:
	// its principal, and what the policy grants its scopes and claims, are
	// the call's, and the call's records name its issuer, subject and
	// hash. A refused token is answered with the challenge the MCP
	// authorization specification asks for (see package oauth). Serve the
	// verifier's MetadataHandler at oauth.MetadataPath beside Handler.
	OAuth *oauth.Verifier
	// MaxBodyBytes bounds a request's body; default 4 MiB. A larger one is
	// answered 413.
	MaxBodyBytes int64
	// SessionTimeout closes a session idle this long; default 30 minutes.
	SessionTimeout time.Duration
}

// protocolStateless is the first protocol version served without sessions.
const protocolStateless = "2026-07-28"

// Handler serves streamable HTTP at any path it is mounted on, for clients
// of both protocol generations: a request that names protocol 2026-07-28 or
// later (MCP-Protocol-Version) and no session goes to a stateless handler,
// everything else to a stateful one (sessions, 2025-11-25 and earlier).
// DNS-rebinding protection stays on: a request that reached a loopback
// address with a Host header that is not loopback is refused (403). A
// JSON-RPC batch is refused (400), as over stdio.
func (s *Server) Handler(opts *HTTPOptions) http.Handler {
	var o HTTPOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = sdk.DefaultMaxRequestBodyBytes
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = 30 * time.Minute
	}
	get := func(*http.Request) *sdk.Server { return s.sdk }
	stateful := sdk.NewStreamableHTTPHandler(get, &sdk.StreamableHTTPOptions{
		SessionTimeout: o.SessionTimeout, MaxRequestBodyBytes: o.MaxBodyBytes, Logger: s.opts.Logger,
	})
	stateless := sdk.NewStreamableHTTPHandler(get, &sdk.StreamableHTTPOptions{
		Stateless: true, PropagateRequestCancellation: true, MaxRequestBodyBytes: o.MaxBodyBytes, Logger: s.opts.Logger,
	})
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		session := r.Header.Get("Mcp-Session-Id")
		next := http.Handler(stateful)
		if session == "" && r.Header.Get("Mcp-Protocol-Version") >= protocolStateless {
			next, session = stateless, randomHex(8)
		}
		if r.Method == http.MethodPost && r.Body != nil {
			body, err := io.ReadAll(io.LimitReader(r.Body, o.MaxBodyBytes+1))
			r.Body.Close()
			switch {
			case err != nil:
				http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
				return
			case int64(len(body)) > o.MaxBodyBytes:
				http.Error(w, fmt.Sprintf("request body exceeds %d bytes", o.MaxBodyBytes), http.StatusRequestEntityTooLarge)
				return
			}
			body = bytes.TrimSpace(body)
			if len(body) > 0 && body[0] == '[' {
				// The SDK takes a batch from a client of a protocol before
				// 2025-06-18, and its tools/calls would go untagged: refused,
				// as over stdio.
				refuse(w, &wireRefusal{code: jsonrpc.CodeInvalidRequest, msg: "invalid request: batches are not supported; send one message per request"})
				return
			}
			tagged, err := s.tagMessage(body, session)
			var rf *wireRefusal
			if errors.As(err, &rf) {
				refuse(w, rf)
				return
			}
			if tagged != nil {
				body = tagged
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		next.ServeHTTP(w, r)
	})
	if o.Authenticate != nil || o.OAuth != nil {
		// The token is checked here, for the challenges the
		// specification asks for; the SDK's middleware then takes what was
		// found, so that its sessions stay bound to their user.
		inner := auth.RequireBearerToken(func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
			if ti, ok := r.Context().Value(verifiedKey{}).(*auth.TokenInfo); ok {
				return ti, nil
			}
			return nil, auth.ErrInvalidToken
		}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
				challenge(w, o.OAuth, nil, "no bearer token")
				return
			}
			var ti *auth.TokenInfo
			if o.Authenticate != nil {
				// A token that maps to no principal is refused: its
				// calls would run as Options.Principal.
				if p, ok := o.Authenticate(token); ok && p != "" {
					ti = &auth.TokenInfo{UserID: p}
				}
			}
			if ti == nil && o.OAuth != nil {
				id, err := o.OAuth.Verify(r.Context(), token)
				if err != nil {
					challenge(w, o.OAuth, err, err.Error())
					return
				}
				ti = &auth.TokenInfo{UserID: id.Principal, Scopes: id.Scopes, Expiration: id.Expires,
					Extra: map[string]any{identityKey: id}}
			}
			if ti == nil {
				challenge(w, o.OAuth, &oauth.Error{Kind: oauth.ErrInvalidToken, Reason: "unknown token"}, "unknown token")
				return
			}
			inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), verifiedKey{}, ti)))
		})
	}
	return h
}

type verifiedKey struct{}

// identityKey holds an OAuth token's *oauth.Identity in auth.TokenInfo.Extra.
const identityKey = "io.toolgate/identity"

// challenge refuses a request's token: 401 with WWW-Authenticate (naming
// the protected-resource metadata under OAuth), 403 for a missing scope,
// 503 when the issuer's keys cannot be fetched now.
func challenge(w http.ResponseWriter, v *oauth.Verifier, err error, msg string) {
	http.Error(w, msg, v.SetChallenge(w.Header(), err))
}

// refuse answers a POST the SDK is not given, with the protocol's error:
// 400 for an invalid request, else 200 (an answer to the request, by its
// id).
func refuse(w http.ResponseWriter, r *wireRefusal) {
	id := r.id
	if !validID(id) {
		id = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	if r.code == jsonrpc.CodeInvalidRequest {
		w.WriteHeader(http.StatusBadRequest)
	}
	w.Write(mustJSON(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": r.code, "message": r.msg}}))
}
