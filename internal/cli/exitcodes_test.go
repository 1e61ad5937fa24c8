package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/internal/testchild"
	"github.com/toolgate/toolgate/txn"
)

// The execution adapter document (000): the person who ran a tool is told
// which execution it was. The text report names the execution id of every
// ending (COMPLETED, FAILED, DENIED, ROLLED_BACK), the same id the database
// recorded.
func TestRun_TextReportNamesExecutionID(t *testing.T) {
	workdir(t)
	for _, args := range [][]string{
		{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`},
		{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":7}`},
		{"run", "file.read", "--input", `{"path":"hello.txt"}`},
		{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"sub"}`},
	} {
		r := toolgate(t, "", args...)
		ids := executionIDRE.FindAllStringSubmatch(r.stderr, -1)
		if len(ids) != 1 {
			t.Fatalf("%v: the report names %d execution ids:\n%s", args, len(ids), r.stderr)
		}
		store, err := txn.Open(theDB(), &txn.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := store.Get(context.Background(), ids[0][1])
		store.Close()
		if err != nil || !strings.HasPrefix(r.stderr, rec.State+" ") {
			t.Fatalf("%v: execution %s: %+v, %v\n%s", args, ids[0][1], rec, err, r.stderr)
		}
	}
}

var executionIDRE = regexp.MustCompile(`\bexecution ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b`)

// The execution adapter document (000): a command that exits non-zero is
// an execution that failed, whatever the lifecycle says (the call
// COMPLETED: the process ran and its exit status is data). The CLI says
// the command's exit status plainly and exits 1; a signal and a
// timeout_seconds stop are said the same way. A command that exits 0 exits
// 0. With --json the result says it (success, exit_code) and the exit code
// is the same.
func TestRun_ProcessExitStatus(t *testing.T) {
	exe := testchild.Path(t) // built from the module, before leaving it
	workdir(t)
	grant := []string{"--allow", "process.exec:" + exe, "--allow", "filesystem.read:."}
	for _, tc := range []struct {
		name   string
		tool   string
		args   []string
		extra  string
		code   int
		stderr string
	}{
		{"exit 0", "exec_status", []string{"exit", "0"}, "", ExitCompleted, ""},
		{"exit 3", "exec_status", []string{"exit", "3", "it broke"}, "", ExitInternal, "the command exited with status 3"},
		{"exit 3, capture", "exec_capture", []string{"exit", "3"}, "", ExitInternal, "the command exited with status 3"},
		{"timed out", "exec_capture", []string{"sleep", "60"}, `,"timeout_seconds":0.2`, ExitInternal, "the command was stopped after timeout_seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, _ := json.Marshal(tc.args)
			input := fmt.Sprintf(`{"command":%q,"args":%s%s}`, exe, args, tc.extra)
			r := toolgate(t, "", append([]string{"run", tc.tool, "--input", input}, grant...)...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) || !strings.HasPrefix(r.stderr, "COMPLETED ") {
				t.Fatalf("exit %d, want %d naming %q\nstdout: %s\nstderr: %s", r.code, tc.code, tc.stderr, r.stdout, r.stderr)
			}
			if tc.code == ExitCompleted && strings.Contains(r.stderr, "the command") {
				t.Fatalf("a command that exited 0 is reported as failing:\n%s", r.stderr)
			}
			j := toolgate(t, "", append([]string{"run", tc.tool, "--json", "--input", input}, grant...)...)
			var res struct {
				State  string
				Output struct {
					Success  bool `json:"success"`
					ExitCode int  `json:"exit_code"`
				}
			}
			if err := json.Unmarshal([]byte(j.stdout), &res); err != nil || j.code != tc.code || res.State != "COMPLETED" || res.Output.Success != (tc.code == 0) {
				t.Fatalf("--json: exit %d, %+v, %v\n%s%s", j.code, res, err, j.stdout, j.stderr)
			}
		})
	}
}

// The issue 13 §4 case: a commit that fails because the disk is full is a
// store failure, exit 1, not 6 ("the tool failed"). The child process
// (this test re-executed) cannot grow the database file past its size
// (RLIMIT_FSIZE, set in the child only), and runs a call whose output
// needs the file to grow.
func TestRun_StoreFailureExitCode(t *testing.T) {
	if os.Getenv("TOOLGATE_CLI_FSIZE_CHILD") != "" {
		storeFailureChild(t)
		return
	}
	bboltOnly(t, "the commit fails when the bbolt file cannot grow (RLIMIT_FSIZE)")
	dir := workdir(t)
	if r := toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`); r.code != 0 {
		t.Fatalf("first run: exit %d\n%s", r.code, r.stderr)
	}
	must(t, os.WriteFile("large.txt", bytes.Repeat([]byte("y"), 900<<10), 0o600))
	cmd := exec.Command(os.Args[0], "-test.run=^TestRun_StoreFailureExitCode$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TOOLGATE_CLI_FSIZE_CHILD=1", "TOOLGATE_DB="+theDB())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`CHILD-EXIT (\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("child output:\n%s", out)
	}
	code, _ := strconv.Atoi(string(m[1]))
	if code != ExitInternal {
		t.Fatalf("a failed commit exited %d, want %d (a store failure):\n%s", code, ExitInternal, out)
	}
	if !bytes.Contains(out, []byte("the database failed")) {
		t.Fatalf("the report does not say the store failed:\n%s", out)
	}
	t.Logf("child:\n%s", out)
}

func storeFailureChild(t *testing.T) {
	signal.Ignore(syscall.SIGXFSZ) // a write past the limit then fails with EFBIG
	fi, err := os.Stat(os.Getenv("TOOLGATE_DB"))
	if err != nil {
		t.Fatal(err)
	}
	lim := syscall.Rlimit{Cur: uint64(fi.Size()), Max: uint64(fi.Size())}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"large.txt"}`},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	fmt.Printf("CHILD-STDERR %s\nCHILD-EXIT %d\n", errb.String(), code)
}

// One exit-code table: docs/cli.md's says what exitCodes says, row for row,
// and --help shows every row.
func TestExitCodes_Docs(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n| code | meaning |\n| --- | --- |\n")
	if !ok {
		t.Fatal("docs/cli.md has no exit-code table (| code | meaning |)")
	}
	var rows []string
	for line := range strings.Lines(table) {
		if !strings.HasPrefix(line, "| ") {
			break
		}
		rows = append(rows, strings.TrimSpace(line))
	}
	var want []string
	for _, e := range exitCodes {
		want = append(want, fmt.Sprintf("| %d | %s |", e.code, e.meaning))
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("docs/cli.md's exit-code table:\n%s\nwant (internal/cli exitCodes):\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	help := toolgate(t, "", "--help")
	for _, e := range exitCodes {
		if !strings.Contains(help.stdout, fmt.Sprintf("\n  %d  ", e.code)) {
			t.Errorf("--help lacks exit code %d:\n%s", e.code, help.stdout)
		}
	}
	// The commands come first, then the exit codes; the top level says
	// what toolgate is for, and a subcommand's help does not repeat the
	// top level's table.
	cmds, codes := strings.Index(help.stdout, "Available Commands:"), strings.Index(help.stdout, "Exit codes:")
	if cmds < 0 || codes < cmds || !strings.Contains(help.stdout, "AI agents") || !strings.Contains(help.stdout, "MCP") {
		t.Errorf("--help: the commands at %d, the exit codes at %d:\n%s", cmds, codes, help.stdout)
	}
	if sub := toolgate(t, "", "tools", "--help"); strings.Contains(sub.stdout, "Exit codes:") {
		t.Errorf("tools --help repeats the top level's exit codes:\n%s", sub.stdout)
	}
}

// Every row of exitCodes, through the CLI as a user runs it (issue 17 §6):
// each case exits with its row's code and says what its row says on
// stderr, and with --json prints exactly one JSON object on stdout: a
// result or report the command prints, or else the error object
// ({"error": {type, code, message}, "exitCode"}), failures before the
// lifecycle included. Every row has a case.
func TestExitCodes_EveryRow(t *testing.T) {
	exe := testchild.Path(t) // built from the module, before leaving it
	const (
		result = "result" // a run result: {"state": ...}
		report = "report" // the command's own report
		object = "error"  // the error object
	)
	in := `{"path":"hello.txt"}`
	read := []string{"run", "file.read", "--allow", "filesystem.read:.", "--input", in}
	approvedIntent := func(t *testing.T) []string {
		r := toolgate(t, "", "intent", "propose", "file.read", "--input", in)
		m := proposedRE.FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("propose: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if r := toolgate(t, "", "intent", "approve", m[1], "--yes"); r.code != 0 {
			t.Fatalf("approve: exit %d\n%s", r.code, r.stderr)
		}
		return []string{"run", "--intent", m[1], "--hash", m[2], "--allow", "filesystem.read:."}
	}
	first := func(args ...string) func(t *testing.T) []string {
		return func(t *testing.T) []string {
			if r := toolgate(t, "", args...); r.code != 0 {
				t.Fatalf("%q: exit %d\n%s", args, r.code, r.stderr)
			}
			return args
		}
	}
	locked := func(args ...string) func(t *testing.T) []string {
		return func(t *testing.T) []string {
			bboltOnly(t, whyLock)
			first(read...)(t)
			store, err := txn.Open(os.Getenv("TOOLGATE_DB"), nil) // holds the lock until the test ends
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			return args
		}
	}
	args := func(a ...string) func(*testing.T) []string { return func(*testing.T) []string { return a } }
	execInput := func(code string) string { return fmt.Sprintf(`{"command":%q,"args":["exit",%q]}`, exe, code) }
	cases := []struct {
		name   string
		code   int
		args   func(t *testing.T) []string
		stderr string
		json   string
	}{
		{"completed", ExitCompleted, args(read...), "COMPLETED file.read", result},
		{"replayed intent", ExitCompleted, func(t *testing.T) []string { return first(approvedIntent(t)...)(t) }, "replayed", result},
		{"replayed idempotency key", ExitCompleted, first(append(read, "--idempotency-key", "k1")...), "replayed", result},

		{"command failed", ExitInternal, args("run", "exec_status", "--allow", "process.exec:"+exe, "--allow", "filesystem.read:.", "--input", execInput("3")),
			"the command exited with status 3", result},
		{"database locked", ExitInternal, locked(read...), "locked by another process", object},
		{"doctor: database locked", ExitInternal, locked("doctor"), "locked by another process", report},

		{"unknown tool", ExitUsage, args("run", "no.such.tool"), "'toolgate tools' lists", object},
		{"unknown version", ExitUsage, args("run", "file.read@9.0.0", "--allow", "filesystem.read:."), "9.0.0", object},
		{"bad flag", ExitUsage, args("run", "file.read", "--frobnicate"), "unknown flag", object},
		{"bad flag value", ExitUsage, args("executions", "--limit", "many"), `"many" is not a whole number`, object},
		{"unknown command", ExitUsage, args("explode"), "unknown command", object},
		{"malformed intent", ExitUsage, args("run", "--intent", "nope", "--hash", "x"), "intent", object},

		{"invalid input", ExitFailed, args("run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":7}`), "/path", result},

		{"capability not granted", ExitDenied, args("run", "file.read", "--input", in), "--allow filesystem.read:PATH", result},
		{"path outside the grant", ExitDenied, args("run", "file.read", "--allow", "filesystem.read:sub", "--input", in), "is outside filesystem.read:", result},
		{"command outside the grant", ExitDenied, args("run", "exec_status", "--allow", "process.exec:/bin/true", "--allow", "filesystem.read:.", "--input", execInput("0")),
			"--allow process.exec:", result},
		{"intent pending", ExitDenied, func(t *testing.T) []string {
			r := toolgate(t, "", "intent", "propose", "file.read", "--input", in)
			m := proposedRE.FindStringSubmatch(r.stdout)
			if m == nil {
				t.Fatalf("propose: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			return []string{"run", "--intent", m[1], "--hash", m[2], "--allow", "filesystem.read:."}
		}, "not approved yet", object},
		{"idempotency key conflict", ExitDenied, func(t *testing.T) []string {
			first("run", "file.read", "--allow", "filesystem.read:.", "--idempotency-key", "k1", "--input", in)(t)
			return []string{"run", "file.read", "--allow", "filesystem.read:.", "--idempotency-key", "k1", "--input", `{"path":"sub"}`}
		}, "different request", object},

		{"file size limit", ExitAborted, args("run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"big.txt"}`), "file_size_limit", result},
		{"tool error", ExitRollback, args("run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"sub"}`), "not a regular file", result},
		{"audit verify: not a checkpoint", ExitVerify, func(t *testing.T) []string {
			first(read...)(t)
			first("audit", "checkpoint")(t)
			must(t, os.WriteFile("cp.txt", []byte("hello\n"), 0o600))
			return []string{"audit", "verify", "--checkpoint", "cp.txt"}
		}, "rejected", report},
	}
	covered := map[int]bool{}
	for _, tc := range cases {
		covered[tc.code] = true
		for _, asJSON := range []bool{false, true} {
			name := tc.name
			if asJSON {
				name += " --json"
			}
			t.Run(name, func(t *testing.T) {
				workdir(t)
				a := tc.args(t)
				if asJSON {
					a = append(slices.Clone(a), "--json")
				}
				r := toolgate(t, "", a...)
				says := !asJSON || tc.json != result // --json prints the result instead
				if r.code != tc.code || (says && !strings.Contains(r.stdout+r.stderr, tc.stderr)) {
					t.Fatalf("%q: exit %d, want %d saying %q (stdout or stderr)\nstdout: %s\nstderr: %s", a, r.code, tc.code, tc.stderr, r.stdout, r.stderr)
				}
				if !asJSON {
					return
				}
				var obj map[string]json.RawMessage
				dec := json.NewDecoder(strings.NewReader(r.stdout))
				if err := dec.Decode(&obj); err != nil || dec.More() {
					t.Fatalf("%q: stdout is not one JSON object (%v):\n%s", a, err, r.stdout)
				}
				switch tc.json {
				case result:
					var res struct {
						State string
						Error *struct{ Message string }
					}
					json.Unmarshal([]byte(r.stdout), &res)
					if res.State == "" || (res.State != "COMPLETED" && (res.Error == nil || res.Error.Message == "")) {
						t.Fatalf("%q: not a result with its error:\n%s", a, r.stdout)
					}
				case object:
					var e struct {
						Error *struct {
							Type, Code, Message string
						}
						ExitCode *int
					}
					json.Unmarshal([]byte(r.stdout), &e)
					if e.Error == nil || e.Error.Type == "" || e.Error.Code == "" || e.Error.Message == "" || e.ExitCode == nil || *e.ExitCode != tc.code {
						t.Fatalf("%q: not the error object of exit %d:\n%s", a, tc.code, r.stdout)
					}
				}
			})
		}
	}
	for _, e := range exitCodes {
		if !covered[e.code] {
			t.Errorf("exit code %d has no case", e.code)
		}
	}
}
