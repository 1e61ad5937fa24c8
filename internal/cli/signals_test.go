package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/boltstore"
)

// procInfo is what the test reads of a process in /proc.
type procInfo struct {
	pid, ppid, pgid int
	state           byte
	cmdline         string
}

func readProc(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return procInfo{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgid, _ := strconv.Atoi(f[2])
	cl, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return procInfo{pid: pid, ppid: ppid, pgid: pgid, state: f[0][0], cmdline: strings.ReplaceAll(strings.TrimRight(string(cl), "\x00"), "\x00", " ")}, true
}

// running reports whether pid is a process that has not ended (a zombie
// has: it only waits for its parent to reap it).
func running(pid int) bool {
	p, ok := readProc(pid)
	return ok && p.state != 'Z' && p.state != 'X'
}

// findProc returns the running process whose command line is cmdline
// (its program named by its base name) and that matches ok, if any.
func findProc(cmdline string, ok func(procInfo) bool) (procInfo, bool) {
	d, _ := os.ReadDir("/proc")
	for _, e := range d {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, found := readProc(pid); found && filepath.Base(p.cmdline) == cmdline && p.state != 'Z' && ok(p) {
			return p, true
		}
	}
	return procInfo{}, false
}

// A `toolgate run` of exec_status is killed with SIGKILL while the tool's
// process runs. The tool's process dies with it, within a second. What
// that process started (here a second sleep in its process group, which
// the parent-death signal does not reach) is killed by the recovery,
// before it records the attempt; and the record, answered to the retry of
// the call's idempotency key, says so: ROLLED_BACK, interrupted, and the
// process it left running killed. On Postgres the recovery is another
// node's, once the killed node's lease has expired.
func TestKill9_ProcessToolDiesWithToolgate(t *testing.T) {
	t.Run("bbolt", func(t *testing.T) {
		dir := workdir(t)
		kill9DuringExecStatus(t, dir, filepath.Join(dir, "state", "toolgate.db"), false)
	})
	t.Run("serve", func(t *testing.T) {
		dir := workdir(t)
		kill9ServeDuringExecStatus(t, dir)
	})
	t.Run("postgres", func(t *testing.T) {
		base := os.Getenv("TOOLGATE_TEST_POSTGRES")
		if base == "" {
			t.Skip("TOOLGATE_TEST_POSTGRES is not set; run it with: bash scripts/pg-test.sh run go test -run TestKill9_ProcessToolDiesWithToolgate ./internal/cli")
		}
		dir := workdir(t)
		kill9DuringExecStatus(t, dir, freshPostgres(t), true)
	})
}

func kill9DuringExecStatus(t *testing.T, dir, db string, postgres bool) {
	// A distinct duration marks this test's sleeps among the machine's.
	long := strconv.Itoa(3000 + int(time.Now().UnixNano()%1000))
	script := "sleep " + long + "1 & exec sleep " + long + "2"
	args := []string{"run", "exec_status", "--allow", "process.exec:sh", "--idempotency-key", "k1", "--db", db,
		"--input", `{"command":"sh","args":["-c","` + script + `"]}`}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), asToolgate+"=1", "TOOLGATE_NODE=a", "TOOLGATE_LEASE=1s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	// The tool's process (the exec'd "sleep …2") is toolgate's child; the
	// "sleep …1" it started is in its process group.
	var leader, grand procInfo
	for i := 0; ; i++ {
		var ok bool
		if leader, ok = findProc("sleep "+long+"2", func(p procInfo) bool { return p.ppid == cmd.Process.Pid }); ok {
			if grand, ok = findProc("sleep "+long+"1", func(p procInfo) bool { return p.pgid == leader.pid }); ok {
				break
			}
		}
		if i == 3000 {
			t.Fatalf("the tool's processes did not start within 30 s; toolgate said:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() { syscall.Kill(grand.pid, syscall.SIGKILL); syscall.Kill(leader.pid, syscall.SIGKILL) })
	waitForRecordedProcess(t, db, leader.pid, postgres)

	must(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()
	deadline := time.Now().Add(time.Second)
	for running(leader.pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the tool's process %d (%s) still runs a second after toolgate was killed", leader.pid, leader.cmdline)
		}
		time.Sleep(5 * time.Millisecond)
	}

	if postgres {
		time.Sleep(1200 * time.Millisecond) // node a's lease expires
		t.Setenv("TOOLGATE_NODE", "b")
	}
	r := toolgate(t, "", args...)
	if running(grand.pid) {
		t.Errorf("recovery left the tool's grandchild %d (%s) running", grand.pid, grand.cmdline)
	}
	if r.code != ExitAborted || !strings.Contains(r.stderr, "ROLLED_BACK") || !strings.Contains(r.stderr, "1 process it left running was killed at recovery") {
		t.Errorf("the retry of the key: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	s, err := txn.Open(db, &txn.Options{ReadOnly: true})
	must(t, err)
	defer s.Close()
	recs, err := s.List(context.Background(), txn.Filter{})
	must(t, err)
	if len(recs) != 1 || recs[0].State != "ROLLED_BACK" || recs[0].Error == nil || recs[0].Error.Code != "interrupted" ||
		!strings.Contains(recs[0].Error.Message, "1 process it left running was killed at recovery") || recs[0].Processes != nil {
		for _, rec := range recs {
			t.Logf("record %+v, error %+v", rec, rec.Error)
		}
		t.Fatalf("%d records: want the one interrupted attempt, saying its process was killed", len(recs))
	}
}

// kill9ServeDuringExecStatus is kill9DuringExecStatus with `toolgate
// serve` running the call, and the next `toolgate run` on its database
// recovering it.
func kill9ServeDuringExecStatus(t *testing.T, dir string) {
	db := filepath.Join(dir, "state", "toolgate.db")
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok")+`"}]}`), 0o600))
	policy := filepath.Join(dir, "policy.json")
	must(t, os.WriteFile(policy, []byte(`{"version":1,"principals":{"agent":["process.exec:sh"]}}`), 0o600))
	cmd := exec.Command(os.Args[0], "serve", "--addr", "127.0.0.1:0", "--no-request-log", "--no-local-socket",
		"--config", cfg, "--policy", policy, "--db", db)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), asToolgate+"=1")
	stderr, err := cmd.StderrPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	var addr string
	for addr == "" && sc.Scan() {
		if m := regexp.MustCompile(`serving on http://(\S+)`).FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatal("toolgate serve did not start")
	}
	go func() {
		for sc.Scan() {
		}
	}()

	long := strconv.Itoa(3000 + int(time.Now().UnixNano()%1000))
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/tools/exec_status/execute",
			strings.NewReader(`{"input":{"command":"sh","args":["-c","sleep `+long+`1 & exec sleep `+long+`2"]}}`))
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	var leader, grand procInfo
	for i := 0; ; i++ {
		var ok bool
		if leader, ok = findProc("sleep "+long+"2", func(p procInfo) bool { return p.ppid == cmd.Process.Pid }); ok {
			if grand, ok = findProc("sleep "+long+"1", func(p procInfo) bool { return p.pgid == leader.pid }); ok {
				break
			}
		}
		if i == 3000 {
			t.Fatal("the tool's processes did not start within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() { syscall.Kill(grand.pid, syscall.SIGKILL); syscall.Kill(leader.pid, syscall.SIGKILL) })
	waitForRecordedProcess(t, db, leader.pid, false)

	must(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()
	deadline := time.Now().Add(time.Second)
	for running(leader.pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the tool's process %d (%s) still runs a second after toolgate serve was killed", leader.pid, leader.cmdline)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// The next process to open the database recovers the call.
	toolgate(t, "", "run", "which_command", "--db", db, "--input", `{"command":"sh"}`)
	if running(grand.pid) {
		t.Errorf("recovery left the tool's grandchild %d (%s) running", grand.pid, grand.cmdline)
	}
	s, err := txn.Open(db, &txn.Options{ReadOnly: true})
	must(t, err)
	defer s.Close()
	recs, err := s.List(context.Background(), txn.Filter{ToolID: "exec_status"})
	must(t, err)
	if len(recs) != 1 || recs[0].State != "ROLLED_BACK" || recs[0].Error == nil || recs[0].Error.Code != "interrupted" ||
		!strings.Contains(recs[0].Error.Message, "1 process it left running was killed at recovery") {
		for _, rec := range recs {
			t.Logf("record %+v, error %+v", rec, rec.Error)
		}
		t.Fatalf("%d records of exec_status: want the one interrupted attempt, saying its process was killed", len(recs))
	}
}

// waitForRecordedProcess waits until the claim of the running execution
// holds the process pid. A bbolt file is locked by its writer: a copy of
// it is read.
func waitForRecordedProcess(t *testing.T, db string, pid int, postgres bool) {
	t.Helper()
	for i := 0; ; i++ {
		if i == 3000 {
			t.Fatalf("no claim recorded process %d within 30 s", pid)
		}
		if i > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		path := db
		if !postgres {
			b, err := os.ReadFile(db)
			if err != nil {
				continue
			}
			path = filepath.Join(t.TempDir(), "copy.db")
			must(t, os.WriteFile(path, b, 0o600))
			// The claim is in the write-ahead log until a checkpoint: the
			// copy's open applies it.
			if l, err := os.ReadFile(boltstore.WALPath(db)); err == nil {
				must(t, os.WriteFile(boltstore.WALPath(path), l, 0o600))
			}
		}
		s, err := txn.Open(path, &txn.Options{ReadOnly: true})
		if err != nil {
			continue // a torn copy
		}
		recs, _ := s.List(context.Background(), txn.Filter{})
		s.Close()
		for _, r := range recs {
			for _, p := range r.Processes {
				if p.Pid == pid {
					return
				}
			}
		}
	}
}

// SIGTERM to `toolgate serve` while a call runs: the server says how many
// running calls it waits for and for how long; at the end of the grace
// period the call is stopped, its process killed, and its caller is told
// in plain words why (not "canceled: closed").
func TestServe_SIGTERMWaitsForRunningCalls(t *testing.T) {
	dir := workdir(t)
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"gracePeriod":"1s","tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok")+`"}]}`), 0o600))
	policy := filepath.Join(dir, "policy.json")
	must(t, os.WriteFile(policy, []byte(`{"version":1,"principals":{"agent":["process.exec:sleep"]}}`), 0o600))
	cmd := exec.Command(os.Args[0], "serve", "--addr", "127.0.0.1:0", "--no-request-log", "--no-local-socket",
		"--config", cfg, "--policy", policy, "--db", filepath.Join(dir, "state", "toolgate.db"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), asToolgate+"=1")
	stderr, err := cmd.StderrPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var addr string
	var said []string
	for addr == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("toolgate serve did not start:\n%s", strings.Join(said, "\n"))
			}
			said = append(said, l)
			if m := regexp.MustCompile(`serving on http://(\S+)`).FindStringSubmatch(l); m != nil {
				addr = m[1]
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("toolgate serve did not start:\n%s", strings.Join(said, "\n"))
		}
	}

	long := strconv.Itoa(3000 + int(time.Now().UnixNano()%1000))
	answer := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/tools/exec_status/execute",
			strings.NewReader(`{"input":{"command":"sleep","args":["`+long+`"]}}`))
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answer <- "error: " + err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answer <- string(b)
	}()
	var sleep procInfo
	for i := 0; ; i++ {
		var ok bool
		if sleep, ok = findProc("sleep "+long, func(p procInfo) bool { return p.ppid == cmd.Process.Pid }); ok {
			break
		}
		if i == 3000 {
			t.Fatal("the tool's process did not start within 30 s")
		}
		select {
		case b := <-answer:
			t.Fatalf("the call ended before its process was seen: %s", b)
		default:
		}
		time.Sleep(10 * time.Millisecond)
	}

	must(t, cmd.Process.Signal(syscall.SIGTERM))
	var body string
	select {
	case body = <-answer:
	case <-time.After(30 * time.Second):
		t.Fatal("no answer to the running call after SIGTERM")
	}
	for l := range lines {
		said = append(said, l)
	}
	cmd.Wait()
	log := strings.Join(said, "\n")
	if !strings.Contains(log, "waiting up to 1s (the grace period) for 1 running call to finish") ||
		!strings.Contains(log, "the grace period of 1s ended: stopped the calls still running") {
		t.Errorf("serve's log does not say what it waits for:\n%s", log)
	}
	if strings.Contains(body, "canceled: closed") || !strings.Contains(body, "was stopped: the server shut down, and the call did not finish within the shutdown's grace period") {
		t.Errorf("the caller's answer: %s", body)
	}
	if running(sleep.pid) {
		t.Errorf("the tool's process %d still runs after the server stopped", sleep.pid)
	}
}

// A limit's error names the limit once, and says the sizes in words.
func TestRun_FileSizeLimitSaidOnce(t *testing.T) {
	workdir(t)
	r := toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"big.txt"}`)
	if r.code != ExitAborted || strings.Contains(r.stderr, "file_size_limit: file_size_limit") ||
		!strings.Contains(r.stderr, "the file size, 1048577 bytes, is over the tool's limit of 1048576 bytes (maxFileSize)") {
		t.Errorf("exit %d\n%s", r.code, r.stderr)
	}
}

// A second node started under the name of a running node is told so, by
// `run` and `serve` alike: the lease's sentence, not the file lock's.
func TestPostgres_SameNodeNameSaysWhoRuns(t *testing.T) {
	base := os.Getenv("TOOLGATE_TEST_POSTGRES")
	if base == "" {
		t.Skip("TOOLGATE_TEST_POSTGRES is not set; run it with: bash scripts/pg-test.sh run go test -run TestPostgres_SameNodeNameSaysWhoRuns ./internal/cli")
	}
	dir := workdir(t)
	db := freshPostgres(t)
	node, err := txn.Open(db, &txn.Options{Node: "a"})
	must(t, err)
	defer node.Close()
	t.Setenv("TOOLGATE_NODE", "a")
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok")+`"}]}`), 0o600))
	for _, args := range [][]string{
		{"run", "which_command", "--db", db, "--input", `{"command":"sh"}`},
		{"serve", "--config", cfg, "--db", db, "--addr", "127.0.0.1:0", "--no-ui", "--no-local-socket"},
	} {
		r := toolgate(t, "", args...)
		if r.code != ExitInternal || !strings.Contains(r.stderr, "node a is running") || strings.Contains(r.stderr, "did not record itself") {
			t.Errorf("%s: exit %d\n%s", args[0], r.code, r.stderr)
		}
	}
}

// doctor on a new, empty Postgres database: its normal first state, said
// so, and exit 0; the read commands see it as empty.
func TestDoctor_EmptyPostgresIsFine(t *testing.T) {
	base := os.Getenv("TOOLGATE_TEST_POSTGRES")
	if base == "" {
		t.Skip("TOOLGATE_TEST_POSTGRES is not set; run it with: bash scripts/pg-test.sh run go test -run TestDoctor_EmptyPostgresIsFine ./internal/cli")
	}
	workdir(t)
	db := freshPostgres(t)
	rep, r := doctor(t, "--db", db)
	if d := databaseCheck(t, rep); r.code != ExitCompleted || !rep.OK || !strings.Contains(d, "empty: no toolgate schema yet; the first toolgate run or serve creates it") {
		t.Errorf("doctor: exit %d, database check %q\n%s", r.code, d, r.stdout)
	}
	if r := toolgate(t, "", "executions", "--db", db); r.code != ExitCompleted || strings.Contains(r.stderr, "incompatible") {
		t.Errorf("executions: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// describe says whether a tool runs only as an approved intent and whether
// its calls are claimed before they run (read-only); tools says
// what each version of a tool changed, so two versions never read alike.
func TestTools_DescribeApprovalAndVersions(t *testing.T) {
	workdir(t)
	must(t, os.WriteFile("reg.yaml", []byte(approvalRegistry), 0o600))
	r := toolgate(t, "", "--registry", "reg.yaml", "describe", "test.hello")
	if r.code != ExitCompleted || !strings.Contains(r.stdout, "Requires approval:     yes: it runs only as an approved intent") {
		t.Errorf("describe test.hello: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "describe", "file.write"); !strings.Contains(r.stdout, "Read-only:             no: each call is recorded on disk before the tool runs") {
		t.Errorf("describe file.write does not say its calls are claimed:\n%s", r.stdout)
	}
	if r := toolgate(t, "", "describe", "file.read"); !strings.Contains(r.stdout, "Requires approval:     no") ||
		!strings.Contains(r.stdout, "Read-only:             yes: it only reads; a call without an idempotency key or intent is recorded once, when it ends") {
		t.Errorf("describe file.read:\n%s", r.stdout)
	}
	r = toolgate(t, "", "tools")
	seen := map[string]string{} // tool: description -> version
	for line := range strings.Lines(r.stdout) {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] == "TOOL" {
			continue
		}
		desc := strings.Join(f[3:], " ")
		if v, ok := seen[f[0]+": "+desc]; ok {
			t.Errorf("%s %s and %s read alike: %s", f[0], v, f[1], desc)
		}
		seen[f[0]+": "+desc] = f[1]
	}
	if !strings.Contains(r.stdout, "any UTF-8 path without control characters (1.1.0 took ASCII letters, digits and /_.- only)") {
		t.Errorf("tools does not say what file.read 1.2.0 changed:\n%s", r.stdout)
	}
}

// The top-level help lists the commands before the exit codes; serve's
// help has a config file to start from, as serve without one says.
func TestHelp_CommandsFirstAndServeExample(t *testing.T) {
	workdir(t)
	r := toolgate(t, "", "--help")
	cmds, codes := strings.Index(r.stdout, "Available Commands:"), strings.Index(r.stdout, "Exit codes:")
	if r.code != 0 || cmds < 0 || codes < 0 || cmds > codes || strings.Count(r.stdout[:cmds], "\n") > 10 {
		t.Errorf("toolgate --help: the commands are not first:\n%s", r.stdout)
	}
	r = toolgate(t, "", "serve")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "example in 'toolgate serve --help'") {
		t.Errorf("serve without --config: exit %d\n%s", r.code, r.stderr)
	}
	r = toolgate(t, "", "serve", "--help")
	if !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, `{"tokens": [{"principal": "agent-1", "sha256": `) ||
		!strings.Contains(r.stdout, "toolgate serve --hash-token") {
		t.Errorf("serve --help has no config example:\n%s", r.stdout)
	}
	// The example's config loads as it is, once it has its hashes.
	_, example, _ := strings.Cut(r.stdout, "<<'EOF'\n")
	example, _, _ = strings.Cut(example, "  EOF\n")
	example = strings.ReplaceAll(strings.ReplaceAll(example, "<the hex SHA-256>", server.HashToken("a")), "<...>", server.HashToken("b"))
	must(t, os.WriteFile("example.json", []byte(example), 0o600))
	if _, err := server.LoadConfig("example.json"); err != nil {
		t.Errorf("the example config does not load: %v\n%s", err, example)
	}
}
