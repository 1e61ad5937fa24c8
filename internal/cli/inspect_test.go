package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// history runs four invocations through 'toolgate run', one per final state,
// and returns their execution ids by state.
func history(t *testing.T) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, tc := range []struct {
		state string
		code  int
		args  []string
	}{
		{"COMPLETED", ExitCompleted, []string{"--call-id", "call-ok", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`}},
		{"DENIED", ExitDenied, []string{"--call-id", "call-denied", "--input", `{"path":"hello.txt"}`}},
		{"FAILED", ExitFailed, []string{"--call-id", "call-failed", "--allow", "filesystem.read:.", "--input", `{"path":7}`}},
		{"ROLLED_BACK", ExitRollback, []string{"--call-id", "call-rb", "--allow", "filesystem.read:.", "--input", `{"path":"sub"}`}},
	} {
		r := toolgate(t, "", append([]string{"run", "file.read", "--json"}, tc.args...)...)
		var res struct {
			ExecutionID string `json:"executionId"`
			State       string `json:"state"`
		}
		if r.code != tc.code || json.Unmarshal([]byte(r.stdout), &res) != nil || res.State != tc.state {
			t.Fatalf("run for %s: exit %d\n%s%s", tc.state, r.code, r.stdout, r.stderr)
		}
		ids[tc.state] = res.ExecutionID
	}
	return ids
}

// dataRows returns the rows of a table printed by 'executions', without the
// header.
func dataRows(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "EXECUTION ") {
		t.Fatalf("no header:\n%s", out)
	}
	return lines[1:]
}

func TestExecutions(t *testing.T) {
	workdir(t)
	ids := history(t)
	order := []string{"COMPLETED", "DENIED", "FAILED", "ROLLED_BACK"}

	r := toolgate(t, "", "executions")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, col := range []string{"EXECUTION", "CALL", "TOOL", "ATTEMPT", "STATE", "STARTED", "DURATION", "ERROR"} {
		if !strings.Contains(r.stdout, col) {
			t.Fatalf("header lacks %s:\n%s", col, r.stdout)
		}
	}
	rows := dataRows(t, r.stdout)
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4:\n%s", len(rows), r.stdout)
	}
	errCodes := map[string]string{"COMPLETED": " -", "DENIED": "capability_denied", "FAILED": "invalid_input", "ROLLED_BACK": "tool_error"}
	for i, state := range order { // oldest first
		row := rows[i]
		for _, want := range []string{ids[state], state, "file.read@1.2.0", errCodes[state]} {
			if !strings.Contains(row, want) {
				t.Fatalf("row %d lacks %q: %s", i, want, row)
			}
		}
		fields := strings.Fields(row)
		if _, err := time.Parse(time.RFC3339, fields[5]); err != nil {
			t.Fatalf("STARTED %q: %v", fields[5], err)
		}
		if _, err := time.ParseDuration(fields[6]); err != nil {
			t.Fatalf("DURATION %q: %v", fields[6], err)
		}
	}

	for _, tc := range []struct {
		name string
		args []string
		want []string // states, oldest first
	}{
		{"state", []string{"--state", "ROLLED_BACK"}, []string{"ROLLED_BACK"}},
		{"state, any case", []string{"--state", "denied"}, []string{"DENIED"}},
		{"tool", []string{"--tool", "file.read"}, order},
		{"tool at version", []string{"--tool", "file.read@1.2.0"}, order},
		{"call", []string{"--call", "call-failed"}, []string{"FAILED"}},
		{"limit keeps the newest", []string{"--limit", "2"}, order[2:]},
		{"limit 0 keeps all", []string{"--limit", "0"}, order},
		{"filters combine", []string{"--tool", "file.read", "--state", "COMPLETED", "--limit", "1"}, []string{"COMPLETED"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := toolgate(t, "", append([]string{"executions"}, tc.args...)...)
			rows := dataRows(t, r.stdout)
			if r.code != 0 || len(rows) != len(tc.want) {
				t.Fatalf("exit %d, %d rows, want %v:\n%s%s", r.code, len(rows), tc.want, r.stdout, r.stderr)
			}
			for i, state := range tc.want {
				if !strings.Contains(rows[i], ids[state]) {
					t.Fatalf("row %d is not the %s execution: %s", i, state, rows[i])
				}
			}
		})
	}

	for _, args := range [][]string{{"--tool", "no.such.tool"}, {"--tool", "file.read@9.9.9"}, {"--state", "ABORTED"}, {"--call", "nope"}} {
		r := toolgate(t, "", append([]string{"executions"}, args...)...)
		if r.code != 0 || r.stdout != "" || strings.TrimSpace(r.stderr) != "no executions" {
			t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
}

func TestExecutions_JSON(t *testing.T) {
	workdir(t)
	ids := history(t)
	r := toolgate(t, "", "executions", "--json")
	var recs []txn.Record
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || r.code != 0 {
		t.Fatalf("exit %d, %v:\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if len(recs) != 4 {
		t.Fatalf("%d records", len(recs))
	}
	for i, state := range []string{"COMPLETED", "DENIED", "FAILED", "ROLLED_BACK"} {
		rec := recs[i]
		if rec.ExecutionID != ids[state] || rec.State != state || rec.ToolID != "file.read" || rec.ToolVersion != "1.2.0" ||
			rec.Attempt != 1 || rec.CallID == "" || !strings.HasPrefix(rec.Principal, "cli:") || rec.StartedAt.IsZero() ||
			rec.EndedAt.IsZero() || rec.InputHash == "" || len(rec.Transitions) == 0 || rec.Transitions[len(rec.Transitions)-1].To != state {
			t.Fatalf("record %d: %+v", i, rec)
		}
		if (state == "COMPLETED") != (rec.Error == nil) {
			t.Fatalf("%s: error %+v", state, rec.Error)
		}
	}
	if len(recs[0].Output) == 0 || recs[0].WriteSet == nil || !recs[0].WriteSet.Committed {
		t.Fatalf("completed record: %+v", recs[0])
	}

	r = toolgate(t, "", "executions", "--json", "--state", "FAILED")
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 1 || recs[0].ExecutionID != ids["FAILED"] {
		t.Fatalf("--state FAILED --json: %v %s", err, r.stdout)
	}
	// No match is an empty array, not null and not a message.
	r = toolgate(t, "", "executions", "--json", "--call", "nope")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "[]" || r.stderr != "" {
		t.Fatalf("empty --json: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

func TestExecutions_Usage(t *testing.T) {
	workdir(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--state", "RUNNING"}, "DECLARED, VALIDATED, AUTHORIZED, EXECUTING, COMPLETED, FAILED, DENIED, ABORTED, ROLLED_BACK"},
		{[]string{"--limit", "-1"}, "--limit"},
		{[]string{"--limit", "many"}, "invalid argument"},
		{[]string{"extra"}, "unknown command"},
	} {
		r := toolgate(t, "", append([]string{"executions"}, tc.args...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Fatalf("%v: exit %d, stderr lacks %q:\n%s", tc.args, r.code, tc.want, r.stderr)
		}
	}
}

func TestShow(t *testing.T) {
	workdir(t)
	ids := history(t)
	for _, tc := range []struct {
		state       string
		transitions []string // "FROM -> TO  EVENT", in order
		reasons     []string // in order
		want        []string
		not         []string
	}{
		{
			state:       "COMPLETED",
			transitions: []string{"DECLARED -> VALIDATED", "VALIDATED -> AUTHORIZED", "AUTHORIZED -> EXECUTING", "EXECUTING -> COMPLETED"},
			want:        []string{"Output:", `"content": "hello\n"`, "Output hash:", "Write-set:    0 puts, 0 deletes, no namespaces; committed", "Capabilities: filesystem.read:", "+0s"},
			not:         []string{"Error:"},
		},
		{
			state:       "DENIED",
			transitions: []string{"DECLARED -> VALIDATED", "VALIDATED -> DENIED"},
			reasons:     []string{"capability denied: file.read requires filesystem.read"},
			want:        []string{"Error:        AuthorizationError (capability_denied): ", "Write-set:    none (the tool did not run)", "Capabilities: (none)"},
			not:         []string{"Output:"},
		},
		{
			state:       "FAILED",
			transitions: []string{"DECLARED -> FAILED"},
			reasons:     []string{"/path: expected string"},
			want:        []string{"Error:        ValidationError (invalid_input): ", "Write-set:    none (the tool did not run)"},
			not:         []string{"Output:"},
		},
		{
			state:       "ROLLED_BACK",
			transitions: []string{"DECLARED -> VALIDATED", "VALIDATED -> AUTHORIZED", "AUTHORIZED -> EXECUTING", "EXECUTING -> ROLLED_BACK"},
			reasons:     []string{"sub is not a regular file"},
			want:        []string{"Error:        ExecutionError (tool_error): ", "Write-set:    0 puts, 0 deletes, no namespaces; discarded"},
			not:         []string{"Output:"},
		},
	} {
		t.Run(tc.state, func(t *testing.T) {
			id := ids[tc.state]
			r := toolgate(t, "", "show", id)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			out := r.stdout
			for _, want := range append([]string{"Execution:    " + id, "Tool:         file.read@1.2.0", "State:        " + tc.state,
				"Attempt:      1", "Principal:    cli:", "Started:", "Ended:", "Duration:", "Input hash:", "Transitions:",
				"FROM -> TO", "EVENT", "+DELTA", "REASON"}, tc.want...) {
				if !strings.Contains(out, want) {
					t.Fatalf("show %s lacks %q:\n%s", tc.state, want, out)
				}
			}
			for _, not := range tc.not {
				if strings.Contains(out, not) {
					t.Fatalf("show %s has %q:\n%s", tc.state, not, out)
				}
			}
			table := out[strings.Index(out, "\nTransitions:"):]
			rows := strings.Split(strings.TrimSpace(table), "\n")[2:]
			if len(rows) != len(tc.transitions) {
				t.Fatalf("%d transition rows, want %d:\n%s", len(rows), len(tc.transitions), table)
			}
			for i, tr := range tc.transitions {
				if !strings.HasPrefix(rows[i], tr+" ") {
					t.Fatalf("transition %d is not %s:\n%s", i, tr, table)
				}
				if _, err := time.Parse("2006-01-02T15:04:05.000Z07:00", strings.Fields(rows[i])[4]); err != nil {
					t.Fatalf("transition %d AT: %v\n%s", i, err, table)
				}
			}
			// Reasons appear in order, on the rows of the transitions that
			// end the attempt.
			at := 0
			for _, reason := range tc.reasons {
				i := strings.Index(table[at:], reason)
				if i < 0 {
					t.Fatalf("reason %q missing or out of order:\n%s", reason, table)
				}
				at += i
			}
			if len(tc.reasons) > 0 && !strings.Contains(rows[len(rows)-1], tc.reasons[len(tc.reasons)-1]) {
				t.Fatalf("last transition lacks its reason:\n%s", table)
			}

			r = toolgate(t, "", "show", id, "--json")
			var rec txn.Record
			if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || r.code != 0 {
				t.Fatalf("--json: exit %d %v\n%s", r.code, err, r.stdout)
			}
			if rec.ExecutionID != id || rec.State != tc.state || len(rec.Transitions) != len(tc.transitions) {
				t.Fatalf("--json record %+v", rec)
			}
		})
	}
}

func TestShow_NotFound(t *testing.T) {
	workdir(t)
	history(t)
	for _, id := range []string{"00000000-0000-0000-0000-000000000000", "not an id", "", strings.Repeat("x", 5000), "\x1b[31mred"} {
		for _, args := range [][]string{{"show", id}, {"show", id, "--json"}} {
			r := toolgate(t, "", args...)
			var j jsonError
			if r.code != ExitUsage || !strings.HasPrefix(r.stderr, "toolgate: no execution ") ||
				(len(args) == 2 && r.stdout != "") || (len(args) == 3 && (json.Unmarshal([]byte(r.stdout), &j) != nil || j.Error.Code != "usage")) {
				t.Fatalf("show %.40q: exit %d\n%s%s", id, r.code, r.stdout, r.stderr)
			}
			if strings.ContainsRune(r.stderr, '\x1b') {
				t.Fatalf("control characters echoed: %q", r.stderr)
			}
		}
	}
	if r := toolgate(t, "", "show"); r.code != ExitUsage {
		t.Fatalf("show without an id: exit %d", r.code)
	}
}

// seed stores, through the txn API, records that 'toolgate run' does not
// produce on demand: one still EXECUTING, one with a stack trace, and one
// that committed writes to two namespaces.
func seed(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	store, err := txn.Open(theDB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	start := time.Now().Add(-time.Minute)
	tr := func(from, to, ev string, d time.Duration, reason string) txn.Transition {
		return txn.Transition{From: from, To: to, Event: ev, At: start.Add(d), Reason: reason}
	}
	started := []txn.Transition{
		tr("DECLARED", "VALIDATED", "valid", time.Millisecond, ""),
		tr("VALIDATED", "AUTHORIZED", "granted", 2*time.Millisecond, ""),
		tr("AUTHORIZED", "EXECUTING", "start", 3*time.Millisecond, ""),
	}

	// Still executing: its Tx is never ended.
	if _, err := store.Begin(ctx, &txn.Record{ExecutionID: "exec-1-running", CallID: "c1", Attempt: 1, ToolID: "slow.tool",
		ToolVersion: "2.0.0", State: "EXECUTING", Transitions: started, StartedAt: start}); err != nil {
		t.Fatal(err)
	}

	// Committed writes.
	rec := &txn.Record{ExecutionID: "exec-2-writes", CallID: "c2", Attempt: 1, ToolID: "kv.put", ToolVersion: "1.0.0",
		State: "EXECUTING", Transitions: started, StartedAt: start}
	tx, err := store.Begin(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	must(t, tx.Put("alpha", "k1", []byte("v")))
	must(t, tx.Put("alpha", "k2", []byte("v")))
	must(t, tx.Delete("beta", "k"))
	final := *rec
	final.State = "COMPLETED"
	final.Transitions = append(started[:3:3], tr("EXECUTING", "COMPLETED", "ok", 1500*time.Millisecond, ""))
	final.EndedAt = start.Add(1500 * time.Millisecond)
	final.Output = json.RawMessage(`{"ok":true}`)
	must(t, tx.Commit(ctx, &final))

	// A panic, with its stack and a reason holding a newline and an escape.
	must(t, store.Put(ctx, &txn.Record{ExecutionID: "exec-3-panic", CallID: "c3", Attempt: 2, ToolID: "bad.tool", ToolVersion: "1.0.0",
		State: "ROLLED_BACK", StartedAt: start, EndedAt: start.Add(4 * time.Millisecond),
		Transitions: []txn.Transition{tr("EXECUTING", "ROLLED_BACK", "fail", 4*time.Millisecond, "tool panicked:\nboom \x1b[2J")},
		Error: &txn.ErrorInfo{Type: "ExecutionError", Code: "panic", Message: "tool panicked: boom",
			Stack: "goroutine 7 [running]:\nmain.boom()\n\t/src/boom.go:3"}}))
}

func TestInspect_SeededRecords(t *testing.T) {
	dir := workdir(t)
	seed(t, dir)

	r := toolgate(t, "", "executions")
	rows := dataRows(t, r.stdout)
	if r.code != 0 || len(rows) != 3 {
		t.Fatalf("exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if f := strings.Fields(rows[0]); f[0] != "exec-1-running" || f[2] != "slow.tool@2.0.0" || f[4] != "EXECUTING" || f[6] != "-" || f[7] != "-" {
		t.Fatalf("executing row: %q", rows[0])
	}
	if f := strings.Fields(rows[1]); f[0] != "exec-2-writes" || f[6] != "1.5s" || f[7] != "-" {
		t.Fatalf("writes row: %q", rows[1])
	}
	if f := strings.Fields(rows[2]); f[0] != "exec-3-panic" || f[3] != "2" || f[7] != "panic" {
		t.Fatalf("panic row: %q", rows[2])
	}
	if r := toolgate(t, "", "executions", "--state", "EXECUTING"); len(dataRows(t, r.stdout)) != 1 {
		t.Fatalf("--state EXECUTING:\n%s", r.stdout)
	}

	r = toolgate(t, "", "show", "exec-1-running")
	for _, want := range []string{"State:        EXECUTING", "Ended:        -", "Duration:     -", "Write-set:    pending", "AUTHORIZED -> EXECUTING"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("show exec-1-running lacks %q:\n%s", want, r.stdout)
		}
	}

	r = toolgate(t, "", "show", "exec-2-writes")
	for _, want := range []string{"Write-set:    2 puts, 1 delete, namespaces alpha, beta; committed", "Duration:     1.5s", `"ok": true`, "+1.499s"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("show exec-2-writes lacks %q:\n%s", want, r.stdout)
		}
	}

	// The seeded records were written below the runtime, with no audit
	// events: show displays them, says first that the audit log does not
	// prove them, and exits 7.
	r = toolgate(t, "", "show", "exec-3-panic")
	if r.code != ExitVerify || !strings.HasPrefix(r.stdout, "NOT PROVEN") || strings.Contains(r.stdout, "goroutine") || !strings.Contains(r.stdout, "--stack prints it") ||
		!strings.Contains(r.stdout, "Error:        ExecutionError (panic): tool panicked: boom") {
		t.Fatalf("show exec-3-panic:\n%s", r.stdout)
	}
	// The reason stays on its row, its control characters neutralized.
	if strings.ContainsRune(r.stdout, '\x1b') || !strings.Contains(r.stdout, "tool panicked: boom") {
		t.Fatalf("reason not cleaned:\n%q", r.stdout)
	}
	r = toolgate(t, "", "show", "exec-3-panic", "--stack")
	if r.code != ExitVerify || !strings.Contains(r.stdout, "Stack:\ngoroutine 7 [running]:\nmain.boom()\n\t/src/boom.go:3\n") {
		t.Fatalf("show --stack:\n%s", r.stdout)
	}
}

func TestInspect_EmptyDatabase(t *testing.T) {
	dir := workdir(t)
	db := filepath.Join(dir, "fresh", "toolgate.db")
	t.Setenv("TOOLGATE_DB", db)

	r := toolgate(t, "", "executions")
	if r.code != 0 || r.stdout != "" || r.stderr != "no executions\n" {
		t.Fatalf("executions: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = toolgate(t, "", "executions", "--json")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("executions --json: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = toolgate(t, "", "show", "some-id")
	if r.code != ExitUsage || r.stderr != "toolgate: no execution some-id\n" {
		t.Fatalf("show: exit %d %q", r.code, r.stderr)
	}
	// Read-only: nothing was created.
	if _, err := os.Stat(filepath.Dir(db)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("inspection created %s: %v", filepath.Dir(db), err)
	}

	// A database that exists but holds no execution.
	store, err := txn.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	must(t, store.Close())
	if r := toolgate(t, "", "executions"); r.code != 0 || r.stderr != "no executions\n" {
		t.Fatalf("executions on an empty database: exit %d %q", r.code, r.stderr)
	}
	if r := toolgate(t, "", "show", "some-id"); r.code != ExitUsage {
		t.Fatalf("show on an empty database: exit %d", r.code)
	}

	// --db wins over $TOOLGATE_DB, as for run.
	if r := toolgate(t, "", "executions", "--db", filepath.Join(dir, "other.db")); r.code != 0 || r.stderr != "no executions\n" {
		t.Fatalf("--db: exit %d %q", r.code, r.stderr)
	}
}

func TestInspect_Locks(t *testing.T) {
	workdir(t)
	ids := history(t)
	path := theDB()

	// Readers share the database.
	reader, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if r := toolgate(t, "", "show", ids["COMPLETED"]); r.code != 0 {
		t.Fatalf("show beside a reader: exit %d %s", r.code, r.stderr)
	}
	must(t, reader.Close())

	// The writer as the CLI opens one: it records itself in the holder
	// file.
	writer, err := openHeld(path, &tgruntime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(context.Background())
	inspect := [][]string{{"executions"}, {"show", ids["COMPLETED"]}, {"intent", "list"}}
	if onPostgres() {
		// No lock on Postgres: inspection works beside a writer.
		for _, args := range inspect {
			if r := toolgate(t, "", args...); r.code != 0 || r.stdout == "" {
				t.Errorf("%v beside a writer: exit %d %q", args, r.code, r.stderr)
			}
		}
		return
	}
	// On bbolt a writer excludes them: a clear error, exit 1.
	for _, args := range inspect {
		r := toolgate(t, "", args...)
		if r.code != ExitInternal || !strings.Contains(r.stderr, "locked by another process") || r.stdout != "" {
			t.Fatalf("%v beside a writer: exit %d %q", args, r.code, r.stderr)
		}
		// It names the writer (holder_test.go has a server as the writer).
		if !strings.Contains(r.stderr, "(pid "+strconv.Itoa(os.Getpid())+")") {
			t.Errorf("%v beside a writer: the message does not name the writer: %q", args, r.stderr)
		}
	}
}

// show lists the attempt's audit event ids, one per transition.
func TestShow_AuditEvents(t *testing.T) {
	workdir(t)
	r := toolgate(t, "", "run", "file.read", "--json", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`)
	var res struct {
		ExecutionID string `json:"executionId"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatal(err)
	}
	r = toolgate(t, "", "show", res.ExecutionID)
	line := ""
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "Audit events:") {
			line = l
		}
	}
	if n := strings.Count(line, ","); line == "" || n != 3 {
		t.Fatalf("want 4 audit event ids (one per transition), got %q", line)
	}
}
