package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// TestE2E_ToolgateMCP is the end-to-end check of scripts/e2e-mcp.sh: the
// SDK's client starts `toolgate mcp` over stdio, lists the built-in tools
// and reads a file; the call leaves the same record and audit events as the
// same call through `toolgate run`, but for what names the MCP request.
func TestE2E_ToolgateMCP(t *testing.T) {
	bin := toolgate(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "data.txt")
	if err := os.WriteFile(file, []byte("hello over MCP\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	input := map[string]any{"path": file}
	inJSON, _ := json.Marshal(input)
	viaRun, viaMCP := filepath.Join(dir, "run.db"), filepath.Join(dir, "mcp.db")

	out, err := exec.Command(bin, "--db", viaRun, "run", "file.read", "--principal", "tester",
		"--allow", "filesystem.read:"+dir, "--input", string(inJSON)).CombinedOutput()
	if err != nil {
		t.Fatalf("toolgate run: %v\n%s", err, out)
	}

	cmd := exec.Command(bin, "--db", viaMCP, "mcp", "--principal", "tester", "--allow", "filesystem.read:"+dir)
	cmd.Stderr = os.Stderr
	cs := connect(t, &sdk.CommandTransport{Command: cmd}, nil, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	names := map[string]bool{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names[tool.Name] = true
	}
	if !names["file.read"] || !names["toolgate.execute_intent"] {
		t.Fatalf("tools/list of toolgate mcp: %v", names)
	}
	res := call(t, ctx, cs, "file.read", input, nil)
	completed(t, res)
	if !strings.Contains(text(t, res), "hello over MCP") {
		t.Errorf("file.read over MCP: %s", text(t, res))
	}
	cs.Close()
	cmd.Wait()

	a, ea := onlyRecord(t, viaRun)
	b, eb := onlyRecord(t, viaMCP)
	if !strings.HasPrefix(b.CallID, "mcp:") {
		t.Errorf("the MCP call's call id %q does not name its request", b.CallID)
	}
	if ja, jb := comparable(t, a), comparable(t, b); ja != jb {
		t.Errorf("the record over MCP differs from the one through toolgate run:\nrun: %s\nmcp: %s", ja, jb)
	}
	if len(ea) != len(eb) {
		t.Fatalf("%d audit events through run, %d over MCP", len(ea), len(eb))
	}
	for i := range ea {
		if ja, jb := comparableEvent(t, ea[i]), comparableEvent(t, eb[i]); ja != jb {
			t.Errorf("audit event %d differs:\nrun: %s\nmcp: %s", i+1, ja, jb)
		}
	}
	for _, db := range []string{viaRun, viaMCP} {
		if out, err := exec.Command(bin, "--db", db, "audit", "verify").CombinedOutput(); err != nil {
			t.Errorf("toolgate audit verify %s: %v\n%s", filepath.Base(db), err, out)
		}
	}
}

func onlyRecord(t *testing.T, db string) (*txn.Record, []json.RawMessage) {
	t.Helper()
	rt, err := tgruntime.Open(db, &tgruntime.Options{OpenTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	recs, err := rt.Executions(context.Background(), txn.Filter{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("%s: %d records, %v", db, len(recs), err)
	}
	log, err := rt.AuditLog(context.Background(), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var evs []json.RawMessage
	for _, e := range log {
		evs = append(evs, e.Event)
	}
	return recs[0], evs
}

// comparable is a record without what differs between any two runs (ids,
// times) and what names the front end's request (the call id).
func comparable(t *testing.T, r *txn.Record) string {
	c := *r
	c.ExecutionID, c.CallID, c.AuditEvents = "", "", nil
	c.StartedAt, c.EndedAt = time.Time{}, time.Time{}
	c.Transitions = nil
	for _, tr := range r.Transitions {
		tr.At = time.Time{}
		c.Transitions = append(c.Transitions, tr)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func comparableEvent(t *testing.T, ev json.RawMessage) string {
	var m map[string]any
	if err := json.Unmarshal(ev, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"eventId", "timestamp", "executionId", "callId", "duration", "decisionId"} {
		delete(m, k)
	}
	if d, ok := m["decision"].(map[string]any); ok {
		delete(d, "id")
		delete(d, "at")
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// `toolgate mcp --http` with the tokens of a serve config file.
func TestToolgateMCP_HTTP(t *testing.T) {
	bin := toolgate(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "server.json")
	hash, _ := exec.Command("sh", "-c", "printf tok-1 | "+bin+" serve --hash-token").Output()
	os.WriteFile(cfg, []byte(fmt.Sprintf(`{"tokens":[{"principal":"agent-9","sha256":%q}]}`, strings.TrimSpace(string(hash)))), 0o600)

	// Beyond loopback without --allow-remote, or without a config: refused.
	for _, args := range [][]string{{"--http", "0.0.0.0:0", "--config", cfg}, {"--http", "127.0.0.1:0"}} {
		out, err := exec.Command(bin, append([]string{"--db", filepath.Join(dir, "x.db"), "mcp"}, args...)...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("toolgate mcp %v: %v, want exit 2\n%s", args, err, out)
		}
	}

	cmd := exec.Command(bin, "--db", filepath.Join(dir, "tg.db"), "mcp", "--http", "127.0.0.1:0", "--config", cfg)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("toolgate mcp --http did not stop cleanly: %v", err)
		}
	}()
	sc := bufio.NewScanner(stderr)
	var url string
	for sc.Scan() {
		if _, after, ok := strings.Cut(sc.Text(), "serving MCP on "); ok {
			url, _, _ = strings.Cut(after, " ")
			break
		}
	}
	if url == "" {
		t.Fatal("toolgate mcp --http did not say where it serves")
	}
	go func() {
		for sc.Scan() {
		}
	}()
	for _, version := range []string{"2025-11-25", ""} {
		cs := httpClient(t, url, "tok-1", version, nil)
		res := call(t, context.Background(), cs, "file.list", map[string]any{"path": dir}, nil)
		// agent-9 holds nothing: DENIED, with the token's principal.
		if o := failed(t, res); o.State != "DENIED" || !strings.Contains(o.Error.Message, "agent-9") {
			t.Errorf("%s: got %+v", version, o)
		}
		cs.Close()
	}
}
