package ratelimit

import (
	"strings"
	"testing"
	"time"
)

// A refusal by the tool's bucket gives back the token the principal's
// bucket gave: a principal is not charged for calls that did not run.
func TestTake_RefusalTakesNothing(t *testing.T) {
	l := New(Limits{PerPrincipal: Rate{PerSecond: 0.001, Burst: 2}, PerTool: Rate{PerSecond: 0.001, Burst: 1}})
	if ex := l.Take("alice", "t"); ex != nil {
		t.Fatalf("first call: %v", ex)
	}
	for range 5 {
		ex := l.Take("alice", "t")
		if ex == nil || ex.Limit != "perTool" || ex.Key != "t" {
			t.Fatalf("past t's burst: %+v, want perTool t", ex)
		}
	}
	// alice's second token is still there, for another tool.
	if ex := l.Take("alice", "u"); ex != nil {
		t.Fatalf("alice on u: %v; the refusals on t took her token", ex)
	}
	ex := l.Take("alice", "v")
	if ex == nil || ex.Limit != "perPrincipal" || ex.Key != "alice" {
		t.Fatalf("past alice's burst: %+v, want perPrincipal alice", ex)
	}
	if ex.Wait < time.Second || ex.RetryAfter() < 1 {
		t.Errorf("wait %v, retryAfter %d; want at least a second", ex.Wait, ex.RetryAfter())
	}
	if msg := ex.Error(); !strings.Contains(msg, "rateLimits.perPrincipal") || !strings.Contains(msg, "alice") {
		t.Errorf("message %q names neither the limit nor the principal", msg)
	}
	// A tool "" takes only the principal's bucket; a zero Rate is no limit.
	free := New(Limits{PerTool: Rate{PerSecond: 0.001, Burst: 1}})
	for range 3 {
		if ex := free.Take("bob", ""); ex != nil {
			t.Fatalf("no principal limit, no tool: %v", ex)
		}
	}
}

func TestRetryAfter_RoundsUp(t *testing.T) {
	for _, tc := range []struct {
		wait time.Duration
		want int
	}{{time.Second, 1}, {1001 * time.Millisecond, 2}, {2500 * time.Millisecond, 3}, {3 * time.Second, 3}} {
		if got := (&Exceeded{Wait: tc.wait}).RetryAfter(); got != tc.want {
			t.Errorf("RetryAfter(%v) = %d, want %d", tc.wait, got, tc.want)
		}
	}
}

func TestLimits_Check(t *testing.T) {
	for _, bad := range []Limits{
		{PerPrincipal: Rate{PerSecond: 1}},
		{PerTool: Rate{PerSecond: -1, Burst: 1}},
		{PerTool: Rate{Burst: -1}},
	} {
		if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "rateLimits.") {
			t.Errorf("%+v: %v, want an error naming the limit", bad, err)
		}
	}
	if err := (Limits{PerPrincipal: Rate{PerSecond: 1, Burst: 1}}).Check(); err != nil {
		t.Errorf("a good limit: %v", err)
	}
}
