package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
)

// Every command that reads or writes the database does on each backend
// what it does on the other: the same exit codes, the same answers. The
// bbolt half always runs; the Postgres half needs TOOLGATE_TEST_POSTGRES
// (bash scripts/pg-test.sh run go test -run TestEveryCommand_OnEveryBackend ./internal/cli).
// 'bench' is left out: it measures scratch databases of its own
// (TestBench_Postgres).
func TestEveryCommand_OnEveryBackend(t *testing.T) {
	for _, b := range []struct {
		name string
		db   func(t *testing.T, dir string) string
	}{
		{"bbolt", func(t *testing.T, dir string) string { return filepath.Join(dir, "state", "toolgate.db") }},
		{"postgres", func(t *testing.T, dir string) string { return freshPostgres(t) }},
	} {
		t.Run(b.name, func(t *testing.T) {
			dir := workdir(t)
			t.Setenv("TOOLGATE_DB", b.db(t, dir))
			everyCommand(t, dir)
		})
	}
}

// matrixState is what the steps of everyCommand learn and later steps use.
type matrixState struct {
	intent, hash     string // proposed, then approved and run
	rejected         string // proposed, then rejected
	execution        string // the execution of 'run'
	intentExecutions int
}

// unknownIntent is a well-formed intent id no database holds.
const unknownIntent = "00000000-0000-4000-8000-000000000000"

func everyCommand(t *testing.T, dir string) {
	st := &matrixState{}
	read := []string{"--allow", "filesystem.read:."}
	steps := []struct {
		name   string
		args   func() []string
		code   int
		out    string // in stdout
		errOut string // in stderr
		after  func(t *testing.T, r run)
	}{
		// A database that does not exist yet: a file not created, a
		// Postgres database without toolgate's schema. Inspection finds
		// nothing; a command on an intent says it is not found.
		{name: "executions, none yet", args: args("executions", "--json"), out: "[]"},
		{name: "intent list, none yet", args: args("intent", "list", "--json"), out: "[]"},
		{name: "intent show, no database", args: args("intent", "show", unknownIntent), code: ExitUsage, errOut: "not found"},
		{name: "intent approve, no database", args: args("intent", "approve", unknownIntent, "--yes"), code: ExitUsage, errOut: "not found"},
		{name: "intent reject, no database", args: args("intent", "reject", unknownIntent, "--reason", "no"), code: ExitUsage, errOut: "not found"},
		{name: "run --intent, no database", args: args("run", "--intent", unknownIntent, "--hash", strings.Repeat("0", 64)), code: ExitUsage, errOut: "not found"},
		{name: "audit verify, none yet", args: args("audit", "verify"), out: "0 events valid"},
		{name: "audit tail, none yet", args: args("audit", "tail"), errOut: "no audit events"},
		{name: "stats, none yet", args: args("stats")},
		{name: "doctor, none yet", args: args("doctor", "--json"), out: `"ok": true`},

		{name: "run", args: args("run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`), out: "hello"},
		{name: "executions", args: args("executions", "--json"), out: `"toolId": "file.read"`, after: func(t *testing.T, r run) {
			var recs []struct {
				ExecutionID string `json:"executionId"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 1 {
				t.Fatalf("executions --json: %v\n%s", err, r.stdout)
			}
			st.execution = recs[0].ExecutionID
		}},
		{name: "show", args: func() []string { return []string{"show", st.execution} }, out: "COMPLETED"},
		{name: "intent propose", args: args("intent", "propose", "file.read", "--input", `{"path":"hello.txt"}`), after: func(t *testing.T, r run) {
			m := proposedRE.FindStringSubmatch(r.stdout)
			if m == nil {
				t.Fatalf("propose printed no id and hash:\n%s", r.stdout)
			}
			st.intent, st.hash = m[1], m[2]
		}},
		{name: "intent list", args: args("intent", "list"), out: "pending"},
		{name: "intent show", args: func() []string { return []string{"intent", "show", st.intent} }, out: "PENDING"},
		{name: "intent approve", args: func() []string { return []string{"intent", "approve", st.intent, "--yes"} }, out: "approved"},
		{name: "run --intent", args: func() []string { return append([]string{"run", "--intent", st.intent, "--hash", st.hash}, read...) }, out: "hello"},
		{name: "intent show, executed", args: func() []string { return []string{"intent", "show", st.intent, "--json"} }, out: `"status": "executed"`},
		{name: "intent propose, to reject", args: args("intent", "propose", "file.read", "--input", `{"path":"sub"}`), after: func(t *testing.T, r run) {
			m := proposedRE.FindStringSubmatch(r.stdout)
			if m == nil {
				t.Fatalf("propose printed no id and hash:\n%s", r.stdout)
			}
			st.rejected = m[1]
		}},
		{name: "intent reject", args: func() []string { return []string{"intent", "reject", st.rejected, "--reason", "not today"} }, out: "rejected"},
		{name: "intent list --status rejected", args: args("intent", "list", "--status", "rejected"), after: func(t *testing.T, r run) {
			if !strings.Contains(r.stdout, st.rejected) || strings.Contains(r.stdout, st.intent) {
				t.Fatalf("rejected intents:\n%s", r.stdout)
			}
		}},

		// The database exists: an unknown intent is not found, all the same.
		{name: "intent show, unknown", args: args("intent", "show", unknownIntent), code: ExitUsage, errOut: "no such intent"},
		{name: "intent approve, unknown", args: args("intent", "approve", unknownIntent, "--yes"), code: ExitUsage, errOut: "no such intent"},
		{name: "intent reject, unknown", args: args("intent", "reject", unknownIntent, "--reason", "no"), code: ExitUsage, errOut: "no such intent"},
		{name: "run --intent, unknown", args: args("run", "--intent", unknownIntent, "--hash", strings.Repeat("0", 64)), code: ExitUsage, errOut: "no such intent"},

		{name: "audit verify", args: args("audit", "verify"), out: "2 execution records and 2 intents match their audit events"},
		{name: "audit tail", args: args("audit", "tail"), out: "COMPLETED"},
		{name: "audit export", args: args("audit", "export"), out: `"state":"COMPLETED"`},
		{name: "audit checkpoint", args: args("audit", "checkpoint", "--key", filepath.Join(dir, "audit.key")), out: "toolgate audit log\n"},
		{name: "stats", args: args("stats"), out: "file.read"},
		{name: "doctor", args: args("doctor", "--json"), out: "2 executions recorded"},
		{name: "tools", args: args("tools"), out: "file.read"},
		{name: "describe", args: args("describe", "file.read"), out: "file.read"},
		{name: "policy check", args: args("policy", "check", "file.read", "--principal", "cli:x", "--input", `{"path":"hello.txt"}`), code: ExitDenied},
	}
	for _, s := range steps {
		r := toolgate(t, "", s.args()...)
		if r.code != s.code || !strings.Contains(r.stdout, s.out) || !strings.Contains(r.stderr, s.errOut) {
			t.Errorf("%s: toolgate %s: exit %d, want %d with %q in stdout and %q in stderr\nstdout: %s\nstderr: %s",
				s.name, strings.Join(s.args(), " "), r.code, s.code, s.out, s.errOut, r.stdout, r.stderr)
			continue
		}
		if s.after != nil {
			s.after(t, r)
		}
	}

	// The servers, on the same database: one call each.
	serveOnce(t, dir)
	mcpOnce(t, dir)
	if r := toolgate(t, "", "audit", "verify"); r.code != 0 || !strings.Contains(r.stdout, "4 execution records and 2 intents match") {
		t.Fatalf("audit verify after serve and mcp: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// args is a step's fixed arguments.
func args(a ...string) func() []string { return func() []string { return a } }

// serveOnce runs 'toolgate serve' until one call has completed through it.
func serveOnce(t *testing.T, dir string) {
	t.Helper()
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok")+`"}]}`), 0o600))
	policy := filepath.Join(dir, "policy.json")
	must(t, os.WriteFile(policy, []byte(`{"version":1,"principals":{"agent":["filesystem.read:`+dir+`"]}}`), 0o600))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	l.Close()
	ctx, stop := context.WithCancel(context.Background())
	var errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve", "--config", cfg, "--policy", policy, "--addr", addr}, Stdio{In: strings.NewReader(""), Out: io.Discard, Err: &errb})
	}()
	c, err := client.New("http://"+addr, "tok", nil)
	must(t, err)
	waitServing(t, &errb, done)
	res, err := c.Execute(context.Background(), client.Invocation{Tool: "file.read", Input: json.RawMessage(`{"path":"hello.txt"}`)})
	stop()
	code := <-done
	if err != nil || res.State != "COMPLETED" {
		t.Fatalf("a call through serve: %v %+v\n%s", err, res, errb.String())
	}
	if code != 0 {
		t.Fatalf("serve exited %d\n%s", code, errb.String())
	}
}

// mcpOnce runs 'toolgate mcp' on stdio for one call.
func mcpOnce(t *testing.T, dir string) {
	t.Helper()
	crd, swr := io.Pipe()
	srd, cwr := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Main(context.Background(), []string{"mcp", "--allow", "filesystem.read:."}, Stdio{In: srd, Out: swr, Err: &stderr})
		swr.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.IOTransport{Reader: crd, Writer: cwr}, nil)
	must(t, err)
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "file.read", Arguments: map[string]any{"path": filepath.Join(dir, "hello.txt")}})
	must(t, err)
	cs.Close()
	cwr.Close()
	if code := <-done; code != 0 {
		t.Fatalf("toolgate mcp exited %d: %s", code, stderr.String())
	}
	if res.IsError || res.Meta[mcp.MetaState] != "COMPLETED" {
		t.Fatalf("file.read over MCP: %+v", res)
	}
}

// The approval hint 'toolgate mcp' gives its client names the database as
// --db takes it: a file by its absolute path, a Postgres URL as it is (not
// made a file path below the working directory), without its password.
func TestApproveHint_NamesTheDatabase(t *testing.T) {
	dir := workdir(t)
	for _, c := range []struct{ db, want string }{
		{"state/toolgate.db", "toolgate --db " + filepath.Join(dir, "state", "toolgate.db") + " intent approve %s"},
		{"postgres://tg:s3cret@db.example/toolgate?sslmode=require", "toolgate --db 'postgres://tg:xxxxx@db.example/toolgate?sslmode=require' intent approve %s"},
		{"postgresql://db.example/toolgate", "toolgate --db postgresql://db.example/toolgate intent approve %s"},
	} {
		if got := approveHint(&globals{db: c.db}); got != c.want {
			t.Errorf("--db %s: hint %q, want %q", c.db, got, c.want)
		}
	}
}

// On Postgres no process locks the database: a command whose open is held
// back (here, its node name is taken by a running node) says what the
// store says, not the advice about a bbolt file's lock and its holder.
func TestPostgres_NodeNameInUseSaysSo(t *testing.T) {
	workdir(t)
	db := freshPostgres(t) // skips without TOOLGATE_TEST_POSTGRES, saying how to run it
	t.Setenv("TOOLGATE_DB", db)
	t.Setenv("TOOLGATE_NODE", "a")
	node, err := tgruntime.Open(db, &tgruntime.Options{NoSync: true})
	must(t, err)
	defer node.Close(context.Background())
	r := toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`)
	if r.code != ExitInternal || !strings.Contains(r.stderr, "node a is running") || !strings.Contains(r.stderr, "$TOOLGATE_NODE") ||
		strings.Contains(r.stderr, "did not record itself") || strings.Contains(r.stderr, "--wait") {
		t.Fatalf("run beside a running node a: exit %d\n%s", r.code, r.stderr)
	}
}
