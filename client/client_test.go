package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestNew_Refuses(t *testing.T) {
	for _, u := range []string{"", "ftp://x", "127.0.0.1:7070", "http://"} {
		if _, err := New(u, "t", nil); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	if _, err := New("http://127.0.0.1:7070", "a\r\nX-Evil: 1", nil); err == nil {
		t.Error("a token with a line break was accepted")
	}
}

func TestError_Is(t *testing.T) {
	for _, tc := range []struct {
		status int
		typ    string
		want   error
	}{
		{200, "", ErrNotCompleted},
		{400, "", ErrBadRequest},
		{413, "", ErrBadRequest},
		{415, "", ErrBadRequest},
		{401, "", ErrUnauthorized},
		{403, "", ErrDenied},
		{404, "", ErrNotFound},
		{409, "https://toolgate.dev/problems/idempotency-in-flight", ErrInFlight},
		{409, "https://toolgate.dev/problems/intent-decided", ErrConflict},
		{422, "https://toolgate.dev/problems/idempotency-conflict", ErrConflict},
		{422, "https://toolgate.dev/problems/invalid-input", ErrInvalidInput},
		{422, "https://toolgate.dev/problems/intent-refused", ErrIntentRefused},
		{429, "", ErrRateLimited},
		{503, "", ErrUnavailable},
		{500, "", ErrServer},
		{500, "https://toolgate.dev/problems/write-parked", ErrWriteParked},
		{500, "https://toolgate.dev/problems/write-parked", ErrServer},
	} {
		err := error(&Error{Status: tc.status, Type: tc.typ, Title: http.StatusText(tc.status)})
		if !errors.Is(err, tc.want) {
			t.Errorf("%d %s: not %v", tc.status, tc.typ, tc.want)
		}
		if tc.want != ErrDenied && errors.Is(err, ErrDenied) {
			t.Errorf("%d matches ErrDenied", tc.status)
		}
		if tc.want != ErrInvalidInput && errors.Is(err, ErrInvalidInput) {
			t.Errorf("%d %s matches ErrInvalidInput", tc.status, tc.typ)
		}
	}
	if errors.Is(&Error{Status: 500, Type: "https://toolgate.dev/problems/internal"}, ErrWriteParked) {
		t.Errorf("any 500 matches ErrWriteParked")
	}
	// A result a handle refused during execution: not completed, and denied.
	refused := error(&Error{Status: 200, Result: &Result{State: "ROLLED_BACK", Error: &ErrorInfo{Type: "AuthorizationError", Code: "capability_boundary"}}})
	if !errors.Is(refused, ErrNotCompleted) || !errors.Is(refused, ErrDenied) {
		t.Errorf("a handle refusal: not both ErrNotCompleted and ErrDenied")
	}
	failed := error(&Error{Status: 200, Result: &Result{State: "ROLLED_BACK", Error: &ErrorInfo{Type: "ExecutionError", Code: "tool_error"}}})
	if errors.Is(failed, ErrDenied) {
		t.Errorf("a tool failure matches ErrDenied")
	}
}

// Invocation.BypassIdempotency goes on the wire as the execute request's
// bypassIdempotency, with the key; the server's refusal of it is ErrDenied
// with the code bypass_denied.
func TestClient_BypassIdempotency(t *testing.T) {
	type seen struct {
		key  string
		body map[string]any
	}
	got := make(chan seen, 2)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		got <- seen{r.Header.Get("Idempotency-Key"), body}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `{"type":"https://toolgate.dev/problems/bypass-denied","title":"Idempotency bypass not allowed","status":403,"code":"bypass_denied"}`)
	}))
	defer hs.Close()
	c, err := New(hs.URL, "t", hs.Client())
	if err != nil {
		t.Fatal(err)
	}
	for _, bypass := range []bool{true, false} {
		_, err := c.Execute(context.Background(), Invocation{Tool: "file.write", Input: json.RawMessage(`{}`), IdempotencyKey: "k", BypassIdempotency: bypass})
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrDenied) || e.Code != "bypass_denied" {
			t.Errorf("bypass %v: %v; want ErrDenied with code bypass_denied", bypass, err)
		}
		s := <-got
		if v, ok := s.body["bypassIdempotency"]; s.key != "k" || (bypass && v != true) || (!bypass && ok) {
			t.Errorf("bypass %v sent key %q and body %v", bypass, s.key, s.body)
		}
	}
}
