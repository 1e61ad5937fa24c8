package runtime

import (
	"errors"
	"slices"
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

// At nanosecond steps the jitter is exact: the wait for a step d is one of
// d/2 to d, both ends included, and a step is BaseDelay doubled n-1 times
// whenever that is within MaxDelay, even by a few nanoseconds, never the cap.
func TestRuntime_backoffExactSteps(t *testing.T) {
	for _, tc := range []struct {
		base, max time.Duration
		n         int
		want      []time.Duration // every value backoff(n) takes
	}{
		{1, 4, 1, []time.Duration{0}},
		{1, 4, 2, []time.Duration{1, 2}},
		{1, 4, 3, []time.Duration{2, 3, 4}},
		{1, 4, 4, []time.Duration{2, 3, 4}}, // capped
		{250, 1003, 3, nil},                 // 1000 ns, not the cap of 1003: checked by range below
	} {
		r := &Runtime{opts: Options{Retry: RetryPolicy{BaseDelay: tc.base, MaxDelay: tc.max}}}
		seen := map[time.Duration]bool{}
		for range 2000 {
			seen[r.backoff(tc.n)] = true
		}
		if tc.want == nil {
			for d := range seen {
				if d < 500 || d > 1000 {
					t.Fatalf("base %v, max %v: backoff(%d) = %v; want within [500ns, 1µs]", tc.base, tc.max, tc.n, d)
				}
			}
			continue
		}
		if len(seen) != len(tc.want) {
			t.Fatalf("base %v, max %v: backoff(%d) took %v; want each of %v", tc.base, tc.max, tc.n, seen, tc.want)
		}
		for _, d := range tc.want {
			if !seen[d] {
				t.Fatalf("base %v, max %v: backoff(%d) took %v; want each of %v", tc.base, tc.max, tc.n, seen, tc.want)
			}
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

// A caller waiting for a running key looks again after 5 ms, then twice as
// long each time, never more than 200 ms apart: it neither spins on the
// store nor answers long after the first call ended.
func TestKeyPoll(t *testing.T) {
	var got []time.Duration
	for d := time.Duration(0); len(got) < 8; {
		d = keyPoll(d)
		got = append(got, d)
	}
	ms := time.Millisecond
	want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 200 * ms, 200 * ms}
	if !slices.Equal(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
}
