package client

import (
	"errors"
	"net/http"
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
