// Package server is toolgate's one HTTP execution boundary: remote callers
// run tools through it, authenticated by bearer tokens that map to
// principals, under the runtime's policy, rate limits and a cap on
// concurrent executions. Every answer that is not a result is an RFC 9457
// problem document; nothing a caller sends can make it print a stack.
//
// It is public so that an embedder can mount toolgate's HTTP API in its own
// program, next to its own routes or the MCP front end:
//
//	srv, err := server.New(rt, cfg, nil)
//	mux.Handle("/v1/", srv.Handler())
//
// `toolgate serve` is this package with a listener, a config file and a
// graceful shutdown ([Server.Serve], [Server.Shutdown]).
//
// The server does not own its runtime: the caller opened it, and the caller
// closes it, after [Server.Serve] or [Server.Shutdown] has returned (or
// keeps using it: it is still open). What the server stops at its shutdown
// is only what it started, the calls its requests made.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"path"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/ratelimit"
	"github.com/toolgate/toolgate/lifecycle"
	"github.com/toolgate/toolgate/oauth"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// Server serves the runtime over HTTP.
type Server struct {
	rt    *tgruntime.Runtime
	cfg   Config
	slots chan struct{}

	log         *slog.Logger
	storeLogged atomic.Bool // the store's failure is logged, once

	limits *ratelimit.Limiter

	mu      sync.Mutex
	closing bool           // Shutdown began: no more calls are admitted
	calls   sync.WaitGroup // the calls admitted (admit), until they are answered
	running atomic.Int64   // how many calls is calls

	// stopCalls ends (with runtime.ErrClosed as its cause) when Shutdown's
	// grace period ends: the calls still running then are stopped.
	stopCalls  context.Context
	abortCalls context.CancelCauseFunc

	handler http.Handler

	oauth     *oauth.Verifier    // nil without an oauth config
	stopOAuth context.CancelFunc // ends the verifier's key refreshes

	bodies chan struct{} // the request bodies read or held at once (withBody)
}

// Options are the server's telemetry providers (nil: none) and its log.
type Options struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Logger receives what the server's operator must act on: a store
	// that failed (once, with its cause), an invocation that could not be
	// run. nil means slog.Default().
	Logger *slog.Logger
	// RequestLog, if set, receives one line per request once it is
	// answered (level Info, message "request"): method, path, principal,
	// status, executionId, duration. nil means no request log.
	RequestLog *slog.Logger
	// Handlers are served beside the API, each under its path prefix
	// (ending in "/", such as "/ui/"; the prefix without its slash too),
	// ahead of the API's routes and path rules, with the API's spans and
	// request log (see Instrument; NotePrincipal names a request's
	// principal in the log): toolgate serve mounts its web UI there.
	Handlers map[string]http.Handler
}

// New returns a server for rt with cfg (copied; defaults filled).
func New(rt *tgruntime.Runtime, cfg *Config, opts *Options) (*Server, error) {
	c := Config{}
	if cfg != nil {
		c = *cfg
		c.Tokens = append([]TokenConfig(nil), cfg.Tokens...)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	c.fill()
	s := &Server{rt: rt, cfg: c, slots: make(chan struct{}, c.MaxConcurrent), bodies: make(chan struct{}, 2*c.MaxConcurrent),
		limits: ratelimit.New(c.RateLimits), log: slog.Default()}
	s.stopCalls, s.abortCalls = context.WithCancelCause(context.Background())
	if opts != nil && opts.Logger != nil {
		s.log = opts.Logger
	}
	s.stopOAuth = func() {}
	if c.OAuth != nil {
		ctx, cancel := context.WithCancel(context.Background())
		v, err := oauth.NewVerifier(ctx, *c.OAuth, nil)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("oauth.%v", err)
		}
		s.oauth, s.stopOAuth = v, cancel
	}
	mux := http.NewServeMux()
	routes := []struct {
		method, path string
		h            http.HandlerFunc
	}{
		{http.MethodPost, "/v1/tools/{name}/execute", s.auth(s.withBody(s.execute))},
		{http.MethodPost, "/tools/{name}/execute", s.auth(s.withBody(s.execute))},
		{http.MethodGet, "/v1/tools", s.auth(s.limited(s.listTools))},
		{http.MethodGet, "/v1/tools/{name}", s.auth(s.limited(s.getTool))},
		{http.MethodGet, "/v1/executions/{id}", s.auth(s.limited(s.getExecution))},
		{http.MethodPost, "/v1/intents", s.auth(s.limited(s.withBody(s.propose)))},
		{http.MethodPost, "/v1/intents/{id}/approve", s.auth(s.limited(s.approve))},
		{http.MethodPost, "/v1/intents/{id}/execute", s.auth(s.withBody(s.executeIntent))},
		{http.MethodGet, "/healthz", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		}},
		{http.MethodGet, "/readyz", s.ready},
	}
	allowed := map[string][]string{}
	for _, rt := range routes {
		mux.HandleFunc(rt.method+" "+rt.path, rt.h)
		if rt.method == http.MethodGet {
			allowed[rt.path] = append(allowed[rt.path], rt.method, http.MethodHead) // GET patterns serve HEAD
		} else {
			allowed[rt.path] = append(allowed[rt.path], rt.method)
		}
	}
	// The other methods on an endpoint's path: 405 with Allow, before
	// authentication (it says nothing a token guards).
	for p, methods := range allowed {
		allow := strings.Join(methods, ", ")
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			problem(w, http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed", r.Method+" is not allowed on "+r.URL.Path+"; use "+allow, nil)
		})
	}
	if s.oauth != nil {
		// RFC 9728: the metadata of this server's resource, at the path
		// its challenges name.
		mux.Handle(oauth.MetadataPath(c.OAuth.Resource), s.oauth.MetadataHandler())
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, "not-found", "No such endpoint", r.Method+" "+r.URL.Path+" is not an endpoint of this server", nil)
	})
	// A span per request (W3C trace context continued) and the request
	// log, outside recoverer: a panic's 500 is logged too.
	s.handler = Instrument(recoverer(mux), opts)
	if opts != nil && len(opts.Handlers) > 0 {
		// Mounted handlers (the web UI) get the same spans and request log.
		mounts := make(map[string]http.Handler, len(opts.Handlers))
		for prefix, h := range opts.Handlers {
			mounts[prefix] = Instrument(h, opts)
		}
		api := s.handler
		s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for prefix, h := range mounts {
				if strings.HasPrefix(r.URL.Path, prefix) || r.URL.Path == strings.TrimSuffix(prefix, "/") {
					h.ServeHTTP(w, r)
					return
				}
			}
			api.ServeHTTP(w, r)
		})
	}
	return s, nil
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// HTTPServer returns an http.Server for addr with the configured timeouts.
func (s *Server) HTTPServer(addr string) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           s.handler,
		ReadHeaderTimeout: time.Duration(s.cfg.ReadTimeout),
		ReadTimeout:       time.Duration(s.cfg.ReadTimeout),
		WriteTimeout:      time.Duration(s.cfg.WriteTimeout),
		IdleTimeout:       time.Duration(s.cfg.IdleTimeout),
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// maxHeaderBytes bounds a request's line and headers (net/http reads up to
// 4 KiB past it before it refuses with 431).
const maxHeaderBytes = 64 << 10

// Serve serves on l until ctx ends, then shuts down gracefully
// ([Server.Shutdown]): it stops accepting, lets the calls running finish
// within the grace period and stops the rest. It returns nil after a clean
// shutdown. It leaves the runtime open: its caller closes it.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	hs := s.HTTPServer(l.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(refusalListener{l}) }() // net/http's own refusals as problem documents
	select {
	case err := <-errc:
		s.stopOAuth()
		return err
	case <-ctx.Done():
	}
	return s.Shutdown(hs)
}

// answerDrain is how long after the grace period the HTTP server waits for
// the handlers of stopped calls to write their answers before it drops the
// connections left.
const answerDrain = 2 * time.Second

// Shutdown stops hs, which serves this server's handler, gracefully. In
// order: hs stops accepting, and the server admits no more calls (a request
// that would start one is answered 503 shutting-down, with Retry-After);
// the calls it admitted have the grace period (Config.GracePeriod) to
// finish; at its end the server stops the calls still running, as the
// runtime's Close stops its calls (their context ends with the cause
// runtime.ErrClosed): a call whose tool was running is recorded ABORTED
// then ROLLED_BACK and answered so (200), one stopped before its tool ran
// is answered 503 with Retry-After (nothing ran, and its idempotency key is
// free). Their handlers then answer; only then, or answerDrain later at the
// latest, does hs close its connections.
//
// Shutdown returns once every call the server started has ended and is
// recorded. It does not close the runtime, whose calls from elsewhere (an
// MCP server on the same runtime, say) it leaves alone: the runtime's owner
// closes it after Shutdown returns. `toolgate serve` does so at once.
func (s *Server) Shutdown(hs *http.Server) error {
	defer s.stopOAuth()
	s.mu.Lock()
	s.closing = true // no call is admitted after this: calls.Wait below is not raced by an Add
	s.mu.Unlock()
	period := time.Duration(s.cfg.GracePeriod)
	n := int(s.running.Load())
	if n > 0 {
		s.log.LogAttrs(context.Background(), slog.LevelInfo,
			fmt.Sprintf("shutting down: waiting up to %v (the grace period) for %s to finish; those still running then are stopped and recorded as aborted", period, calls(n)),
			slog.Int("running", n), slog.Duration("gracePeriod", period))
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		start := time.Now()
		done := make(chan struct{})
		go func() { s.calls.Wait(); close(done) }()
		grace := time.NewTimer(period)
		defer grace.Stop()
		select {
		case <-done:
			if n > 0 {
				d := time.Since(start)
				s.log.LogAttrs(context.Background(), slog.LevelInfo, fmt.Sprintf("shutting down: the running calls finished in %v", d.Round(time.Millisecond)))
			}
		case <-grace.C:
			s.abortCalls(tgruntime.ErrClosed)
			s.log.LogAttrs(context.Background(), slog.LevelWarn,
				fmt.Sprintf("shutting down: the grace period of %v ended: stopped the calls still running (recorded ABORTED, then ROLLED_BACK)", period))
			<-done // a stopped call returns promptly: the runtime does not wait for its tool
		}
	}()
	// hs waits past the grace period: the stopped calls' handlers still
	// have to write their answers.
	drain, cancelDrain := context.WithTimeout(context.Background(), period+answerDrain)
	defer cancelDrain()
	err := hs.Shutdown(drain)
	if err != nil {
		hs.Close() // a handler that did not answer in time: drop what is left
	}
	<-ended
	if errors.Is(err, context.DeadlineExceeded) {
		return nil // the calls were stopped and recorded; some answers were lost
	}
	return err
}

// callContext is the context a call admitted for r runs under. A client
// that disconnects does not cancel it: it runs to its end (bounded by the
// tool's limits) and is recorded, so a retry with the same Idempotency-Key
// gets the real result. Only the end of Shutdown's grace period stops it.
func (s *Server) callContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	stop := context.AfterFunc(s.stopCalls, func() { cancel(context.Cause(s.stopCalls)) })
	return ctx, func() { stop(); cancel(nil) }
}

// IsLoopback reports whether addr (host:port) listens on loopback only.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// limited applies the principal's rate limit to an endpoint that runs no
// tool (reads, proposals, approvals): a token cannot flood the store.
func (s *Server) limited(h func(http.ResponseWriter, *http.Request, TokenConfig)) func(http.ResponseWriter, *http.Request, TokenConfig) {
	return func(w http.ResponseWriter, r *http.Request, who TokenConfig) {
		if ex := s.limits.Take(who.Principal, ""); ex != nil {
			w.Header().Set("Retry-After", strconv.Itoa(ex.RetryAfter()))
			problem(w, http.StatusTooManyRequests, "rate-limited", "Rate limited", "too many requests; retry after the Retry-After seconds", nil)
			return
		}
		h(w, r, who)
	}
}

// auth authenticates the bearer token and passes its principal on: a
// token of the config file, else (with an oauth config) an OAuth access
// token, which must verify.
func (s *Server) auth(h func(http.ResponseWriter, *http.Request, TokenConfig)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get("Authorization")
		scheme, token, ok := strings.Cut(v, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			s.challenge(w, nil, "Missing bearer token", "send Authorization: Bearer <token>")
			return
		}
		t, ok := s.cfg.authenticate(token)
		if !ok && s.oauth != nil {
			id, err := s.oauth.Verify(r.Context(), token)
			if err != nil {
				s.challenge(w, err, "Invalid token", err.Error())
				return
			}
			t, ok = TokenConfig{Principal: id.Principal, Approver: id.Approver, Identity: id}, true
		}
		if !ok {
			s.challenge(w, errUnknownToken, "Invalid token", "the bearer token is not known")
			return
		}
		noted(w).principal = t.Principal
		h(w, r, t)
	}
}

var errUnknownToken = &oauth.Error{Kind: oauth.ErrInvalidToken, Reason: "the bearer token is not known"}

// challenge refuses a request's token: 401 with WWW-Authenticate (naming
// the protected-resource metadata when OAuth is configured), 403 for a
// token without a required scope, 503 when the issuer's keys cannot be
// fetched.
func (s *Server) challenge(w http.ResponseWriter, err error, title, detail string) {
	switch status := s.oauth.SetChallenge(w.Header(), err); status {
	case http.StatusForbidden:
		problem(w, status, "insufficient-scope", "Insufficient scope", detail, nil)
	case http.StatusServiceUnavailable:
		problem(w, status, "authorization-unavailable", "Token cannot be checked now", detail, nil)
	default:
		problem(w, status, "unauthorized", title, detail, nil)
	}
}

// callerGrants are the capabilities the policy grants a token's holder
// besides its principal: by scope ("scope:S") and by claim value
// ("claim:NAME=VALUE").
func (s *Server) callerGrants(who TokenConfig) []capability.Capability {
	if who.Identity == nil {
		return nil
	}
	var out []capability.Capability
	pol := s.rt.Policy()
	for _, sub := range who.Identity.PolicySubjects() {
		out = append(out, pol.Grants(sub)...)
	}
	return out
}

// callerScopes and callerClaims are what the policy's Cedar policies see
// of a token's holder: its scopes and grant claims.
func callerScopes(who TokenConfig) []string {
	if who.Identity == nil {
		return nil
	}
	return who.Identity.Scopes
}

func callerClaims(who TokenConfig) map[string][]string {
	if who.Identity == nil {
		return nil
	}
	return who.Identity.Claims
}

// callerToken is what records keep of a token's holder's call.
func callerToken(who TokenConfig) *audit.Token {
	if who.Identity == nil {
		return nil
	}
	return &audit.Token{Issuer: who.Identity.Issuer, Subject: who.Identity.Subject, SHA256: who.Identity.TokenSHA256}
}

var toolNameRE = regexp.MustCompile(`^[a-z][a-z0-9]*([._-][a-z0-9]+)*$`)

// executeRequest is the body of POST /v1/tools/{name}/execute.
type executeRequest struct {
	Input   json.RawMessage `json:"input"`
	Version string          `json:"version"`
	CallID  string          `json:"callId"`
	// BypassIdempotency runs the call even though its Idempotency-Key
	// holds a result (the execution boundary document's
	// bypass_idempotency), for principals granted BypassCapability.
	BypassIdempotency bool `json:"bypassIdempotency"`
}

// BypassCapability is the capability a principal needs to bypass an
// Idempotency-Key over HTTP: unscoped for every tool, or scoped to one
// tool id ("idempotency.bypass:file.write"). The policy grants it like any
// other; a request cannot.
const BypassCapability = "idempotency.bypass"

var versionRE = &lazyRegexp{expr: `^[0-9A-Za-z.+-]{1,64}$`}
var callIDRE = &lazyRegexp{expr: `^[0-9A-Za-z._:-]{1,128}$`}

func (s *Server) execute(w http.ResponseWriter, r *http.Request, who TokenConfig) {
	name := r.PathValue("name")
	if !toolNameRE.MatchString(name) {
		problem(w, http.StatusBadRequest, "bad-tool-name", "Invalid tool name", "a tool name is lowercase words joined by '.', '_' or '-'", nil)
		return
	}
	var req executeRequest
	if !s.decode(w, r, &req) {
		return
	}
	switch {
	case len(req.Input) == 0 || string(req.Input) == "null":
		problem(w, http.StatusBadRequest, "bad-request", "No input", `the body needs "input", a JSON value`, nil)
		return
	case req.Version != "" && !versionRE.MatchString(req.Version):
		problem(w, http.StatusBadRequest, "bad-request", "Invalid version", "version must be a semantic version such as 1.0.0", nil)
		return
	case req.CallID != "" && !callIDRE.MatchString(req.CallID):
		problem(w, http.StatusBadRequest, "bad-request", "Invalid callId", "callId is 1 to 128 letters, digits and . _ : -", nil)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(r.Header.Values("Idempotency-Key")) > 1 {
		problem(w, http.StatusBadRequest, "bad-request", "Several Idempotency-Key headers", "send one", nil)
		return
	}
	if req.BypassIdempotency && key == "" {
		problem(w, http.StatusBadRequest, "bad-request", "Bypass without an Idempotency-Key", "bypassIdempotency bypasses the Idempotency-Key sent with it; send one", nil)
		return
	}
	if _, err := s.rt.Registry().Lookup(name, req.Version); err != nil {
		problem(w, http.StatusNotFound, "tool-not-found", "Unknown tool or version", tgruntime.Message(err), nil)
		return
	}
	if req.BypassIdempotency && !s.mayBypass(w, who.Principal, name) {
		return
	}
	release, ok := s.admit(w, who.Principal, name)
	if !ok {
		return
	}
	defer release()
	inv := tgruntime.Invocation{
		Tool: name, Version: req.Version, Input: req.Input, CallID: req.CallID, Principal: who.Principal,
		Grants: s.callerGrants(who), Token: callerToken(who), Scopes: callerScopes(who), Claims: callerClaims(who),
		IdempotencyKey: key, IdempotencyNoWait: true, // a second request answers 409 rather than hold a connection
		BypassIdempotency: req.BypassIdempotency, // audited: every event of the call says so
	}
	// A client that disconnects does not cancel the invocation (see
	// callContext); the end of a shutdown's grace period does.
	ctx, cancel := s.callContext(r)
	defer cancel()
	s.extendWriteDeadline(w)
	res, err := s.rt.Execute(ctx, inv)
	s.answer(w, res, err)
}

// mayBypass reports whether the policy grants principal BypassCapability
// for tool; if not, it answers 403 and nothing runs.
func (s *Server) mayBypass(w http.ResponseWriter, principal, tool string) bool {
	need := capability.Capability{Name: BypassCapability, Scope: tool}
	d := s.rt.Policy().Decide(principal, tool, []capability.Capability{need}, nil, time.Now())
	if d.Allowed() {
		return true
	}
	detail := fmt.Sprintf("bypassing an Idempotency-Key needs the capability %s (or %s), which the policy does not grant %s; nothing ran", need, BypassCapability, principal)
	if d.Reason != "" {
		detail = fmt.Sprintf("bypassing an Idempotency-Key needs the capability %s: %s; nothing ran", need, d.Reason)
	}
	problem(w, http.StatusForbidden, "bypass-denied", "Idempotency bypass not allowed", detail,
		map[string]any{"code": "bypass_denied", "missing": []string{need.String()}})
	return false
}

// extendWriteDeadline lifts the server's write timeout for an execution's
// answer: the invocation is bounded by its tool's own limits (and the
// retry policy), which may be longer than the timeout meant for the other
// endpoints; a caller must get the answer of what ran.
func (s *Server) extendWriteDeadline(w http.ResponseWriter) {
	http.NewResponseController(w).SetWriteDeadline(time.Time{}) // not supported: the configured timeout stays
}

// withoutStacks drops the goroutine stacks of panics from a result: they
// stay in the server's records (toolgate show --stack), never on the wire.
func withoutStacks(res *tgruntime.Result) {
	if res == nil {
		return
	}
	if res.Error != nil {
		e := *res.Error
		e.Stack = ""
		res.Error = &e
	}
	for i := range res.Attempts {
		if a := res.Attempts[i].Error; a != nil {
			e := *a
			e.Stack = ""
			res.Attempts[i].Error = &e
		}
	}
}

// answer writes an invocation's outcome with the status a client acts on.
func (s *Server) answer(w http.ResponseWriter, res *tgruntime.Result, err error) {
	defer s.checkStore() // whatever the answer, a store that failed meanwhile is logged
	withoutStacks(res)
	if res != nil {
		noted(w).executionID = res.ExecutionID
	}
	var ie *tgruntime.IdempotencyError
	var se *tgruntime.StateError
	switch {
	case errors.As(err, &ie):
		switch ie.Code {
		case "idempotency_in_flight":
			problem(w, http.StatusConflict, "idempotency-in-flight", "Idempotency key in flight", tgruntime.Message(err), map[string]any{"callId": ie.CallID})
		case "idempotency_conflict":
			problem(w, http.StatusUnprocessableEntity, "idempotency-conflict", "Idempotency key reused with a different request", tgruntime.Message(err), map[string]any{"callId": ie.CallID})
		default:
			problem(w, http.StatusBadRequest, "bad-idempotency-key", "Invalid Idempotency-Key", tgruntime.Message(err), nil)
		}
		return
	case errors.Is(err, tools.ErrToolNotFound), errors.Is(err, tools.ErrVersionNotFound):
		problem(w, http.StatusNotFound, "tool-not-found", "Unknown tool or version", tgruntime.Message(err), nil)
		return
	case res == nil && errors.Is(err, tgruntime.ErrClosed):
		// Refused before it ran. An invocation aborted by the shutdown has
		// a result (ROLLED_BACK), answered below like any other.
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "shutting-down", "Shutting down", "the server is shutting down", nil)
		return
	case res == nil && errors.As(err, &se):
		s.storeFailed(err)
		problem(w, http.StatusServiceUnavailable, "store-unavailable", "Store unavailable", storeDetail, nil)
		return
	case res == nil:
		s.log.Error("toolgate: an invocation could not be run", "error", err)
		problem(w, http.StatusInternalServerError, "internal", "Internal error", "the invocation could not be run; see the server's log", nil)
		return
	}
	ext := map[string]any{"result": res, "executionId": res.ExecutionID, "state": res.State}
	if res.Error != nil {
		ext["code"] = res.Error.Code
	}
	if parked := parkedWrites(res, err); len(parked) > 0 {
		// Durably COMPLETED, but a file write is not where the caller will
		// look: never a plain 200. The CLI exits 1 for the same case.
		ext["result"], ext["code"] = parkedResult{res, parked}, "write_parked"
		problem(w, http.StatusInternalServerError, "write-parked", "Committed, but a file write is not visible",
			fmt.Sprintf("the call committed (COMPLETED, execution %s), but %d of its file writes are parked and not visible: renaming the data into place after the commit failed (%s). "+
				"The data is kept on the server ('toolgate doctor' lists it); its operator must act. The call is recorded as done: a retry with its Idempotency-Key replays it",
				res.ExecutionID, len(parked), strings.Join(parked, "; ")), ext)
		return
	}
	switch {
	case errors.Is(err, tgruntime.ErrClosed) && !ranTool(res):
		// Stopped by the shutdown before its tool ran: recorded, but not an
		// outcome to keep. The runtime freed its idempotency key, so the
		// answer is a retry, not a final 200 ROLLED_BACK.
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "shutting-down", "Shutting down",
			"the server stopped this call before its tool ran: nothing ran, and its Idempotency-Key, if it had one, is free; retry it", ext)
	case res.State == lifecycle.Denied:
		problem(w, http.StatusForbidden, "denied", "Denied", errorMessage(res), ext)
	case res.State == lifecycle.Failed:
		problem(w, http.StatusUnprocessableEntity, "invalid-input", "Input does not match the tool's schema", errorMessage(res), ext)
	case res.Error != nil && res.Error.Code == "resource_unavailable":
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "resource-unavailable", "Resource unavailable", errorMessage(res), ext)
	case res.Error != nil && res.Error.Type == "StateError":
		s.storeFailed(err)
		problem(w, http.StatusServiceUnavailable, "store-unavailable", "Store unavailable", storeDetail, ext)
	default:
		writeJSON(w, http.StatusOK, res) // COMPLETED, or a tool-level failure carried in the result
	}
}

// parkedResult is a result whose committed file writes were parked: each
// entry of ParkedWrites says which file and why.
type parkedResult struct {
	*tgruntime.Result
	ParkedWrites []string `json:"parkedWrites"`
}

// parkedWrites returns why each of the file writes of a COMPLETED result
// could not be made visible after its commit (the runtime parks them), or
// nil. A failure of the store while forgetting the renames is not a parked
// write: the store's own failure is answered and logged as such.
func parkedWrites(res *tgruntime.Result, err error) []string {
	var se *tgruntime.StateError
	if res.State != lifecycle.Completed || !errors.As(err, &se) || se.Op != "apply staged writes" {
		return nil
	}
	errs := []error{se.Err}
	if j, ok := se.Err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var out []string
	for _, e := range errs {
		if e != nil && !errors.Is(e, txn.ErrPoisoned) {
			out = append(out, apiDetail(e.Error()))
		}
	}
	return out
}

// ranTool reports whether an attempt of res reached EXECUTING: its tool
// was started. A call none of whose attempts did ran nothing.
func ranTool(res *tgruntime.Result) bool {
	for _, a := range res.Attempts {
		for _, t := range a.Transitions {
			if t.To == lifecycle.Executing {
				return true
			}
		}
	}
	return false
}

// storeDetail is all a caller learns of a store failure: the server's
// operator has the rest (the server's log, toolgate doctor, the records).
const storeDetail = "the server's store cannot take more work now; its operator must act"

// checkStore reports whether the runtime's store refuses all work (a
// commit failed: a full disk, a read-only file system, an I/O error) and
// logs why the first time it sees it: once, however many requests are
// then refused. The cause says what to fix; the store works again only
// once reopened, so the server stays not ready until it is restarted.
func (s *Server) checkStore() bool {
	err := s.rt.Err()
	if err == nil {
		return false
	}
	if s.storeLogged.CompareAndSwap(false, true) {
		s.log.Error("toolgate: the store failed; executions are refused and /readyz answers 503 until the server is restarted",
			"cause", tgruntime.Message(err))
	}
	return true
}

// storeFailed logs a store failure a request was refused for: the store's
// poisoning once (checkStore), any other failure as it happens.
func (s *Server) storeFailed(err error) {
	if !s.checkStore() {
		s.log.Error("toolgate: a store operation failed", "error", err)
	}
}

func errorMessage(res *tgruntime.Result) string {
	if res.Error == nil {
		return string(res.State)
	}
	return res.Error.Message // in the user's terms (tgruntime.Message)
}

// withBody bounds the memory request bodies take: a body longer than
// MaxBodyBytes by its Content-Length is refused (413) before it is read, and
// at most 2 x MaxConcurrent requests with a body are read or held at once
// (MaxConcurrent executions, and as many being read, refused or proposed);
// one more is answered 503 busy, unread. Each costs at most about
// 3 x MaxBodyBytes while decode reads it, and the input it holds after.
func (s *Server) withBody(h func(http.ResponseWriter, *http.Request, TokenConfig)) func(http.ResponseWriter, *http.Request, TokenConfig) {
	return func(w http.ResponseWriter, r *http.Request, who TokenConfig) {
		if r.ContentLength > s.cfg.MaxBodyBytes {
			s.tooLarge(w)
			return
		}
		select {
		case s.bodies <- struct{}{}:
			defer func() { <-s.bodies }()
		default:
			w.Header().Set("Retry-After", "1")
			problem(w, http.StatusServiceUnavailable, "busy", "Too many requests in progress", fmt.Sprintf("the server reads at most %d request bodies at once", cap(s.bodies)), nil)
			return
		}
		h(w, r, who)
	}
}

func (s *Server) tooLarge(w http.ResponseWriter) {
	problem(w, http.StatusRequestEntityTooLarge, "too-large", "Body too large", fmt.Sprintf("the body is limited to %d bytes", s.cfg.MaxBodyBytes), nil)
}

// decode reads a JSON body: application/json, within the size limit, one
// object, no unknown fields. It decodes as it reads, so the body is held
// once, in the decoder's buffer (at most twice its size), besides what v
// keeps of it.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		problem(w, http.StatusUnsupportedMediaType, "unsupported-media-type", "Content-Type must be application/json", "", nil)
		return false
	}
	body := &readErr{r: http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)}
	d := json.NewDecoder(body)
	d.DisallowUnknownFields()
	err = d.Decode(v)
	if err == nil {
		if _, terr := d.Token(); terr != io.EOF {
			err = errors.New("data after the JSON object")
		}
	}
	var mbe *http.MaxBytesError
	switch {
	case err == nil:
		return true
	case errors.As(body.err, &mbe):
		s.tooLarge(w)
	case body.err != nil && body.err != io.EOF:
		problem(w, http.StatusBadRequest, "bad-request", "Unreadable body", "", nil)
	default:
		problem(w, http.StatusBadRequest, "bad-request", "Malformed JSON body", bodyError(err, v), nil)
	}
	return false
}

// readErr keeps the error its reader returned, telling a body that could
// not be read from one that is not JSON.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

// bodyError says what is wrong with a body that did not decode into v (a
// pointer to a request struct), in the API's terms: JSON types and field
// names, never the server's Go types.
func bodyError(err error, v any) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return strings.TrimPrefix(err.Error(), "json: ") // syntax, unknown field: no Go names
	}
	got := tgruntime.JSONKind(te.Value)
	if te.Field == "" {
		return "the body must be a JSON object with the fields " + strings.Join(jsonFields(v), ", ") + ", not " + got
	}
	want := "a JSON value of another type"
	switch te.Type.Kind() {
	case reflect.String:
		want = "a string"
	case reflect.Bool:
		want = "a boolean"
	case reflect.Struct, reflect.Map:
		want = "an object"
	case reflect.Slice, reflect.Array:
		want = "an array"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8,
		reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		want = "a number"
	}
	return fmt.Sprintf("%q must be %s, not %s", te.Field, want, got)
}

// jsonFields lists the quoted JSON names of the fields of the struct v
// points to.
func jsonFields(v any) []string {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, strconv.Quote(name))
		}
	}
	return names
}

func (s *Server) listTools(w http.ResponseWriter, r *http.Request, _ TokenConfig) {
	var out []tools.Declaration
	for _, e := range s.rt.Registry().Entries() {
		out = append(out, e.Declaration())
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTool(w http.ResponseWriter, r *http.Request, _ TokenConfig) {
	name := r.PathValue("name")
	if !toolNameRE.MatchString(name) {
		problem(w, http.StatusBadRequest, "bad-tool-name", "Invalid tool name", "", nil)
		return
	}
	version := r.URL.Query().Get("version")
	e, err := s.rt.Registry().Lookup(name, version)
	if err != nil {
		problem(w, http.StatusNotFound, "tool-not-found", "Unknown tool or version", tgruntime.Message(err), nil)
		return
	}
	writeJSON(w, http.StatusOK, e.Declaration())
}

func (s *Server) getExecution(w http.ResponseWriter, r *http.Request, who TokenConfig) {
	// The record and its audit events, read from one state of the store.
	rec, ds, err := s.rt.ReadExecution(r.Context(), r.PathValue("id"))
	switch {
	case errors.Is(err, txn.ErrNotFound) || (err == nil && rec.Principal != who.Principal && !who.Approver):
		// Another principal's execution is not found, rather than forbidden: ids are not an oracle.
		problem(w, http.StatusNotFound, "execution-not-found", "No such execution", "", nil)
	case errors.Is(err, txn.ErrCorrupt):
		problem(w, http.StatusConflict, "record-not-proven", "The stored record does not match the audit log",
			"the record stored under this id is damaged or was changed outside toolgate; run 'toolgate audit verify'", nil)
	case err != nil:
		s.storeFailed(err)
		problem(w, http.StatusServiceUnavailable, "store-unavailable", "Store unavailable", storeDetail, nil)
	default:
		noted(w).executionID = rec.ExecutionID
		// A record is shown only as the audit log proves it.
		if len(ds) > 0 {
			problem(w, http.StatusConflict, "record-not-proven", "The stored record does not match the audit log",
				"it was changed outside toolgate; run 'toolgate audit verify'", map[string]any{"discrepancies": ds})
			return
		}
		if rec.Error != nil {
			e := *rec.Error
			e.Stack = "" // never a stack on the wire
			rec.Error = &e
		}
		parked, err := s.rt.ParkedWrites(r.Context(), rec.ExecutionID)
		if err != nil {
			problem(w, http.StatusServiceUnavailable, "store-unavailable", "Store unavailable", storeDetail, nil)
			return
		}
		if len(parked) > 0 {
			// COMPLETED, but its file writes are not visible: say so.
			writeJSON(w, http.StatusOK, struct {
				*txn.Record
				ParkedWrites []string `json:"parkedWrites"`
			}{rec, parked})
			return
		}
		writeJSON(w, http.StatusOK, rec)
	}
}

// proposeRequest is the body of POST /v1/intents.
type proposeRequest struct {
	Tool    string          `json:"tool"`
	Version string          `json:"version"`
	Input   json.RawMessage `json:"input"`
}

func (s *Server) propose(w http.ResponseWriter, r *http.Request, who TokenConfig) {
	var req proposeRequest
	if !s.decode(w, r, &req) {
		return
	}
	if !toolNameRE.MatchString(req.Tool) || (req.Version != "" && !versionRE.MatchString(req.Version)) {
		problem(w, http.StatusBadRequest, "bad-request", "Invalid tool or version", "", nil)
		return
	}
	in, err := s.rt.Propose(r.Context(), tgruntime.Invocation{Tool: req.Tool, Version: req.Version, Input: req.Input, Principal: who.Principal})
	var ve *tgruntime.ValidationError
	var ie *tgruntime.IntentError
	switch {
	case errors.Is(err, tools.ErrToolNotFound), errors.Is(err, tools.ErrVersionNotFound):
		problem(w, http.StatusNotFound, "tool-not-found", "Unknown tool or version", tgruntime.Message(err), nil)
	case errors.As(err, &ve):
		problem(w, http.StatusUnprocessableEntity, "invalid-input", "Input does not match the tool's schema", tgruntime.Message(err), nil)
	case errors.As(err, &ie) && ie.Code == "intent_limit":
		problem(w, http.StatusTooManyRequests, "too-many-pending", "Too many pending intents", tgruntime.Message(err), nil)
	case err != nil:
		s.storeFailed(err)
		problem(w, http.StatusServiceUnavailable, "store-unavailable", "Store unavailable", storeDetail, nil)
	default:
		writeJSON(w, http.StatusCreated, in)
	}
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request, who TokenConfig) {
	if !who.Approver {
		problem(w, http.StatusForbidden, "not-an-approver", "Not an approver", "this token may not approve intents", nil)
		return
	}
	in, err := s.rt.Approve(r.Context(), r.PathValue("id"), who.Principal)
	var ie *tgruntime.IntentError
	switch {
	case errors.As(err, &ie) && ie.Code == "intent_not_found":
		problem(w, http.StatusNotFound, "intent-not-found", "No such intent", "", nil)
	case errors.As(err, &ie) && ie.Code == "intent_malformed":
		problem(w, http.StatusBadRequest, "bad-request", "Invalid intent id", tgruntime.Message(err), nil)
	case errors.As(err, &ie) && ie.Code == "intent_approver_not_allowed":
		// A Cedar policy lets only the members of a group approve it.
		problem(w, http.StatusForbidden, "approver-not-allowed", "Not an approver of this call", tgruntime.Message(err), nil)
	case errors.As(err, &ie) && ie.Code == "intent_unsigned":
		// The policy lists approval keys, and this server's key (serve
		// --approval-key) is not one listed for the approver.
		problem(w, http.StatusForbidden, "approval-unsigned", "Approval cannot be signed", tgruntime.Message(err), nil)
	case errors.As(err, &ie):
		problem(w, http.StatusConflict, "intent-decided", "Already decided", tgruntime.Message(err), nil)
	case err != nil:
		s.storeFailed(err)
		problem(w, http.StatusServiceUnavailable, "store-unavailable", "Store unavailable", storeDetail, nil)
	default:
		writeJSON(w, http.StatusOK, in)
	}
}

// executeIntentRequest is the body of POST /v1/intents/{id}/execute.
type executeIntentRequest struct {
	Hash string `json:"hash"`
}

// admit lets an execution in: unless the server is shutting down, within
// the rate limits of the principal (and of tool, unless ""), then into one
// of the server's execution slots, which release gives back once the call
// is answered (Shutdown waits for that). Otherwise it answers 503 or 429
// and reports false.
func (s *Server) admit(w http.ResponseWriter, principal, tool string) (release func(), ok bool) {
	s.mu.Lock()
	closing := s.closing
	if !closing {
		s.calls.Add(1)
		s.running.Add(1)
	}
	s.mu.Unlock()
	if closing {
		// As the runtime answers a call once its Close has begun.
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "shutting-down", "Shutting down", "the server is shutting down", nil)
		return nil, false
	}
	defer func() {
		if !ok {
			s.running.Add(-1)
			s.calls.Done()
		}
	}()
	if ex := s.limits.Take(principal, tool); ex != nil {
		w.Header().Set("Retry-After", strconv.Itoa(ex.RetryAfter()))
		problem(w, http.StatusTooManyRequests, "rate-limited", "Rate limited", "too many requests; retry after the Retry-After seconds", nil)
		return nil, false
	}
	select {
	case s.slots <- struct{}{}:
		return func() {
			<-s.slots
			s.running.Add(-1)
			s.calls.Done()
		}, true
	default:
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "busy", "Too many executions", fmt.Sprintf("all %d execution slots of the server are busy", cap(s.slots)), nil)
		return nil, false
	}
}

// executeIntent runs an approved intent, at most once.
func (s *Server) executeIntent(w http.ResponseWriter, r *http.Request, who TokenConfig) {
	var req executeIntentRequest
	if !s.decode(w, r, &req) {
		return
	}
	// The intent names its tool, whose rate limit applies as to a direct
	// call. An intent that cannot be found or is malformed is refused by
	// Execute below, with its code; a store that cannot be read refuses
	// the request here, as Execute would.
	tctx := context.WithoutCancel(r.Context()) // as for a direct call: a client that leaves cancels nothing
	tool := ""
	if in, err := s.rt.Intent(tctx, r.PathValue("id")); err == nil {
		tool = in.Tool
	} else if !errors.As(err, new(*tgruntime.IntentError)) {
		s.answer(w, nil, err)
		return
	}
	release, ok := s.admit(w, who.Principal, tool)
	if !ok {
		return
	}
	defer release()
	ctx, cancel := s.callContext(r) // as for a direct call
	defer cancel()
	s.extendWriteDeadline(w)
	res, err := s.rt.Execute(ctx, tgruntime.Invocation{
		IntentID: r.PathValue("id"), IntentHash: req.Hash, Principal: who.Principal,
		Grants: s.callerGrants(who), Token: callerToken(who), Scopes: callerScopes(who), Claims: callerClaims(who)})
	var ie *tgruntime.IntentError
	if !errors.As(err, &ie) {
		s.answer(w, res, err)
		return
	}
	withoutStacks(res)
	ext := map[string]any{"code": ie.Code}
	if res != nil {
		ext["result"] = res // a replay: the stored outcome, with when it ran
		noted(w).executionID = res.ExecutionID
	}
	switch ie.Code {
	case "intent_malformed":
		problem(w, http.StatusBadRequest, "intent-malformed", "Malformed intent id or hash", tgruntime.Message(err), ext)
	case "intent_not_found":
		problem(w, http.StatusNotFound, "intent-not-found", "No such intent", "", ext)
	case "intent_pending", "intent_rejected":
		problem(w, http.StatusForbidden, "intent-not-approved", "Intent not approved", tgruntime.Message(err), ext)
	case "intent_in_flight", "intent_already_executed":
		problem(w, http.StatusConflict, "intent-executed", "Intent already executed", tgruntime.Message(err), ext)
	default: // hash mismatch, tool changed, corrupt
		problem(w, http.StatusUnprocessableEntity, "intent-refused", "Intent refused", tgruntime.Message(err), ext)
	}
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		problem(w, http.StatusServiceUnavailable, "shutting-down", "Shutting down", "", nil)
		return
	}
	if s.checkStore() {
		problem(w, http.StatusServiceUnavailable, "store-unavailable", "Store unavailable", storeDetail, nil)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// problem writes an RFC 9457 problem document.
func problem(w http.ResponseWriter, status int, typ, title, detail string, ext map[string]any) {
	p := map[string]any{"type": "https://toolgate.dev/problems/" + typ, "title": title, "status": status}
	if detail != "" {
		p["detail"] = apiDetail(detail)
	}
	for k, v := range ext {
		p[k] = v
	}
	b, err := json.Marshal(p)
	if err != nil {
		b = []byte(`{"title":"Internal error","status":500}`)
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// apiDetail drops the Go package names that the runtime's errors begin
// with ("runtime: ", "tools: ", "txn: "), which mean nothing to a client,
// and bounds the length: a detail can quote the input.
func apiDetail(detail string) string {
	for {
		trimmed := detail
		for _, prefix := range []string{"runtime: ", "tools: ", "txn: "} {
			trimmed = strings.TrimPrefix(trimmed, prefix)
		}
		if trimmed == detail {
			break
		}
		detail = trimmed
	}
	const max = 2048
	if len(detail) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(detail[cut]) {
			cut--
		}
		detail = detail[:cut] + "…"
	}
	return detail
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		problem(w, http.StatusInternalServerError, "internal", "Internal error", "", nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// recoverer turns a panic in a handler into a 500 problem, never a stack
// on the wire.
func recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				problem(w, http.StatusInternalServerError, "internal", "Internal error", "", nil)
			}
		}()
		// No redirects to a cleaned path: a request names its endpoint
		// exactly, or is refused.
		switch p := r.URL.Path; {
		case !strings.HasPrefix(p, "/"): // "*" (PRI * HTTP/2.0), or CONNECT's host:port
			problem(w, http.StatusBadRequest, "bad-path", "Not a path", "the request target must be a path beginning with '/'", nil)
			return
		case path.Clean(p) != p:
			problem(w, http.StatusBadRequest, "bad-path", "Unclean path", "the path has '..', '.', '//' or a trailing '/'", nil)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// calls says "1 running call" or "N running calls".
func calls(n int) string {
	if n == 1 {
		return "1 running call"
	}
	return strconv.Itoa(n) + " running calls"
}
