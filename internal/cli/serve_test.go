package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/server"
)

func TestServe_Refusals(t *testing.T) {
	dir := workdir(t)
	if r := toolgate(t, "", "serve"); r.code != ExitUsage || !strings.Contains(r.stderr, "--config") {
		t.Errorf("no config: %d %s", r.code, r.stderr)
	}
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok")+`"}]}`), 0o600))
	if r := toolgate(t, "", "serve", "--config", cfg, "--addr", "0.0.0.0:0"); r.code != ExitUsage || !strings.Contains(r.stderr, "--allow-remote") {
		t.Errorf("a public address without --allow-remote: %d %s", r.code, r.stderr)
	}
	bad := filepath.Join(dir, "bad.json")
	must(t, os.WriteFile(bad, []byte(`{"tokens":[{"principal":"agent","sha256":"tok"}]}`), 0o600))
	if r := toolgate(t, "", "serve", "--config", bad); r.code != ExitUsage || !strings.Contains(r.stderr, "64 hex") {
		t.Errorf("a clear token in the config: %d %s", r.code, r.stderr)
	}
	if r := toolgate(t, "tok\n", "serve", "--hash-token"); r.code != 0 || strings.TrimSpace(r.stdout) != server.HashToken("tok") {
		t.Errorf("--hash-token: %d %q", r.code, r.stdout)
	}
	// An address in use: refused before the database is created.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer taken.Close()
	db := filepath.Join(dir, "fresh", "serve.db")
	if r := toolgate(t, "", "serve", "--config", cfg, "--addr", taken.Addr().String(), "--db", db); r.code != ExitInternal || !strings.Contains(r.stderr, "address already in use") {
		t.Errorf("an address in use: %d %s", r.code, r.stderr)
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused server created its database: %v", err)
	}
}

// toolgate serve runs, answers a client under the policy, and stops
// cleanly when its context ends (as on SIGINT).
func TestServe_RunsAndStops(t *testing.T) {
	dir := workdir(t)
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok")+`"}]}`), 0o600))
	policy := filepath.Join(dir, "policy.json")
	must(t, os.WriteFile(policy, []byte(`{"version":1,"principals":{"agent":["filesystem.read:`+dir+`"]}}`), 0o600))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	ctx, stop := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve", "--config", cfg, "--policy", policy, "--addr", addr}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	}()
	c, err := client.New("http://"+addr, "tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	waitServing(t, &errb, done)
	res, err := c.Execute(context.Background(), client.Invocation{Tool: "file.read", Input: json.RawMessage(`{"path":"hello.txt"}`)})
	if err != nil || !strings.Contains(string(res.Output), "hello") {
		t.Fatalf("execute through serve: %v\n%s", err, errb.String())
	}
	if _, err := c.Execute(context.Background(), client.Invocation{Tool: "file.read", Input: json.RawMessage(`{"path":"/etc/hostname"}`)}); err == nil {
		t.Error("read outside the policy's grant")
	}
	stop()
	select {
	case code := <-done:
		if code != 0 || !regexp.MustCompile(`serving on http://`).MatchString(errb.String()) || !strings.Contains(errb.String(), "stopped") {
			t.Fatalf("exit %d\n%s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	if r := toolgate(t, "", "executions", "--json"); !strings.Contains(r.stdout, "COMPLETED") {
		t.Errorf("the served invocations are not in the database:\n%s", r.stdout)
	}

}

// waitServing waits until toolgate serve, run by Main with stderr errb,
// says it serves (its listener is open from then on), however long a
// loaded machine takes to start it; it fails the test if serve exits
// first (its code is put back in done, for the caller's cleanup).
func waitServing(t *testing.T, errb *syncBuffer, done chan int) {
	t.Helper()
	guard := time.Now().Add(time.Minute) // a hang guard, not a timing assertion
	for !strings.Contains(errb.String(), "toolgate: serving on http://") {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("toolgate serve exited %d before it served:\n%s", code, errb.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(guard) {
			t.Fatalf("toolgate serve did not serve within a minute:\n%s", errb.String())
		}
	}
}

// The config file's idempotencyTTL reaches the runtime toolgate serve
// opens: past a 1ms TTL the same Idempotency-Key runs again.
func TestServe_IdempotencyTTL(t *testing.T) {
	dir := workdir(t)
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok")+`"}],"idempotencyTTL":"1ms"}`), 0o600))
	policy := filepath.Join(dir, "policy.json")
	must(t, os.WriteFile(policy, []byte(`{"version":1,"principals":{"agent":["filesystem.read:`+dir+`"]}}`), 0o600))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	l.Close()
	ctx, stop := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve", "--config", cfg, "--policy", policy, "--addr", addr}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	}()
	defer func() { stop(); <-done }()
	c, err := client.New("http://"+addr, "tok", nil)
	must(t, err)
	keyed := client.Invocation{Tool: "file.read", Input: json.RawMessage(`{"path":"hello.txt"}`), IdempotencyKey: "k"}
	waitServing(t, &errb, done)
	first, err := c.Execute(context.Background(), keyed)
	if err != nil {
		t.Fatalf("execute through serve: %v\n%s", err, errb.String())
	}
	time.Sleep(20 * time.Millisecond) // past the key's expiry
	again, err := c.Execute(context.Background(), keyed)
	if err != nil || again.Replayed || again.ExecutionID == first.ExecutionID {
		t.Errorf("past the config's 1ms idempotencyTTL the key replayed: %v", err)
	}
}
