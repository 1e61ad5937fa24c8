package mcp_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	tgruntime "github.com/toolgate/toolgate/runtime"
)

// matrix runs, on a session with `toolgate mcp` whose calls may read dir
// and run sleep: COMPLETED, FAILED (schema), and a long process call that
// reports progress and is then canceled.
func matrix(t *testing.T, cs *sdk.ClientSession, p *progress, dir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	file := filepath.Join(dir, "data.txt")
	res := call(t, ctx, cs, "file.read", map[string]any{"path": file}, nil)
	completed(t, res)
	if !strings.Contains(text(t, res), "matrix") {
		t.Errorf("file.read: %s", text(t, res))
	}
	if o := failed(t, call(t, ctx, cs, "file.read", map[string]any{"path": 5}, nil)); o.State != "FAILED" || o.Error.Type != "ValidationError" || o.Error.Code != "invalid_input" {
		t.Errorf("schema: got %+v, want FAILED, ValidationError invalid_input", o)
	}
	cctx, ccancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		params := &sdk.CallToolParams{Name: "exec_capture", Arguments: map[string]any{"command": "sleep", "args": []string{"120"}}}
		params.SetProgressToken("sleep")
		_, err := cs.CallTool(cctx, params)
		done <- err
	}()
	select {
	case <-p.ch:
	case err := <-done:
		t.Fatalf("the sleep ended before any progress: %v", err)
	case <-ctx.Done():
		t.Fatal("no progress notification")
	}
	p.mu.Lock()
	got := p.got[0]
	p.mu.Unlock()
	if got.ProgressToken != "sleep" || !strings.HasPrefix(got.Message, "running for ") || !strings.HasSuffix(got.Message, " bytes of output so far") {
		t.Errorf("progress %+v, want the elapsed time and the bytes of output", got)
	}
	ccancel()
	if err := <-done; err == nil {
		t.Fatal("the canceled call returned no error")
	}
}

// checkMatrix checks what matrix left in db once the server let go of
// it: per session, a COMPLETED and a FAILED file.read, and the canceled
// exec_capture ABORTED, then ROLLED_BACK; everything as who, and audit
// verify passes.
func checkMatrix(t *testing.T, bin, db, who string, sessions int) {
	t.Helper()
	if out, err := exec.Command(bin, "--db", db, "audit", "verify").CombinedOutput(); err != nil {
		t.Errorf("toolgate audit verify: %v\n%s", err, out)
	}
	rt, err := tgruntime.Open(db, &tgruntime.Options{OpenTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	count := map[string]int{}
	for _, r := range records(t, rt, "") {
		count[r.ToolID+" "+r.State]++
		if r.Principal != who || !strings.HasPrefix(r.CallID, "mcp:") {
			t.Errorf("record %s: principal %q, call id %q; want %s, mcp:SESSION:ID", r.ExecutionID, r.Principal, r.CallID, who)
		}
		if r.ToolID == "exec_capture" && (r.State != "ROLLED_BACK" || !aborted(r) || r.Error == nil || r.Error.Code != "canceled") {
			t.Errorf("the canceled call: %s %+v through %+v, want canceled: ABORTED, then ROLLED_BACK", r.State, r.Error, r.Transitions)
		}
	}
	want := map[string]int{"file.read COMPLETED": sessions, "file.read FAILED": sessions, "exec_capture ROLLED_BACK": sessions}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("records %v, want %v", count, want)
	}
}

func matrixDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data.txt"), []byte("the matrix\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// `toolgate mcp` over stdio: COMPLETED, FAILED (schema), progress, and a
// call canceled mid-run, recorded ABORTED then ROLLED_BACK.
func TestToolgateMCP_StdioMatrix(t *testing.T) {
	bin := toolgate(t)
	dir := matrixDir(t)
	db := filepath.Join(dir, "tg.db")
	cmd := exec.Command(bin, "--db", db, "mcp", "--principal", "tester", "--allow", "filesystem.read:"+dir,
		"--allow", "process.exec:sleep", "--progress-interval", "20ms")
	cmd.Stderr = os.Stderr
	p := newProgress()
	cs := connect(t, &sdk.CommandTransport{Command: cmd}, p, "")
	matrix(t, cs, p, dir)
	cs.Close()
	if err := cmd.Wait(); err != nil && !isExit0(cmd) {
		t.Fatalf("toolgate mcp did not exit cleanly: %v", err)
	}
	checkMatrix(t, bin, db, "tester", 1)
}

// `toolgate mcp --http`, both protocol generations: COMPLETED, FAILED
// (schema), progress and a canceled call, as the token's principal.
func TestToolgateMCP_HTTPMatrix(t *testing.T) {
	bin := toolgate(t)
	dir := matrixDir(t)
	db := filepath.Join(dir, "tg.db")
	cfg := filepath.Join(dir, "server.json")
	hash, err := exec.Command("sh", "-c", "printf tok-1 | "+bin+" serve --hash-token").Output()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cfg, []byte(fmt.Sprintf(`{"tokens":[{"principal":"agent-9","sha256":%q}]}`, strings.TrimSpace(string(hash)))), 0o600)
	cmd := exec.Command(bin, "--db", db, "mcp", "--http", "127.0.0.1:0", "--config", cfg,
		"--allow", "filesystem.read:"+dir, "--allow", "process.exec:sleep", "--progress-interval", "20ms")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("toolgate mcp --http did not stop cleanly: %v", err)
		}
	}
	defer stop()
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
		p := newProgress()
		cs := httpClient(t, url, "tok-1", version, p)
		matrix(t, cs, p, dir)
		cs.Close()
	}
	stop()
	checkMatrix(t, bin, db, "agent-9", 2)
}
