package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/mcp"
	"github.com/toolgate/toolgate/txn"
)

// approvalRegistry is a registry file with one tool that requires
// approval.
const approvalRegistry = `tools:
  - id: test.hello
    version: 1.0.0
    description: says hello
    command: echo
    argv: ["hello", "{name}"]
    input_schema: {$schema: "https://json-schema.org/draft/2020-12/schema", type: object, properties: {name: {type: string, description: who, maxLength: 20}}, required: [name], additionalProperties: false}
    limits: {max_execution_time: 10s}
    requires_approval: true
`

// mcpChild is a real 'toolgate mcp' process over stdio, started as a
// desktop agent starts it, with the SDK's client connected.
type mcpChild struct {
	cs     *sdk.ClientSession
	cmd    *exec.Cmd
	stderr *syncBuffer
}

func startMCPChild(t *testing.T, dir string, args ...string) *mcpChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"mcp", "--db", filepath.Join(dir, "state", "toolgate.db")}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), asToolgate+"=1")
	m := &mcpChild{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = m.stderr
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("toolgate mcp: %v\n%s", err, m.stderr.String())
	}
	m.cs = cs
	t.Cleanup(func() { m.close(t) })
	return m
}

// close ends the session: the process exits, as when the agent quits.
func (m *mcpChild) close(t *testing.T) {
	if m.cs == nil {
		return
	}
	if err := m.cs.Close(); err != nil && !strings.Contains(err.Error(), "exit") {
		t.Errorf("closing the session: %v\n%s", err, m.stderr.String())
	}
	m.cs = nil
}

func (m *mcpChild) call(t *testing.T, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := m.cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, m.stderr.String())
	}
	return res
}

// checkSocket checks the socket next to db: a socket, mode 0600, named in
// the holder file of pid.
func checkSocket(t *testing.T, db string, pid int) {
	t.Helper()
	fi, err := os.Lstat(db + ".sock")
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the local socket: %v %v; want a socket, mode 0600", fi, err)
	}
	if h := readHolder(db); h == nil || h.PID != pid || h.Socket != db+".sock" {
		t.Fatalf("the holder file names %+v; want pid %d and its socket", h, pid)
	}
}

// checkGone checks that the holder left neither its socket nor its file.
func checkGone(t *testing.T, db string) {
	t.Helper()
	for _, p := range []string{db + ".sock", holderPath(db)} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s outlived its holder: %v", p, err)
		}
	}
}

// The approval flow of 'toolgate mcp' while the agent's session is live:
// the agent's call answers with an intent; 'toolgate intent approve ID
// --yes', run beside the session, is recorded by the holder through its
// socket; toolgate.execute_intent in the same session then runs it, once.
func TestLocalSocket_MCPApproveDuringSession(t *testing.T) {
	bboltOnly(t, whySocket)
	dir := workdir(t)
	db := filepath.Join(dir, "state", "toolgate.db")
	must(t, os.WriteFile("reg.yaml", []byte(approvalRegistry), 0o600))
	m := startMCPChild(t, dir, "--registry", "reg.yaml", "--principal", "agent-7", "--allow", "process.exec:echo")
	res := m.call(t, "test.hello", map[string]any{"name": "world"})
	in, ok := res.Meta[mcp.MetaIntent].(map[string]any)
	if !ok || res.Meta[mcp.MetaState] != "APPROVAL_REQUIRED" {
		t.Fatalf("the call that requires approval: %+v", res)
	}
	id, hash := in["intentId"].(string), in["hash"].(string)
	checkSocket(t, db, m.cmd.Process.Pid)

	r := toolgate(t, "", "intent", "show", id)
	if r.code != 0 || !strings.Contains(r.stdout, "Status:      PENDING") || !strings.Contains(r.stdout, "Argv:        echo hello world") {
		t.Fatalf("intent show beside the session: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = toolgate(t, "", "intent", "approve", id, "--yes")
	if r.code != 0 || !strings.Contains(r.stdout, "approved "+id) || !strings.Contains(r.stderr, "echo hello world") ||
		!strings.Contains(r.stderr, fmt.Sprintf("held by pid %d", m.cmd.Process.Pid)) {
		t.Fatalf("intent approve --yes beside the session: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// It says how the intent runs while the session holds the database:
	// not 'toolgate run', which cannot open it, but the agent's call.
	if want := fmt.Sprintf(`the agent connected to it runs the intent by calling the tool toolgate.execute_intent with {"id": %q, "hash": %q}`, id, hash); !strings.Contains(r.stdout, want) ||
		strings.Contains(r.stdout, "run it with:") {
		t.Errorf("intent approve beside the session says:\n%s", r.stdout)
	}
	if r := toolgate(t, "", "intent", "approve", id, "--yes"); r.code != ExitDenied || !strings.Contains(r.stderr, "a decision is final") {
		t.Errorf("a second approval: exit %d\n%s", r.code, r.stderr)
	}
	for i := range 2 {
		res = m.call(t, mcp.ExecuteIntentTool, map[string]any{"id": id, "hash": hash})
		switch {
		case i == 0 && res.Meta[mcp.MetaState] != "COMPLETED":
			t.Fatalf("execute_intent after the approval: %+v\n%s", res, m.stderr.String())
		case i == 1 && res.Meta[mcp.MetaState] == "COMPLETED" && res.Meta[mcp.MetaReplayed] != true:
			t.Errorf("execute_intent ran the intent again: %+v", res)
		}
	}
	r = toolgate(t, "", "executions", "--json")
	var recs []txn.Record
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &recs) != nil || len(recs) != 1 || recs[0].State != "COMPLETED" {
		t.Fatalf("executions beside the session: exit %d, want one COMPLETED\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "show", recs[0].ExecutionID); r.code != 0 || !strings.Contains(r.stdout, "State:        COMPLETED") {
		t.Errorf("show beside the session: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "intent", "list"); r.code != 0 || !strings.Contains(r.stdout, id+"  executed") {
		t.Errorf("intent list beside the session: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	m.close(t)
	checkGone(t, db)
	// The holder recorded the approval under the CLI's principal.
	if r := toolgate(t, "", "intent", "show", id); r.code != 0 || !strings.Contains(r.stdout, "approved by "+principal()) {
		t.Errorf("intent show after the session: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "audit", "verify"); r.code != 0 {
		t.Errorf("audit verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// The same beside 'toolgate serve': intents proposed over HTTP are
// listed, approved and rejected with the CLI, and an execution is shown
// without a token.
func TestLocalSocket_Serve(t *testing.T) {
	bboltOnly(t, whySocket)
	dir := workdir(t)
	db := filepath.Join(dir, "state", "toolgate.db")
	s := serveChild(t, dir)
	checkSocket(t, db, s.pid)
	c, err := client.New("http://"+s.addr, "tok", nil)
	must(t, err)
	ctx := context.Background()
	var ids []string
	for _, p := range []string{"hello.txt", "big.txt"} {
		it, err := c.Propose(ctx, client.Invocation{Tool: "file.read", Input: json.RawMessage(`{"path":"` + p + `"}`)})
		must(t, err)
		ids = append(ids, it.ID)
	}
	if r := toolgate(t, "", "intent", "list", "--status", "pending"); r.code != 0 || strings.Count(r.stdout, "pending") != 2 {
		t.Fatalf("intent list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "intent", "approve", ids[0], "--yes", "--approver", "cli:ops"); r.code != 0 ||
		!strings.Contains(r.stdout, "run it through the server: POST http://"+s.addr+"/v1/intents/"+ids[0]+"/execute") ||
		!strings.Contains(r.stdout, "once the server has stopped: toolgate run --intent "+ids[0]) {
		t.Fatalf("intent approve: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "intent", "reject", ids[1], "--reason", "too big"); r.code != 0 || !strings.Contains(r.stdout, "rejected "+ids[1]) {
		t.Fatalf("intent reject: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "intent", "approve", "6b1f3a4e-0000-4000-8000-000000000000", "--yes"); r.code != ExitUsage || !strings.Contains(r.stderr, "no such intent") {
		t.Errorf("approving an unknown intent: exit %d\n%s", r.code, r.stderr)
	}
	// Without a terminal and without --yes, nothing is approved.
	it, err := c.Propose(ctx, client.Invocation{Tool: "file.read", Input: json.RawMessage(`{"path":"sub"}`)})
	must(t, err)
	if r := toolgate(t, "y\n", "intent", "approve", it.ID); r.code != ExitUsage || !strings.Contains(r.stderr, "--yes") {
		t.Errorf("approve without a terminal: exit %d\n%s", r.code, r.stderr)
	}
	res, err := c.ExecuteIntent(ctx, ids[0], mustIntent(t, ids[0]).Hash)
	if err != nil || res.State != "COMPLETED" {
		t.Fatalf("executing the approved intent over HTTP: %+v %v", res, err)
	}
	if _, err := c.ExecuteIntent(ctx, ids[1], mustIntent(t, ids[1]).Hash); err == nil {
		t.Errorf("the rejected intent ran")
	}
	if r := toolgate(t, "", "show", res.ExecutionID); r.code != 0 || !strings.Contains(r.stdout, "State:        COMPLETED") {
		t.Errorf("show without a token: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	s.stop(t)
	checkGone(t, db)
	r := toolgate(t, "", "intent", "show", ids[0])
	if r.code != 0 || !strings.Contains(r.stdout, "approved by cli:ops") || !strings.Contains(r.stdout, "executed by agent") {
		t.Errorf("intent show after the server stopped: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "intent", "show", ids[1]); !strings.Contains(r.stdout, "rejected by "+principal()+": too big") {
		t.Errorf("the rejection: %s", r.stdout)
	}
}

// mustIntent reads an intent through the CLI (and the holder's socket).
func mustIntent(t *testing.T, id string) localIntent {
	t.Helper()
	r := toolgate(t, "", "intent", "show", id, "--json")
	var v localIntent
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil || v.Intent == nil {
		t.Fatalf("intent show %s --json: exit %d\n%s%s", id, r.code, r.stdout, r.stderr)
	}
	return v
}

// A holder killed with SIGKILL leaves its socket: the CLI opens the
// database (the holder is gone), and the next holder replaces the socket.
func TestLocalSocket_StaleSocket(t *testing.T) {
	bboltOnly(t, whySocket)
	dir := workdir(t)
	db := filepath.Join(dir, "state", "toolgate.db")
	s := serveChild(t, dir)
	must(t, s.cmd.Process.Kill())
	<-s.done
	s.done = nil
	if fi, err := os.Lstat(db + ".sock"); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("the killed server left no socket to test with: %v", err)
	}
	if r := toolgate(t, "", "intent", "list"); r.code != 0 || strings.Contains(r.stderr, "socket") {
		t.Fatalf("intent list after the holder died: exit %d\n%s", r.code, r.stderr)
	}
	s = serveChild(t, dir)
	checkSocket(t, db, s.pid)
	c, err := client.New("http://"+s.addr, "tok", nil)
	must(t, err)
	it, err := c.Propose(context.Background(), client.Invocation{Tool: "file.read", Input: json.RawMessage(`{"path":"hello.txt"}`)})
	must(t, err)
	if r := toolgate(t, "", "intent", "approve", it.ID, "--yes"); r.code != 0 {
		t.Fatalf("approve through the replaced socket: exit %d\n%s", r.code, r.stderr)
	}
}

// A holder that does not answer on its socket (stopped) is not waited
// for: the command falls back to the database file and fails on its lock
// as before, naming the holder.
func TestLocalSocket_HolderNotAnswering(t *testing.T) {
	bboltOnly(t, whySocket)
	dir := workdir(t)
	s := serveChild(t, dir)
	must(t, s.cmd.Process.Signal(syscall.SIGSTOP))
	defer s.cmd.Process.Signal(syscall.SIGCONT)
	// The signal is delivered a moment later: ask only once it is stopped
	// (a holder stopped between the probe and the request is bounded by
	// localRequest instead).
	waitStopped(t, s.cmd.Process.Pid)
	r := toolgate(t, "", "intent", "list")
	if r.code != ExitInternal || !strings.Contains(r.stderr, "no answer in time") || !strings.Contains(r.stderr, "is locked by another process") ||
		!strings.Contains(r.stderr, fmt.Sprintf("pid %d", s.pid)) {
		t.Fatalf("intent list beside a stopped holder: exit %d\n%s", r.code, r.stderr)
	}
	must(t, s.cmd.Process.Signal(syscall.SIGCONT))
	if r := toolgate(t, "", "intent", "list"); r.code != 0 {
		t.Fatalf("intent list once the holder runs again: exit %d\n%s", r.code, r.stderr)
	}
}

// What is at the socket's name already is left alone: a symlink (which
// would redirect the socket) or a file; a live socket of another process.
// The holder then serves no socket, and says so.
func TestLocalSocket_LeavesOthersAlone(t *testing.T) {
	bboltOnly(t, whySocket)
	dir := workdir(t)
	db := filepath.Join(dir, "state", "toolgate.db")
	must(t, os.MkdirAll(filepath.Dir(db), 0o700))
	target := filepath.Join(dir, "elsewhere.sock")
	other, err := net.Listen("unix", filepath.Join(dir, "other.sock"))
	must(t, err)
	defer other.Close()
	for _, tc := range []struct {
		name  string
		plant func()
		want  string
	}{
		{"symlink", func() { must(t, os.Symlink(target, db+".sock")) }, "is not a socket (a symbolic link)"},
		{"file", func() { must(t, os.WriteFile(db+".sock", []byte("x"), 0o600)) }, "is not a socket (a file)"},
		{"live socket", func() { must(t, os.Link(filepath.Join(dir, "other.sock"), db+".sock")) }, "another process listens on"},
	} {
		tc.plant()
		before, err := os.Lstat(db + ".sock")
		must(t, err)
		m := startMCPChild(t, dir)
		// Said before it serves; the test reads the child's stderr
		// through a copying goroutine, which may lag.
		if !waitFor(10*time.Second, func() bool { return strings.Contains(m.stderr.String(), tc.want) }) {
			t.Errorf("%s: the holder did not say why it serves no socket:\n%s", tc.name, m.stderr.String())
		}
		if h := readHolder(db); h == nil || h.Socket != "" {
			t.Errorf("%s: the holder file names a socket: %+v", tc.name, h)
		}
		if r := toolgate(t, "", "intent", "list"); r.code != ExitInternal || !strings.Contains(r.stderr, "is locked by another process") {
			t.Errorf("%s: intent list: exit %d\n%s", tc.name, r.code, r.stderr)
		}
		m.close(t)
		after, err := os.Lstat(db + ".sock")
		if err != nil || !os.SameFile(before, after) {
			t.Errorf("%s: what was planted was replaced or removed: %v", tc.name, err)
		}
		if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: the symlink's target was created: %v", tc.name, err)
		}
		must(t, os.Remove(db+".sock"))
	}
}

// asDialer makes the test binary, run with this variable set to a
// socket's path, send one request there as the CLI would and print what
// came back: a client of another OS user.
const asDialer = "TOOLGATE_CLI_TEST_DIAL"

func init() {
	path := os.Getenv(asDialer)
	if path == "" {
		return
	}
	conn, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		fmt.Printf("dial: %v\n", err)
		os.Exit(0)
	}
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET /v1/intents HTTP/1.1\r\nHost: toolgate\r\n%s: cli:intruder\r\nConnection: close\r\n\r\n", principalHeader)
	b := make([]byte, 4096)
	n, err := conn.Read(b)
	fmt.Printf("answer: %q %v\n", b[:n], err)
	os.Exit(0)
}

// Another OS user is not served: the socket's mode keeps it from
// connecting, and a connection that gets through (the mode loosened) is
// closed unanswered. Needs root, to run the other user's process.
func TestLocalSocket_OtherUserRefused(t *testing.T) {
	bboltOnly(t, whySocket)
	if os.Getuid() != 0 {
		t.Skip("needs root to run a process as another user (uid 65534)")
	}
	dir := workdir(t)
	db := filepath.Join(dir, "state", "toolgate.db")
	// The other user may reach the directory and run a copy of this test
	// binary; the database's own files keep their modes.
	bin := filepath.Join(t.TempDir(), "toolgate.test")
	b, err := os.ReadFile(os.Args[0])
	must(t, err)
	must(t, os.WriteFile(bin, b, 0o755))
	for _, d := range []string{filepath.Dir(filepath.Dir(bin)), filepath.Dir(bin), filepath.Dir(dir), dir} {
		must(t, os.Chmod(d, 0o755))
	}
	s := serveChild(t, dir)
	must(t, os.Chmod(filepath.Dir(db), 0o755))
	checkSocket(t, db, s.pid)
	dial := func() string {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), asDialer+"="+db+".sock")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the other user's process: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := dial(); !strings.Contains(out, "permission denied") {
		t.Errorf("another user connected to the 0600 socket: %s", out)
	}
	must(t, os.Chmod(db+".sock", 0o666)) // the mode loosened: the uid check holds alone
	if out := dial(); !regexp.MustCompile(`answer: "" (EOF|.*reset)`).MatchString(out) {
		t.Errorf("another user was answered: %s", out)
	}
	// The holder's own user is still served.
	if r := toolgate(t, "", "intent", "list"); r.code != 0 {
		t.Errorf("intent list: exit %d\n%s", r.code, r.stderr)
	}
}

// A socket at the holder's name that another process serves (one that
// replaced it in the directory) is not used: the CLI talks only to the pid
// the holder file names, and otherwise fails on the lock as before.
func TestLocalSocket_ImpostorRefused(t *testing.T) {
	bboltOnly(t, whySocket)
	dir := workdir(t)
	db := filepath.Join(dir, "state", "toolgate.db")
	s := serveChild(t, dir)
	checkSocket(t, db, s.pid)
	must(t, os.Remove(db+".sock"))
	l, err := net.Listen("unix", db+".sock") // this process: not the holder
	must(t, err)
	defer l.Close()
	var asked atomic.Int32
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Write([]byte("[]"))
	}))
	r := toolgate(t, "", "intent", "list")
	if r.code != ExitInternal || !strings.Contains(r.stderr, "not by the database's holder") || !strings.Contains(r.stderr, "is locked by another process") || asked.Load() != 0 {
		t.Fatalf("intent list beside an impostor's socket: exit %d, the impostor asked %d times\n%s", r.code, asked.Load(), r.stderr)
	}
}

// A holder that dies while the approver reads the prompt has recorded
// nothing: the answer finds no one to record it, the command says so, and
// the intent is still pending, the audit log whole.
func TestLocalSocket_HolderDiesBeforeTheAnswer(t *testing.T) {
	bboltOnly(t, whySocket)
	dir := workdir(t)
	s := serveChild(t, dir)
	c, err := client.New("http://"+s.addr, "tok", nil)
	must(t, err)
	it, err := c.Propose(context.Background(), client.Invocation{Tool: "file.read", Input: json.RawMessage(`{"path":"hello.txt"}`)})
	must(t, err)
	answer, answerW := io.Pipe()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(context.Background(), []string{"intent", "approve", it.ID},
			Stdio{In: answer, Out: &out, Err: &errb, Terminal: func() bool { return true }})
	}()
	until(t, done, &errb, func() bool { return strings.Contains(errb.String(), "Approve this intent as") })
	if !strings.Contains(errb.String(), `"path": "hello.txt"`) {
		t.Errorf("the approver was not shown the intent:\n%s", errb.String())
	}
	must(t, s.cmd.Process.Kill())
	<-s.done
	s.done = nil
	fmt.Fprintln(answerW, "y")
	if code := <-done; code != ExitInternal || !strings.Contains(errb.String(), "whether the decision was recorded is unknown") {
		t.Fatalf("approve after the holder died: exit %d\n%s", code, errb.String())
	}
	if r := toolgate(t, "", "intent", "show", it.ID); r.code != 0 || !regexp.MustCompile(`Status:\s+PENDING`).MatchString(r.stdout) {
		t.Errorf("intent show: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "audit", "verify"); r.code != 0 {
		t.Errorf("audit verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// 'toolgate mcp --http' serves the local socket too.
func TestLocalSocket_MCPHTTP(t *testing.T) {
	bboltOnly(t, whySocket)
	dir := workdir(t)
	db := filepath.Join(dir, "state", "toolgate.db")
	s := serverChild(t, dir, "mcp", "--http", "127.0.0.1:0")
	checkSocket(t, db, s.pid)
	if r := toolgate(t, "", "executions"); r.code != 0 || !strings.Contains(r.stderr, "no executions") {
		t.Fatalf("executions beside 'mcp --http': exit %d\n%s", r.code, r.stderr)
	}
	s.stop(t)
	checkGone(t, db)
}

// An approval through the socket is recorded by the holder and signed with
// the holder's approval key: under a policy that counts only approvals
// signed with that key, the CLI (which has no key) approves, and the
// intent runs in the session.
func TestLocalSocket_SignedByTheHolder(t *testing.T) {
	bboltOnly(t, whySocket)
	dir := workdir(t)
	must(t, os.WriteFile("reg.yaml", []byte(approvalRegistry), 0o600))
	key := filepath.Join(dir, "holder.key")
	r := toolgate(t, "", "--approval-key", key, "intent", "keygen", "holder")
	if r.code != 0 {
		t.Fatalf("keygen: exit %d\n%s", r.code, r.stderr)
	}
	policy := filepath.Join(dir, "policy.json")
	pj, _ := json.Marshal(map[string]any{"version": 1, "principals": map[string]any{}, "approvalKeys": map[string][]string{"*": {strings.TrimSpace(r.stdout)}}})
	must(t, os.WriteFile(policy, pj, 0o600))
	m := startMCPChild(t, dir, "--registry", "reg.yaml", "--principal", "agent-7", "--allow", "process.exec:echo", "--policy", policy, "--approval-key", key)
	res := m.call(t, "test.hello", map[string]any{"name": "world"})
	in, _ := res.Meta[mcp.MetaIntent].(map[string]any)
	id, _ := in["intentId"].(string)
	if r := toolgate(t, "", "intent", "approve", id, "--yes"); r.code != 0 {
		t.Fatalf("intent approve beside the session: exit %d\n%s", r.code, r.stderr)
	}
	res = m.call(t, mcp.ExecuteIntentTool, map[string]any{"id": id, "hash": in["hash"]})
	if res.Meta[mcp.MetaState] != "COMPLETED" {
		t.Fatalf("execute_intent after an approval signed by the holder: %+v\n%s", res, m.stderr.String())
	}
	m.close(t)
	if r := toolgate(t, "", "intent", "show", id); !strings.Contains(r.stdout, "approved by "+principal()+", signed with key holder") {
		t.Errorf("intent show: %s%s", r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "--policy", policy, "audit", "verify"); r.code != 0 {
		t.Errorf("audit verify under the keyed policy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// waitStopped waits until process pid is stopped (state T in /proc).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 0 && (f[0] == "T" || f[0] == "t") {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("process %d did not stop", pid)
}

// waitFor polls ok until it holds or d has passed, and says which.
func waitFor(d time.Duration, ok func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(5 * time.Millisecond) {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
