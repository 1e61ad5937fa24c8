package webui

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// LoginLimits bound the failed logins the login form takes: a token
// guessed from one address, or from many, is refused (429, Retry-After)
// once its bucket is empty, without the token being looked at. A
// successful login takes nothing from the buckets. Zero fields mean the
// defaults.
type LoginLimits struct {
	// PerAddress bounds the failed logins from one client address (an
	// IPv6 address's /64); default 5, then one a minute.
	PerAddress Limit
	// Overall bounds the failed logins from all addresses together;
	// default 50, then one every 10 seconds. While it is empty nobody can
	// log in (the sessions already open go on).
	Overall Limit
}

// Limit is a token bucket: Burst at once, then one each Every.
type Limit struct {
	Burst int
	Every time.Duration
}

func (l Limit) or(def Limit) Limit {
	if l.Burst <= 0 {
		l.Burst = def.Burst
	}
	if l.Every <= 0 {
		l.Every = def.Every
	}
	return l
}

var (
	defaultPerAddress = Limit{Burst: 5, Every: time.Minute}
	defaultOverall    = Limit{Burst: 50, Every: 10 * time.Second}
)

// bucket is a limiter with the attempts it has let through that are not
// settled yet: each counts as spent until it turns out to have succeeded,
// so concurrent guesses cannot overdraw it.
type bucket struct {
	lim      *rate.Limiter
	inflight int
}

func newBucket(l Limit) *bucket {
	return &bucket{lim: rate.NewLimiter(rate.Every(l.Every), l.Burst)}
}

// wait is how long until the bucket lets one more attempt through; 0:
// now.
func (b *bucket) wait(now time.Time) time.Duration {
	need := float64(1 + b.inflight)
	have := b.lim.TokensAt(now)
	if have >= need {
		return 0
	}
	return time.Duration((need - have) / float64(b.lim.Limit()) * float64(time.Second))
}

// idle reports whether the bucket is full with nothing in flight: it
// holds nothing worth keeping.
func (b *bucket) idle(now time.Time) bool {
	return b.inflight == 0 && b.lim.TokensAt(now) >= float64(b.lim.Burst())
}

// sweepAt is the number of tracked addresses at which the idle ones are
// dropped. An address holds a bucket only while it is refilling after a
// failure, and failures are bounded overall, so few stay.
const sweepAt = 1024

// loginLimiter keeps the buckets of failed logins.
type loginLimiter struct {
	mu        sync.Mutex
	now       func() time.Time
	per       Limit
	addrs     map[string]*bucket
	all       *bucket
	nextSweep int
}

func newLoginLimiter(l LoginLimits, now func() time.Time) *loginLimiter {
	return &loginLimiter{now: now, per: l.PerAddress.or(defaultPerAddress), addrs: map[string]*bucket{},
		all: newBucket(l.Overall.or(defaultOverall)), nextSweep: sweepAt}
}

// admit lets one login attempt from addr through, or says how long to
// wait and whether the whole server (rather than addr) is limited. The
// caller settles an admitted attempt with done: failed takes a token from
// addr's bucket and the overall one, and limited reports whether addr's
// next attempt will be refused.
func (l *loginLimiter) admit(addr string) (done func(failed bool) (limited bool), wait time.Duration, overall bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.addrs[addr]
	if b == nil {
		if len(l.addrs) >= l.nextSweep {
			for a, x := range l.addrs {
				if x.idle(now) {
					delete(l.addrs, a)
				}
			}
			l.nextSweep = max(sweepAt, 2*len(l.addrs))
		}
		b = newBucket(l.per)
		l.addrs[addr] = b
	}
	if w := b.wait(now); w > 0 {
		return nil, w, false
	}
	if w := l.all.wait(now); w > 0 {
		return nil, w, true
	}
	b.inflight++
	l.all.inflight++
	return func(failed bool) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		b.inflight--
		l.all.inflight--
		if !failed {
			return false
		}
		now := l.now()
		b.lim.ReserveN(now, 1) // taken even if the clock went back: a bucket may go below empty, never above full
		l.all.lim.ReserveN(now, 1)
		return b.wait(now) > 0 || l.all.wait(now) > 0
	}, 0, false
}

// clientAddr is whom a login's failures are counted against: the address
// of the connection, an IPv6 one as its /64 (what one host is commonly
// given). X-Forwarded-For and its kind are not read: the server's config
// names no trusted proxy, and a client sets them to anything. Behind a
// reverse proxy every client has the proxy's address, so they share one
// bucket.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host // not an IP address (a Unix socket, say): such clients share a bucket
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		return netip.PrefixFrom(ip, 64).Masked().String()
	}
	return ip.String()
}

// retryAfter is wait in whole seconds, at least 1, for Retry-After.
func retryAfter(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}

// inWords is a wait as a person reads it.
func inWords(secs int) string {
	switch {
	case secs == 1:
		return "a second"
	case secs < 90:
		return fmt.Sprintf("%d seconds", secs)
	}
	return fmt.Sprintf("%d minutes", (secs+59)/60)
}
