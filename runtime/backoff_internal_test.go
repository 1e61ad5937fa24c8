package runtime

import (
	"testing"
	"time"
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
