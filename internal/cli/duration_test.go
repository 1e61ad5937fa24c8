package cli

import (
	"strings"
	"testing"
	"time"
)

// --since (and every duration flag) accepts days and weeks as well as Go's
// units, and a bad one is a usage error that says the accepted forms.
func TestDurationFlags_DaysAndWeeks(t *testing.T) {
	const day = 24 * time.Hour
	for in, want := range map[string]time.Duration{
		"1d": day, "2w": 14 * day, "1w2d": 9 * day, "1d12h": day + 12*time.Hour, "1.5d": 36 * time.Hour,
		"90s": 90 * time.Second, "1h30m": 90 * time.Minute, "0": 0, "-1d": -day,
	} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1", "d", "1x", "1dd", "1h1d", "1d-1h", "--1d"} {
		if got, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q) = %v, want an error", in, got)
		}
	}

	workdir(t)
	for arg, want := range map[string]time.Duration{"1d": day, "2w": 14 * day} {
		before := time.Now()
		out := statsRun(t, "--since", arg)
		cutoff, err := time.Parse(time.RFC3339, *out.Since)
		if err != nil || cutoff.Before(before.Add(-want-time.Second)) || cutoff.After(time.Now().Add(-want+time.Second)) {
			t.Errorf("--since %s: cutoff %q (%v), want %v ago", arg, *out.Since, err, want)
		}
	}
	r := toolgate(t, "", "stats", "--since", "1x")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "d (day, 24h) or w (week, 7d)") {
		t.Errorf("--since 1x: exit %d, %s; want 2 and the accepted forms", r.code, r.stderr)
	}
	if r := toolgate(t, "", "run", "file.read", "--idempotency-key", "k", "--idempotency-ttl", "7d", "--input", `{"path":"hello.txt"}`, "--allow", "filesystem.read:."); r.code != 0 {
		t.Errorf("--idempotency-ttl 7d: exit %d, %s", r.code, r.stderr)
	}
	if h := toolgate(t, "", "stats", "--help"); !strings.Contains(h.stdout, "1d") || !strings.Contains(h.stdout, "2w") {
		t.Errorf("stats --help does not say that days and weeks are accepted:\n%s", h.stdout)
	}
}
