// Package client calls a toolgate server (`toolgate serve`) over HTTP: the
// remote counterpart of runtime.Execute, with typed errors mapped from the
// server's status codes. It imports nothing of toolgate, so an agent can
// depend on it alone.
//
//	c, _ := client.New("http://127.0.0.1:7070", os.Getenv("TOOLGATE_TOKEN"), nil)
//	res, err := c.Execute(ctx, client.Invocation{Tool: "file.read", Input: json.RawMessage(`{"path":"README.md"}`)})
//	switch {
//	case errors.Is(err, client.ErrDenied):     // a capability is missing, or a handle refused
//	case errors.Is(err, client.ErrRateLimited): // 429: retry after err.(*client.Error).RetryAfter
//	}
//
// # Errors
//
// Every error from the server is an *Error, matched with errors.Is against
// the sentinel of its status (see the list of sentinels). Two cases carry
// more than the status:
//
//   - An invocation that ran but did not complete is a 200 whose result says
//     why: ErrNotCompleted, with the result in Error.Result and its error
//     code in Error.Code. When a handle refused something outside the
//     grants during execution (the result's error type is
//     AuthorizationError, code capability_boundary; the attempt was rolled
//     back), the error is also ErrDenied, as a 403 denial before the run is.
//   - A call that committed but whose file writes could not be made
//     visible afterwards (a directory now sits at the target, or the
//     directory is gone) is a 500: ErrWriteParked (and ErrServer), with the
//     COMPLETED result in Error.Result and the parked writes in its
//     ParkedWrites. The call is recorded as done; its writes wait for the
//     server's operator.
//   - An approved intent the server refuses to run (422: its hash does not
//     match, its tool changed, its record is damaged) is ErrIntentRefused,
//     not ErrInvalidInput; Error.Code says why: intent_hash_mismatch,
//     intent_tool_changed, intent_corrupt or intent_unsigned (the policy
//     lists approval keys and none of them signed the approval).
//
// The caller's trace context (W3C traceparent) is sent with every request,
// so the server's spans continue the caller's trace.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
)

// Client is a connection to one toolgate server with one token. It is safe
// for concurrent use.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
}

// New returns a client of the server at baseURL ("http://127.0.0.1:7070")
// authenticating with token. hc nil means http.DefaultClient.
func New(baseURL, token string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: %q is not an http(s) URL", baseURL)
	}
	if strings.ContainsAny(token, "\r\n") {
		return nil, errors.New("client: the token contains a line break")
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: u, token: token, hc: hc}, nil
}

// Invocation is one call of one tool.
type Invocation struct {
	Tool           string          // tool id
	Version        string          // "" means the highest registered version
	Input          json.RawMessage // the arguments
	CallID         string          // "" means the server makes one
	IdempotencyKey string          // sent as Idempotency-Key
	// BypassIdempotency runs the call even though IdempotencyKey holds a
	// result, and makes it the key's result. The server allows it only to
	// principals its policy grants idempotency.bypass (else 403,
	// ErrDenied, and nothing runs), and records the bypass on every audit
	// event of the call.
	BypassIdempotency bool
}

// Result is the server's result object, as `toolgate run --json` prints it.
type Result struct {
	ExecutionID    string            `json:"executionId"`
	CallID         string            `json:"callId"`
	TraceID        string            `json:"traceId,omitempty"`
	Tool           string            `json:"tool"`
	Version        string            `json:"version"`
	State          string            `json:"state"`
	Output         json.RawMessage   `json:"output,omitempty"`
	Error          *ErrorInfo        `json:"error,omitempty"`
	Attempts       []json.RawMessage `json:"attempts"`
	IntentID       string            `json:"intentId,omitempty"`
	Replayed       bool              `json:"replayed,omitempty"`
	IdempotencyKey string            `json:"idempotencyKey,omitempty"`
	// ParkedWrites, on a COMPLETED result answered with ErrWriteParked,
	// says which committed file writes could not be made visible, and why.
	ParkedWrites []string `json:"parkedWrites,omitempty"`
}

// ErrorInfo is a result's structured error.
type ErrorInfo struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// The errors of Execute, matched with errors.Is; unpack *Error for the
// details.
var (
	ErrBadRequest    = errors.New("client: bad request")                     // 400, 413, 415
	ErrUnauthorized  = errors.New("client: unauthorized")                    // 401
	ErrDenied        = errors.New("client: denied")                          // 403; or 200 with a handle's refusal in the result
	ErrNotFound      = errors.New("client: not found")                       // 404
	ErrInFlight      = errors.New("client: idempotency key in flight")       // 409
	ErrConflict      = errors.New("client: idempotency key reused")          // 422, another request under the key
	ErrInvalidInput  = errors.New("client: input does not match the schema") // 422
	ErrIntentRefused = errors.New("client: intent refused")                  // 422, an approved intent not run; Error.Code says why
	ErrRateLimited   = errors.New("client: rate limited")                    // 429
	ErrUnavailable   = errors.New("client: unavailable")                     // 503
	ErrNotCompleted  = errors.New("client: the invocation did not complete") // 200 with a failure in the result
	ErrWriteParked   = errors.New("client: write parked, not visible")       // 500, committed; see Result.ParkedWrites
	ErrServer        = errors.New("client: server error")                    // other statuses
)

// Error is a refusal or a failure, from an RFC 9457 problem document (or a
// result that did not complete).
type Error struct {
	Status     int
	Type       string // the problem type URI
	Title      string
	Detail     string
	Code       string        // the result's error code, when there is a result
	RetryAfter time.Duration // from Retry-After, for 429 and 503
	Result     *Result       // the recorded attempt, when there is one (403, 422 on input, 200, 503 for a call stopped before its tool ran)
}

func (e *Error) Error() string {
	s := fmt.Sprintf("client: %d %s", e.Status, e.Title)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is matches the sentinel of the status and problem type; a result a
// handle refused during execution (200, AuthorizationError) matches
// ErrDenied too.
func (e *Error) Is(target error) bool {
	switch e.Status {
	case http.StatusOK:
		if target == ErrDenied {
			return e.Result != nil && e.Result.Error != nil && e.Result.Error.Type == "AuthorizationError"
		}
		return target == ErrNotCompleted
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return target == ErrBadRequest
	case http.StatusUnauthorized:
		return target == ErrUnauthorized
	case http.StatusForbidden:
		return target == ErrDenied
	case http.StatusNotFound:
		return target == ErrNotFound
	case http.StatusConflict:
		if strings.HasSuffix(e.Type, "/idempotency-in-flight") {
			return target == ErrInFlight
		}
		return target == ErrConflict
	case http.StatusUnprocessableEntity:
		switch {
		case strings.HasSuffix(e.Type, "/idempotency-conflict"):
			return target == ErrConflict
		case strings.HasSuffix(e.Type, "/intent-refused"):
			return target == ErrIntentRefused
		}
		return target == ErrInvalidInput
	case http.StatusTooManyRequests:
		return target == ErrRateLimited
	case http.StatusServiceUnavailable:
		return target == ErrUnavailable
	case http.StatusInternalServerError:
		if strings.HasSuffix(e.Type, "/write-parked") && target == ErrWriteParked {
			return true
		}
	}
	return target == ErrServer
}

// Execute runs one invocation on the server. Like runtime.Execute, it
// returns the result and, for anything but COMPLETED, an *Error; a refusal
// before any attempt (401, 404, 409, 429, ...) has no result.
func (c *Client) Execute(ctx context.Context, inv Invocation) (*Result, error) {
	if inv.Tool == "" || strings.ContainsAny(inv.Tool, "/?#%") {
		return nil, fmt.Errorf("client: %q is not a tool name", inv.Tool)
	}
	body, err := json.Marshal(struct {
		Input   json.RawMessage `json:"input"`
		Version string          `json:"version,omitempty"`
		CallID  string          `json:"callId,omitempty"`
		Bypass  bool            `json:"bypassIdempotency,omitempty"`
	}{inv.Input, inv.Version, inv.CallID, inv.BypassIdempotency})
	if err != nil {
		return nil, fmt.Errorf("client: input: %w", err)
	}
	h := http.Header{}
	if inv.IdempotencyKey != "" {
		if strings.ContainsAny(inv.IdempotencyKey, "\r\n") {
			return nil, errors.New("client: the idempotency key contains a line break")
		}
		h.Set("Idempotency-Key", inv.IdempotencyKey)
	}
	var res Result
	resp, err := c.do(ctx, http.MethodPost, "/v1/tools/"+url.PathEscape(inv.Tool)+"/execute", h, body, &res)
	if err != nil {
		return resultOf(err), err
	}
	if res.State != "COMPLETED" {
		e := &Error{Status: resp.StatusCode, Title: "Not completed: " + res.State, Result: &res}
		if res.Error != nil {
			e.Code, e.Detail = res.Error.Code, res.Error.Message
		}
		return &res, e
	}
	return &res, nil
}

func resultOf(err error) *Result {
	var e *Error
	if errors.As(err, &e) {
		return e.Result
	}
	return nil
}

// Tools returns the declarations of the server's tools, as JSON.
func (c *Client) Tools(ctx context.Context) ([]json.RawMessage, error) {
	var out []json.RawMessage
	_, err := c.do(ctx, http.MethodGet, "/v1/tools", nil, nil, &out)
	return out, err
}

// Execution returns the stored record of one attempt, as JSON.
func (c *Client) Execution(ctx context.Context, id string) (json.RawMessage, error) {
	var out json.RawMessage
	_, err := c.do(ctx, http.MethodGet, "/v1/executions/"+url.PathEscape(id), nil, nil, &out)
	return out, err
}

// Intent is a proposed invocation, as the server stores it.
type Intent struct {
	ID      string          `json:"id"`
	Hash    string          `json:"hash"`
	Tool    string          `json:"tool"`
	Version string          `json:"version"`
	Input   json.RawMessage `json:"input"`
	Status  string          `json:"status"`
}

// Propose stores inv as an intent awaiting approval. On error the intent is
// nil.
func (c *Client) Propose(ctx context.Context, inv Invocation) (*Intent, error) {
	body, err := json.Marshal(struct {
		Tool    string          `json:"tool"`
		Version string          `json:"version,omitempty"`
		Input   json.RawMessage `json:"input"`
	}{inv.Tool, inv.Version, inv.Input})
	if err != nil {
		return nil, fmt.Errorf("client: input: %w", err)
	}
	var in Intent
	if _, err := c.do(ctx, http.MethodPost, "/v1/intents", nil, body, &in); err != nil {
		return nil, err
	}
	return &in, nil
}

// ExecuteIntent runs an approved intent, at most once. An intent that ran
// already is a 409 (ErrConflict) whose Error.Result is the stored outcome;
// one the server refuses to run is ErrIntentRefused, with Error.Code.
func (c *Client) ExecuteIntent(ctx context.Context, id, hash string) (*Result, error) {
	body, _ := json.Marshal(map[string]string{"hash": hash})
	var res Result
	resp, err := c.do(ctx, http.MethodPost, "/v1/intents/"+url.PathEscape(id)+"/execute", nil, body, &res)
	if err != nil {
		return resultOf(err), err
	}
	if res.State != "COMPLETED" {
		e := &Error{Status: resp.StatusCode, Title: "Not completed: " + res.State, Result: &res}
		if res.Error != nil {
			e.Code, e.Detail = res.Error.Code, res.Error.Message
		}
		return &res, e
	}
	return &res, nil
}

// Approve approves an intent (the token must be an approver's). On error
// the intent is nil.
func (c *Client) Approve(ctx context.Context, id string) (*Intent, error) {
	var in Intent
	if _, err := c.do(ctx, http.MethodPost, "/v1/intents/"+url.PathEscape(id)+"/approve", nil, []byte("{}"), &in); err != nil {
		return nil, err
	}
	return &in, nil
}

// do sends one request and decodes a 2xx answer into out, or returns the
// problem as an *Error.
func (c *Client) do(ctx context.Context, method, path string, h http.Header, body []byte, out any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, rd)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp, fmt.Errorf("client: reading the answer: %w", err)
	}
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp, fmt.Errorf("client: decoding the answer: %w", err)
		}
		return resp, nil
	}
	e := &Error{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode)}
	var p struct {
		Type   string  `json:"type"`
		Title  string  `json:"title"`
		Detail string  `json:"detail"`
		Code   string  `json:"code"`
		Result *Result `json:"result"`
	}
	if json.Unmarshal(data, &p) == nil {
		e.Type, e.Detail, e.Code, e.Result = p.Type, p.Detail, p.Code, p.Result
		if p.Title != "" {
			e.Title = p.Title
		}
	}
	if s := resp.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			e.RetryAfter = time.Duration(n) * time.Second
		}
	}
	return resp, e
}
