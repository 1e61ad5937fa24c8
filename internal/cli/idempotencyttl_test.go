package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// --idempotency-ttl sets how long the key holds the call's result: past a
// short TTL the same key runs again; within a long one it replays. A TTL
// that is not positive, or one without a key, is a usage error that
// creates no database.
func TestRun_IdempotencyTTL(t *testing.T) {
	workdir(t)
	type result struct {
		ExecutionID string `json:"executionId"`
		Replayed    bool   `json:"replayed"`
	}
	run := func(key string, extra ...string) result {
		t.Helper()
		args := append([]string{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`,
			"--idempotency-key", key, "--json"}, extra...)
		r := toolgate(t, "", args...)
		var res result
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != ExitCompleted {
			t.Fatalf("%v: exit %d %v\n%s%s", args, r.code, err, r.stdout, r.stderr)
		}
		return res
	}

	for _, args := range [][]string{
		{"--idempotency-key", "k", "--idempotency-ttl", "0s"},
		{"--idempotency-key", "k", "--idempotency-ttl", "-1m"},
		{"--idempotency-key", "k", "--idempotency-ttl", "soon"},
		{"--idempotency-ttl", "1h"},
	} {
		r := toolgate(t, "", append([]string{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`}, args...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, "--idempotency-") {
			t.Errorf("%v: exit %d %s; want a usage error", args, r.code, r.stderr)
		}
	}
	if dbCreated(t, theDB()) {
		t.Error("a refused --idempotency-ttl created the database")
	}

	first := run("short", "--idempotency-ttl", "1ms")
	time.Sleep(20 * time.Millisecond) // past the key's expiry
	if again := run("short"); again.Replayed || again.ExecutionID == first.ExecutionID {
		t.Errorf("after a 1ms TTL the key still replayed %s", again.ExecutionID)
	}
	first = run("long", "--idempotency-ttl", "1h")
	time.Sleep(20 * time.Millisecond)
	if again := run("long"); !again.Replayed || again.ExecutionID != first.ExecutionID {
		t.Errorf("within a 1h TTL the key ran again: %+v", again)
	}
}
