package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

type run struct {
	code           int
	stdout, stderr string
}

// toolgate runs the CLI in-process in a fresh directory holding a few files,
// with the database in that directory.
func toolgate(t *testing.T, stdin string, args ...string) run {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, Stdio{In: strings.NewReader(stdin), Out: &out, Err: &errb})
	if strings.Contains(errb.String(), "goroutine ") || strings.Contains(errb.String(), "panic:") {
		t.Fatalf("stack trace on stderr:\n%s", errb.String())
	}
	scanRun(t, args, out.String(), errb.String())
	return run{code, out.String(), errb.String()}
}

// workdir makes a fresh directory holding a few files the current one, and
// sets TOOLGATE_DB to the test's database on the backend the suite runs on
// (testDB: dir/state/toolgate.db on bbolt).
func workdir(t *testing.T) string {
	dir := t.TempDir()
	t.Setenv("TOOLGATE_DB", testDB(t, dir)) // before the Chdir: a skip names the package's directory
	t.Chdir(dir)
	// No telemetry unless a test asks for it, whatever the environment says.
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
		"TOOLGATE_POLICY", "TOOLGATE_REGISTRY", "TOOLGATE_APPROVAL_KEY", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "TRACEPARENT", "TRACESTATE"} {
		t.Setenv(v, "")
	}
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config")) // no one's own approval key
	must(t, os.WriteFile("hello.txt", []byte("hello\n"), 0o600))
	must(t, os.WriteFile("big.txt", bytes.Repeat([]byte("x"), 1<<20+1), 0o600))
	must(t, os.Mkdir("sub", 0o700))
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRun_ExitCodes(t *testing.T) {
	workdir(t)
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"completed", []string{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`}, ExitCompleted, "COMPLETED file.read@1.2.0"},
		{"completed at version", []string{"run", "file.read@1.0.0", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`}, ExitCompleted, "COMPLETED"},
		{"failed: schema", []string{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":7}`}, ExitFailed, "/path"},
		{"failed: malformed", []string{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":`}, ExitFailed, "not valid JSON"},
		{"failed: injection pattern", []string{"run", "file.read@1.0.0", "--allow", "filesystem.read:.", "--input", `{"path":"a; rm -rf /"}`}, ExitFailed, "FAILED"},
		{"denied", []string{"run", "file.read", "--input", `{"path":"hello.txt"}`}, ExitDenied, "--allow filesystem.read:PATH"},
		{"denied: wrong capability", []string{"run", "file.read", "--allow", "filesystem.write:.", "--input", `{"path":"hello.txt"}`}, ExitDenied, "DENIED"},
		{"aborted: file size limit", []string{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"big.txt"}`}, ExitAborted, "file_size_limit"},
		{"rolled back: tool error", []string{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"sub"}`}, ExitRollback, "not a regular file"},
		{"denied: outside the grant", []string{"run", "file.read", "--allow", "filesystem.read:sub", "--input", `{"path":"hello.txt"}`}, ExitDenied, "is outside filesystem.read:"}, // the hint names the grant, not the path's place
		{"usage: unknown tool", []string{"run", "no.such.tool"}, ExitUsage, "toolgate tools"},
		{"usage: unknown version", []string{"run", "file.read@9.0.0", "--allow", "filesystem.read:."}, ExitUsage, "9.0.0"},
		{"usage: bad capability", []string{"run", "file.read", "--allow", "Not A Cap"}, ExitUsage, "--allow"},
		{"usage: missing input file", []string{"run", "file.read", "--input", "@nope.json"}, ExitUsage, "--input"},
		{"usage: no tool", []string{"run"}, ExitUsage, "accepts 1 arg"},
		{"usage: unknown flag", []string{"run", "file.read", "--frobnicate"}, ExitUsage, "unknown flag"},
		{"usage: unknown command", []string{"explode"}, ExitUsage, "unknown command"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := toolgate(t, "", tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, tc.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.stderr) {
				t.Fatalf("stderr does not mention %q:\n%s", tc.stderr, r.stderr)
			}
		})
	}
}

func TestRun_Output(t *testing.T) {
	workdir(t)
	r := toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`)
	var out struct {
		Content string `json:"content"`
		Size    int    `json:"size"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Content != "hello\n" || out.Size != 6 {
		t.Fatalf("stdout %q: %+v %v", r.stdout, out, err)
	}
	// The invocation is recorded in the default database.
	store, err := txn.Open(theDB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	recs, err := store.List(context.Background(), txn.Filter{})
	if err != nil || len(recs) != 1 || recs[0].State != "COMPLETED" || !strings.HasPrefix(recs[0].Principal, "cli:") {
		t.Fatalf("records %+v, %v", recs, err)
	}
}

func TestRun_JSON(t *testing.T) {
	workdir(t)
	r := toolgate(t, "", "run", "file.read", "--json", "--call-id", "call-1", "--input", `{"path":"hello.txt"}`)
	if r.code != ExitDenied {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var res struct {
		ExecutionID string `json:"executionId"`
		CallID      string `json:"callId"`
		Tool        string `json:"tool"`
		Version     string `json:"version"`
		State       string `json:"state"`
		Error       *struct {
			Type, Code, Message string
		} `json:"error"`
		Attempts []json.RawMessage `json:"attempts"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, r.stdout)
	}
	if res.ExecutionID == "" || res.CallID != "call-1" || res.Tool != "file.read" || res.Version != "1.2.0" ||
		res.State != "DENIED" || res.Error == nil || res.Error.Type != "AuthorizationError" || len(res.Attempts) != 1 {
		t.Fatalf("result %+v", res)
	}
}

func TestRun_InputSources(t *testing.T) {
	workdir(t)
	must(t, os.WriteFile("in.json", []byte(`{"path":"hello.txt"}`), 0o600))
	for name, tc := range map[string]struct {
		input, stdin string
	}{
		"file":  {"@in.json", ""},
		"stdin": {"-", `{"path":"hello.txt"}`},
	} {
		t.Run(name, func(t *testing.T) {
			r := toolgate(t, tc.stdin, "run", "file.read", "--allow", "filesystem.read:.", "--input", tc.input)
			if r.code != ExitCompleted || !strings.Contains(r.stdout, "hello") {
				t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
		})
	}
}

func TestRun_DatabaseLocked(t *testing.T) {
	bboltOnly(t, whyLock)
	workdir(t)
	store, err := txn.Open(theDB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r := toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`)
	if r.code != ExitInternal || !strings.Contains(r.stderr, "locked") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}

func TestTools(t *testing.T) {
	workdir(t)
	r := toolgate(t, "", "tools")
	if r.code != 0 || !strings.Contains(r.stdout, "file.read") || !strings.Contains(r.stdout, "filesystem.read") {
		t.Fatalf("tools: %d %s %s", r.code, r.stdout, r.stderr)
	}
	r = toolgate(t, "", "tools", "--json")
	var decls []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &decls); err != nil || len(decls) == 0 {
		t.Fatalf("tools --json: %v %s", err, r.stdout)
	}
	ids := map[any]bool{}
	for _, d := range decls {
		ids[d["id"]] = true
	}
	for _, id := range []string{"file.read", "file.list", "file.write", "which_command", "exec_status", "exec_capture", "exec_with_input", "exec"} {
		if !ids[id] {
			t.Errorf("tools --json lacks %s", id)
		}
	}
}

func TestDescribe(t *testing.T) {
	workdir(t)
	r := toolgate(t, "", "describe", "file.read")
	for _, want := range []string{"file.read@1.2.0", "Input schema", `"pattern"`, "Output schema", "max execution time 5s"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("describe output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = toolgate(t, "", "describe", "file.read", "--json")
	var d struct {
		ID             string          `json:"id"`
		InputSchema    json.RawMessage `json:"inputSchema"`
		ResourceLimits struct {
			MaxExecutionTime int `json:"maxExecutionTime"`
		} `json:"resourceLimits"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || d.ID != "file.read" || d.ResourceLimits.MaxExecutionTime != 5000 {
		t.Fatalf("describe --json: %v %+v", err, d)
	}
	if r := toolgate(t, "", "describe", "nope"); r.code != ExitUsage {
		t.Fatalf("describe nope: exit %d", r.code)
	}
}

func TestHelp_ListsExitCodes(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"run", "--help"}} {
		r := toolgate(t, "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Exit codes:") || !strings.Contains(r.stdout, "6  ROLLED_BACK") {
			t.Fatalf("%v: exit %d\n%s", args, r.code, r.stdout)
		}
	}
}

func TestDBPath(t *testing.T) {
	t.Setenv("TOOLGATE_DB", "")
	t.Setenv("XDG_STATE_HOME", "/xdg")
	if p, _ := (&globals{}).dbPath(); p != "/xdg/toolgate/toolgate.db" {
		t.Fatalf("XDG: %s", p)
	}
	t.Setenv("TOOLGATE_DB", "/env.db")
	if p, _ := (&globals{}).dbPath(); p != "/env.db" {
		t.Fatalf("env: %s", p)
	}
	if p, _ := (&globals{db: "/flag.db"}).dbPath(); p != "/flag.db" {
		t.Fatalf("flag: %s", p)
	}
}
