package cli

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/server"
)

// startServe runs toolgate serve with args on a free loopback address
// until the test ends; it returns the address once the server answers.
func startServe(t *testing.T, args ...string) (addr string, stderr *syncBuffer) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr = l.Addr().String()
	l.Close()
	ctx, stop := context.WithCancel(context.Background())
	var out syncBuffer
	stderr = &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, append([]string{"serve", "--addr", addr}, args...), Stdio{In: strings.NewReader(""), Out: &out, Err: stderr})
	}()
	t.Cleanup(func() { stop(); <-done })
	waitServing(t, stderr, done)
	return addr, stderr
}

// serve mounts the web UI under /ui/ by default, and not with --no-ui.
func TestServe_UI(t *testing.T) {
	dir := workdir(t)
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"alice","sha256":"`+server.HashToken("tok")+`","approver":true}]}`), 0o600))
	addr, stderr := startServe(t, "--config", cfg, "--jaeger-url", "http://localhost:16686")
	resp, err := http.Get("http://" + addr + "/ui/login")
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `name="token"`) || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("GET /ui/login: %d\n%s", resp.StatusCode, body)
	}
	if !strings.Contains(stderr.String(), "web UI on http://"+addr+"/ui/") {
		t.Errorf("serve does not say where the UI is:\n%s", stderr.String())
	}

	cfg2 := filepath.Join(dir, "server2.json")
	must(t, os.WriteFile(cfg2, []byte(`{"tokens":[]}`), 0o600))
	t.Setenv("TOOLGATE_DB", filepath.Join(dir, "other.db"))
	addr2, _ := startServe(t, "--config", cfg2, "--no-ui")
	resp, err = http.Get("http://" + addr2 + "/ui/login")
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("--no-ui: GET /ui/login %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// The UI's and the webhook's settings are checked before serving: a bad
// Jaeger URL, a checkpoint that cannot be read and a webhook header whose
// environment variable is not set are usage errors.
func TestServe_UIRefusals(t *testing.T) {
	dir := workdir(t)
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[]}`), 0o600))
	hook := filepath.Join(dir, "hook.json")
	must(t, os.WriteFile(hook, []byte(`{"tokens":[],"notify":{"webhook":{"url":"http://127.0.0.1:1/x","headers":{"Authorization":"TG_TEST_UNSET_HOOK_AUTH"}}}}`), 0o600))
	os.Unsetenv("TG_TEST_UNSET_HOOK_AUTH")
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"jaeger":     {[]string{"--config", cfg, "--jaeger-url", "ftp://jaeger"}, "Jaeger URL"},
		"checkpoint": {[]string{"--config", cfg, "--audit-checkpoint", filepath.Join(dir, "missing.cp")}, "--checkpoint"},
		"webhook":    {[]string{"--config", hook}, "TG_TEST_UNSET_HOOK_AUTH is not set"},
	} {
		if r := toolgate(t, "", append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...); r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d, want %d with %q:\n%s", name, r.code, ExitUsage, tc.want, r.stderr)
		}
	}
}

// The config's webhook gets each intent proposed through serve, with the
// header from the environment and a link to the UI at the listener's
// address.
func TestServe_Webhook(t *testing.T) {
	dir := workdir(t)
	got := make(chan *http.Request, 4)
	bodies := make(chan []byte, 4)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- b
	}))
	defer rc.Close()
	t.Setenv("TG_TEST_HOOK_AUTH", "Bearer from-env")
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok")+`"}],
		"notify":{"webhook":{"url":"`+rc.URL+`/hook","headers":{"Authorization":"TG_TEST_HOOK_AUTH"}}}}`), 0o600))
	addr, stderr := startServe(t, "--config", cfg)
	c, err := client.New("http://"+addr, "tok", nil)
	must(t, err)
	in, err := c.Propose(context.Background(), client.Invocation{Tool: "file.read", Input: json.RawMessage(`{"path":"x.txt"}`)})
	must(t, err)
	select {
	case r := <-got:
		var m map[string]string
		must(t, json.Unmarshal(<-bodies, &m))
		if r.Header.Get("Authorization") != "Bearer from-env" || m["id"] != in.ID || m["link"] != "http://"+addr+"/ui/intents/"+in.ID || m["proposer"] != "agent" || m["tool"] != "file.read" {
			t.Fatalf("webhook got %q %v", r.Header.Get("Authorization"), m)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no webhook call:\n%s", stderr.String())
	}
}

// --audit-checkpoint: the UI's audit page checks the live log against the
// checkpoint file, read again on each view.
func TestServe_UIAuditCheckpoint(t *testing.T) {
	dir := workdir(t)
	must(t, os.WriteFile("hello.txt", []byte("hi"), 0o600))
	if r := toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	key := filepath.Join(dir, "audit.key")
	r := toolgate(t, "", "audit", "checkpoint", "--key", key)
	if r.code != 0 {
		t.Fatalf("checkpoint: %d %s", r.code, r.stderr)
	}
	cp := filepath.Join(dir, "cp.txt")
	must(t, os.WriteFile(cp, []byte(r.stdout), 0o600))
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"alice","sha256":"`+server.HashToken("tok")+`","approver":true}]}`), 0o600))
	addr, _ := startServe(t, "--config", cfg, "--audit-checkpoint", cp, "--audit-key", key)

	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	resp, err := hc.PostForm("http://"+addr+"/ui/login", url.Values{"token": {"tok"}})
	must(t, err)
	resp.Body.Close()
	page := func() string {
		resp, err := hc.Get("http://" + addr + "/ui/audit")
		must(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if p := page(); !strings.Contains(p, "The log extends it.") || !strings.Contains(p, "Valid: ") {
		t.Fatalf("audit page:\n%s", p)
	}
	must(t, os.WriteFile(cp, []byte(strings.Replace(r.stdout, "toolgate audit log", "forged log", 1)), 0o600))
	if p := page(); strings.Contains(p, "The log extends it.") || !strings.Contains(p, "does not verify") {
		t.Fatalf("a forged checkpoint:\n%s", p)
	}
}
