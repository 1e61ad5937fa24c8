package webui

import (
	"net/http"
	"testing"
	"time"
)

// Attempts in flight count against the bucket: guesses sent at once cannot
// overdraw it while they are being checked.
func TestLoginLimiter_InFlightCount(t *testing.T) {
	now := time.Unix(1e9, 0)
	l := newLoginLimiter(LoginLimits{PerAddress: Limit{Burst: 3, Every: time.Minute}}, func() time.Time { return now })
	var pending []func(bool) bool
	for i := range 3 {
		done, _, _ := l.admit("192.0.2.1")
		if done == nil {
			t.Fatalf("attempt %d refused within the burst", i)
		}
		pending = append(pending, done)
	}
	if done, wait, _ := l.admit("192.0.2.1"); done != nil || wait <= 0 {
		t.Fatalf("a 4th attempt while 3 are in flight: admitted (wait %v)", wait)
	}
	pending[0](false) // a success gives its place back
	if done, _, _ := l.admit("192.0.2.1"); done == nil {
		t.Fatal("an attempt after a success settled: refused")
	}
}

// An IPv6 client is counted by its /64; an IPv4 one by its address, the
// IPv4-mapped form alike; forwarding headers are not read.
func TestClientAddr(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.1:5000":               "192.0.2.1",
		"[::ffff:192.0.2.1]:5000":      "192.0.2.1",
		"[2001:db8:1:2:3:4:5:6]:5000":  "2001:db8:1:2::/64",
		"[2001:db8:1:2:ff::1%eth0]:80": "2001:db8:1:2::/64",
		"@":                            "@",
	} {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{"X-Forwarded-For": {"203.0.113.9"}}}
		if got := clientAddr(r); got != want {
			t.Errorf("clientAddr(%q) = %q, want %q", remote, got, want)
		}
	}
}
