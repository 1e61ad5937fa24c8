package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/txn"
)

// asToolgate makes the test binary the toolgate command when it is run as
// a child with this variable set: a real 'toolgate serve' process holding
// a real database, for the tests of a held database.
const asToolgate = "TOOLGATE_CLI_TEST_AS_TOOLGATE"

func init() {
	if os.Getenv(asToolgate) != "1" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, os.Args[1:], Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}

// served is a 'toolgate serve' child process.
type served struct {
	cmd  *exec.Cmd
	addr string
	pid  int
	done chan error
}

// serveChild starts 'toolgate serve' in the work directory dir (see
// workdir) on a loopback port, holding dir's database, and returns when it
// serves. It is stopped (SIGINT) when the test ends, unless it was before.
func serveChild(t *testing.T, dir string) *served {
	t.Helper()
	return serverChild(t, dir, "serve", "--addr", "127.0.0.1:0", "--no-request-log")
}

// serverChild starts the toolgate server command args (serve, mcp --http)
// with a config file and a policy in dir; see serveChild.
func serverChild(t *testing.T, dir string, args ...string) *served {
	t.Helper()
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok")+`"}]}`), 0o600))
	policy := filepath.Join(dir, "policy.json")
	must(t, os.WriteFile(policy, []byte(`{"version":1,"principals":{"agent":["filesystem.read:`+dir+`"]}}`), 0o600))
	args = append(args, "--config", cfg, "--policy", policy, "--db", filepath.Join(dir, "state", "toolgate.db"))
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), asToolgate+"=1")
	stderr, err := cmd.StderrPipe()
	must(t, err)
	must(t, cmd.Start())
	s := &served{cmd: cmd, pid: cmd.Process.Pid, done: make(chan error, 1)}
	t.Cleanup(func() { s.stop(t) })
	lines := bufio.NewScanner(stderr)
	var seen []string
	for lines.Scan() {
		seen = append(seen, lines.Text())
		if m := regexp.MustCompile(`serving (?:MCP )?on http://(\S+)`).FindStringSubmatch(lines.Text()); m != nil {
			s.addr = m[1]
			break
		}
	}
	if s.addr == "" {
		t.Fatalf("toolgate serve did not start:\n%s", strings.Join(seen, "\n"))
	}
	go func() {
		for lines.Scan() { // drain: the child never blocks on its stderr
		}
		s.done <- cmd.Wait()
	}()
	return s
}

// stop interrupts the server and waits for it to exit.
func (s *served) stop(t *testing.T) {
	if s.cmd.ProcessState != nil || s.done == nil {
		return
	}
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		s.cmd.Process.Kill()
		t.Error("toolgate serve did not stop on SIGINT")
	}
	s.done = nil
}

// While a server holds the database, every other command fails naming it:
// its pid, its address and its command line, with what to do instead:
// --wait for a command that writes, and for an inspection how to get the
// read (there is no such read in the server's API but one execution).
func TestHeld_NamesTheServer(t *testing.T) {
	bboltOnly(t, whyHolder)
	dir := workdir(t)
	s := serverChild(t, dir, "serve", "--addr", "127.0.0.1:0", "--no-request-log", "--no-local-socket") // localsock_test.go: with it
	holder := fmt.Sprintf("(pid %d, listening on %s)", s.pid, s.addr)
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`}, []string{"--wait D", "kill -INT " + strconv.Itoa(s.pid), "HTTP API"}},
		{[]string{"intent", "propose", "file.read", "--input", `{"path":"hello.txt"}`}, []string{"--wait D"}},
		{[]string{"executions"}, []string{"'toolgate executions' reads the database file", "--wait D", "kill -INT", "toolgate show ID --token TOKEN"}},
		{[]string{"stats"}, []string{"'toolgate stats'", "--wait D"}},
		{[]string{"audit", "verify"}, []string{"'toolgate audit verify'", "--wait D"}},
		{[]string{"audit", "tail"}, []string{"'toolgate audit tail'", "--wait D"}},
		{[]string{"intent", "list"}, []string{"'toolgate intent list'", "--wait D"}},
	}
	for _, c := range cases {
		r := toolgate(t, "", c.args...)
		if r.code != ExitInternal || !strings.Contains(r.stderr, "is locked by another process, `") || !strings.Contains(r.stderr, " serve --addr 127.0.0.1:0 ") ||
			!strings.Contains(r.stderr, holder) {
			t.Errorf("%v: exit %d, want 1 naming the server %s:\n%s", c.args, r.code, holder, r.stderr)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%v: the message does not say %q:\n%s", c.args, w, r.stderr)
			}
		}
	}
}

// An MCP server over HTTP holding the database is named with its address,
// and no read through an HTTP API it does not serve is offered.
func TestHeld_NamesTheMCPServer(t *testing.T) {
	bboltOnly(t, whyHolder)
	dir := workdir(t)
	s := serverChild(t, dir, "mcp", "--http", "127.0.0.1:0", "--no-local-socket")
	r := toolgate(t, "", "executions")
	if r.code != ExitInternal || !strings.Contains(r.stderr, fmt.Sprintf("(pid %d, listening on %s for MCP)", s.pid, s.addr)) ||
		!strings.Contains(r.stderr, " mcp --http ") || strings.Contains(r.stderr, "--token") {
		t.Fatalf("executions beside 'mcp --http': exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "show", "some-id", "--token", "tok"); r.code != ExitInternal || !strings.Contains(r.stderr, "for MCP)") {
		t.Fatalf("show beside 'mcp --http': exit %d\n%s", r.code, r.stderr)
	}
}

// 'toolgate show' reads through the holding server's HTTP API with the
// user's token; without one it says which flag to pass.
func TestHeld_ShowThroughTheServer(t *testing.T) {
	bboltOnly(t, whyHolder)
	dir := workdir(t)
	s := serverChild(t, dir, "serve", "--addr", "127.0.0.1:0", "--no-request-log", "--no-local-socket")
	c, err := client.New("http://"+s.addr, "tok", nil)
	must(t, err)
	res, err := c.Execute(context.Background(), client.Invocation{Tool: "file.read", Input: json.RawMessage(`{"path":"hello.txt"}`)})
	if err != nil {
		t.Fatal(err)
	}
	r := toolgate(t, "", "show", res.ExecutionID)
	if r.code != ExitInternal || !strings.Contains(r.stderr, fmt.Sprintf("pid %d", s.pid)) || !strings.Contains(r.stderr, "toolgate show "+res.ExecutionID+" --token TOKEN") {
		t.Fatalf("show without a token: exit %d\n%s", r.code, r.stderr)
	}
	r = toolgate(t, "", "show", res.ExecutionID, "--token", "tok")
	if r.code != 0 || !strings.Contains(r.stdout, "State:        COMPLETED") || !strings.Contains(r.stderr, "read through its HTTP API") {
		t.Fatalf("show --token: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	t.Setenv("TOOLGATE_TOKEN", "tok")
	r = toolgate(t, "", "show", res.ExecutionID, "--json")
	var rec txn.Record
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rec) != nil || rec.ExecutionID != res.ExecutionID || rec.State != "COMPLETED" {
		t.Fatalf("show --json with $TOOLGATE_TOKEN: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "show", "no-such-id"); r.code != ExitUsage || !strings.Contains(r.stderr, "no execution no-such-id") {
		t.Errorf("show of an unknown id: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "show", res.ExecutionID, "--token", "wrong"); r.code != ExitUsage || !strings.Contains(r.stderr, "refused the token") {
		t.Errorf("show with a wrong token: exit %d\n%s", r.code, r.stderr)
	}
}

// --wait: a command waits for the holder to exit, and succeeds when it
// does within D; when it does not, it fails naming the holder.
func TestHeld_Wait(t *testing.T) {
	bboltOnly(t, whyHolder)
	dir := workdir(t)
	s := serveChild(t, dir)
	r := toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`, "--wait", "300ms")
	if r.code != ExitInternal || !strings.Contains(r.stderr, fmt.Sprintf("pid %d", s.pid)) || !strings.Contains(r.stderr, "not released within --wait 300ms") {
		t.Fatalf("--wait 300ms against a server that stays: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "executions", "--wait", "-1s"); r.code != ExitUsage {
		t.Errorf("--wait -1s: exit %d\n%s", r.code, r.stderr)
	}

	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(context.Background(), []string{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`, "--wait", "5m"},
			Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	}()
	until(t, done, &errb, func() bool { return strings.Contains(errb.String(), "waiting up to 5m0s") })
	if !strings.Contains(errb.String(), fmt.Sprintf("(pid %d)", s.pid)) {
		t.Errorf("the waiting note does not name the holder:\n%s", errb.String())
	}
	s.stop(t)
	if code := <-done; code != 0 || !strings.Contains(out.String(), "hello") {
		t.Fatalf("run --wait 5m after the server stopped: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
}

// A holder that died without removing its file (SIGKILL) is not named:
// the database opens, and the next holder replaces the file.
func TestHeld_StaleHolder(t *testing.T) {
	bboltOnly(t, whyHolder)
	dir := workdir(t)
	db := filepath.Join(dir, "state", "toolgate.db")
	s := serveChild(t, dir)
	must(t, s.cmd.Process.Kill())
	<-s.done
	s.done = nil
	b, err := os.ReadFile(holderPath(db))
	if err != nil || !strings.Contains(string(b), fmt.Sprintf(`"pid":%d`, s.pid)) {
		t.Fatalf("the killed server left no holder file to test with: %v %s", err, b)
	}
	if r := toolgate(t, "", "executions"); r.code != 0 {
		t.Fatalf("executions after the holder died: exit %d\n%s", r.code, r.stderr)
	}
	// Locked by a process that did not record itself, with the dead
	// server's file still there: the message names no one.
	store, err := txn.Open(db, nil)
	must(t, err)
	defer store.Close()
	must(t, os.WriteFile(holderPath(db), b, 0o600))
	r := toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`)
	if r.code != ExitInternal || strings.Contains(r.stderr, strconv.Itoa(s.pid)) || !strings.Contains(r.stderr, "did not record itself") || !strings.Contains(r.stderr, "--wait D") {
		t.Fatalf("a stale holder file: exit %d\n%s", r.code, r.stderr)
	}
}

// 'audit tail --follow' says why it prints nothing while a server holds
// the database, and prints the events once it has stopped.
func TestHeld_TailFollowSaysWhy(t *testing.T) {
	bboltOnly(t, whyHolder)
	dir := workdir(t)
	s := serveChild(t, dir)
	c, err := client.New("http://"+s.addr, "tok", nil)
	must(t, err)
	if _, err := c.Execute(context.Background(), client.Invocation{Tool: "file.read", Input: json.RawMessage(`{"path":"hello.txt"}`)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"audit", "tail", "--follow"}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	}()
	until(t, done, &errb, func() bool { return strings.Contains(errb.String(), "still following") })
	if !strings.Contains(errb.String(), fmt.Sprintf("(pid %d, listening on %s)", s.pid, s.addr)) {
		t.Errorf("tail --follow does not name the holder:\n%s", errb.String())
	}
	s.stop(t)
	until(t, done, &errb, func() bool { return strings.Contains(out.String(), "COMPLETED") })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("tail --follow: exit %d\n%s", code, errb.String())
	}
	if n := strings.Count(errb.String(), "still following"); n != 1 {
		t.Errorf("said %d times why it printed nothing, want once:\n%s", n, errb.String())
	}
}

// until waits for cond while the command in the background (done) runs;
// it fails when the command ends first, or when cond has not come true
// after a minute (a guard against a hang, not a measure of speed).
func until(t *testing.T, done <-chan int, stderr *syncBuffer, cond func() bool) {
	t.Helper()
	guard := time.After(time.Minute)
	for !cond() {
		select {
		case code := <-done:
			t.Fatalf("the command ended (exit %d) before it was expected to:\n%s", code, stderr.String())
		case <-guard:
			t.Fatalf("still waiting after a minute; stderr so far:\n%s", stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
