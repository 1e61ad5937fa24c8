// Package ratelimit holds the token buckets that toolgate's front ends,
// the HTTP boundary (server) and the MCP server (mcp), put in front of
// tool invocations: one bucket per principal and one per tool, configured
// by the "rateLimits" of toolgate serve's config file. The buckets live in
// the process: each toolgate process counts for itself, also when several
// share one Postgres store.
package ratelimit

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits are token buckets per principal and per tool; a zero Rate means
// no limit.
type Limits struct {
	PerPrincipal Rate `json:"perPrincipal"`
	PerTool      Rate `json:"perTool"`
}

// Rate is a token bucket: PerSecond tokens are added each second, up to
// Burst.
type Rate struct {
	PerSecond float64 `json:"perSecond"`
	Burst     int     `json:"burst"`
}

// Check reports a rate that is negative, or has a rate without a burst,
// in the config file's terms (rateLimits.perPrincipal, ...).
func (l Limits) Check() error {
	for _, r := range []struct {
		name string
		r    Rate
	}{{"perPrincipal", l.PerPrincipal}, {"perTool", l.PerTool}} {
		if r.r.PerSecond < 0 || r.r.Burst < 0 || (r.r.PerSecond > 0 && r.r.Burst == 0) {
			return fmt.Errorf("rateLimits.%s: perSecond and burst must be positive together (or both zero: no limit)", r.name)
		}
	}
	return nil
}

// Limiter takes tokens from the buckets of Limits. It is safe for
// concurrent use.
type Limiter struct {
	limits     Limits
	mu         sync.Mutex
	principals map[string]*rate.Limiter
	tools      map[string]*rate.Limiter
}

// New returns a limiter with l's buckets, all full.
func New(l Limits) *Limiter {
	return &Limiter{limits: l, principals: map[string]*rate.Limiter{}, tools: map[string]*rate.Limiter{}}
}

// Take takes a token from the principal's and the tool's buckets (a tool
// "" takes only the principal's) and returns nil. When either is empty it
// takes nothing and says which, and how long to wait.
func (l *Limiter) Take(principal, tool string) *Exceeded {
	now := time.Now()
	var rs []*rate.Reservation
	for _, b := range []struct {
		limit, key string
		b          *rate.Limiter
	}{
		{"perPrincipal", principal, l.bucket(l.principals, principal, l.limits.PerPrincipal)},
		{"perTool", tool, l.bucket(l.tools, tool, l.limits.PerTool)},
	} {
		if b.b == nil {
			continue
		}
		res := b.b.ReserveN(now, 1)
		if d := res.DelayFrom(now); !res.OK() || d > 0 {
			res.CancelAt(now)
			for _, taken := range rs {
				taken.CancelAt(now)
			}
			return &Exceeded{Limit: b.limit, Key: b.key, Wait: max(d, time.Second)}
		}
		rs = append(rs, res)
	}
	return nil
}

// Exceeded says which bucket was empty and how long to wait.
type Exceeded struct {
	Limit string        // "perPrincipal" or "perTool", as in the config file
	Key   string        // the principal or the tool
	Wait  time.Duration // until a retry can succeed; at least a second
}

func (e *Exceeded) Error() string {
	what := "the principal " + e.Key
	if e.Limit == "perTool" {
		what = "the tool " + e.Key
	}
	return fmt.Sprintf("rate limited: %s is over its limit (rateLimits.%s); retry after %d s", what, e.Limit, e.RetryAfter())
}

// RetryAfter is Wait in whole seconds, rounded up: the Retry-After header's
// and the MCP refusal's retryAfter.
func (e *Exceeded) RetryAfter() int {
	s := int(e.Wait / time.Second)
	if e.Wait%time.Second != 0 {
		s++
	}
	return s
}

func (l *Limiter) bucket(m map[string]*rate.Limiter, key string, r Rate) *rate.Limiter {
	if r.PerSecond <= 0 || key == "" {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := m[key]
	if b == nil {
		b = rate.NewLimiter(rate.Limit(r.PerSecond), r.Burst)
		m[key] = b
	}
	return b
}
