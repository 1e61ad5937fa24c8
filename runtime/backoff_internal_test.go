package runtime

import (
	"errors"
	"testing"
	"time"

	"github.com/toolgate/toolgate/tools"
)

// Backoff doubles per retry from BaseDelay, is capped at MaxDelay, and is
// jittered over the upper half of each step.
func TestRuntime_backoff(t *testing.T) {
	r := &Runtime{opts: Options{Retry: RetryPolicy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}}}
	for n, step := range map[int]time.Duration{
		1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond,
		4: 800 * time.Millisecond, 5: time.Second, 40: time.Second,
	} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := r.backoff(n)
			if d < step/2 || d > step {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, d, step/2, step)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Fatalf("backoff(%d) took only %d distinct values in 200 draws: no jitter", n, len(seen))
		}
	}
}

func TestRuntime_backoffNoOverflow(t *testing.T) {
	r := &Runtime{opts: Options{Retry: RetryPolicy{BaseDelay: time.Hour, MaxDelay: 2 * time.Hour}}}
	for n := 1; n < 200; n++ {
		if d := r.backoff(n); d < time.Hour/2 || d > 2*time.Hour {
			t.Fatalf("backoff(%d) = %v", n, d)
		}
	}
}

// A StateError joined to a retryable cause (the record could not be
// written) is never retried; only the outermost class counts.
func TestRuntime_retryable(t *testing.T) {
	r := &Runtime{opts: Options{Retry: RetryPolicy{MaxRetries: 3}}}
	idem := &tools.Declaration{Idempotent: true}
	timeout := &TimeoutError{Tool: "t", Limit: time.Second}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"timeout", timeout, true},
		{"transient resource", &ResourceError{Resource: "concurrency", Transient: true}, true},
		{"limit", &ResourceError{Resource: "file_size_limit"}, false},
		{"timeout, record failed", errors.Join(timeout, &StateError{Op: "rollback", Err: errors.New("disk")}), false},
		{"tool error wrapping a timeout", &ExecutionError{Tool: "t", Err: timeout}, false},
		{"validation", &ValidationError{Phase: "input", Err: errors.New("x")}, false},
	} {
		if got := r.retryable(idem, tc.err, 1); got != tc.want {
			t.Errorf("%s: retryable = %v, want %v", tc.name, got, tc.want)
		}
	}
	if r.retryable(&tools.Declaration{}, timeout, 1) || r.retryable(idem, timeout, 4) {
		t.Error("retried a non-idempotent tool or past MaxRetries")
	}
}
