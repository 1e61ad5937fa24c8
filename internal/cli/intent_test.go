package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// toolgateTTY runs the CLI as toolgate does, with stdin a terminal a person
// answers on.
func toolgateTTY(t *testing.T, stdin string, args ...string) run {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, Stdio{In: strings.NewReader(stdin), Out: &out, Err: &errb, Terminal: func() bool { return true }})
	if strings.Contains(errb.String(), "goroutine ") || strings.Contains(errb.String(), "panic:") {
		t.Fatalf("stack trace on stderr:\n%s", errb.String())
	}
	scanRun(t, args, out.String(), errb.String())
	return run{code, out.String(), errb.String()}
}

var proposedRE = regexp.MustCompile(`intent ([0-9a-f-]{36})\nhash   ([0-9a-f]{64})\n`)

func propose(t *testing.T, args ...string) (id, hash string) {
	t.Helper()
	r := toolgate(t, "", append([]string{"intent", "propose"}, args...)...)
	m := proposedRE.FindStringSubmatch(r.stdout)
	if r.code != ExitCompleted || m == nil {
		t.Fatalf("propose: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return m[1], m[2]
}

func TestIntent_CLI(t *testing.T) {
	workdir(t)
	id, hash := propose(t, "file.read", "--input", `{"path":"hello.txt"}`)

	if r := toolgate(t, "", "intent", "propose", "file.read", "--input", `{"path":7}`); r.code != ExitFailed {
		t.Errorf("invalid input proposed: exit %d", r.code)
	}
	r := toolgate(t, "", "intent", "list")
	if r.code != 0 || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "pending") {
		t.Fatalf("list: %d\n%s", r.code, r.stdout)
	}
	r = toolgate(t, "", "intent", "show", id)
	for _, want := range []string{id, hash, "PENDING", "file.read@1.2.0", `"path": "hello.txt"`, "proposed by cli:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	runIntent := []string{"run", "--intent", id, "--hash", hash, "--allow", "filesystem.read:."}
	if r := toolgate(t, "", runIntent...); r.code != ExitDenied || !strings.Contains(r.stderr, "not approved yet") {
		t.Fatalf("pending intent ran: exit %d\n%s", r.code, r.stderr)
	}

	// Approval needs a person (or --yes).
	if r := toolgate(t, "", "intent", "approve", id); r.code != ExitUsage || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("approved without a terminal: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgateTTY(t, "n\n", "intent", "approve", id); r.code != ExitDenied || !strings.Contains(r.stderr, "not approved") ||
		!strings.Contains(r.stderr, `"path": "hello.txt"`) {
		t.Fatalf("answered no: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "intent", "list", "--status", "approved"); strings.Contains(r.stdout, id) {
		t.Fatal("a 'no' approved it")
	}
	if r := toolgateTTY(t, "y\n", "intent", "approve", id); r.code != ExitCompleted || !strings.Contains(r.stdout, "--hash "+hash) {
		t.Fatalf("answered yes: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	if r := toolgate(t, "", "run", "--intent", id, "--hash", strings.Repeat("0", 64)); r.code != ExitDenied || !strings.Contains(r.stderr, "hash") {
		t.Errorf("wrong hash: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "run", "--intent", "nope", "--hash", hash); r.code != ExitUsage {
		t.Errorf("malformed id: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "run", "--intent", id); r.code != ExitUsage {
		t.Errorf("--intent without --hash: exit %d", r.code)
	}
	if r := toolgate(t, "", append(runIntent, "--input", `{"path":"other.txt"}`)...); r.code != ExitUsage {
		t.Errorf("--intent with --input: exit %d", r.code)
	}
	r = toolgate(t, "", runIntent...)
	if r.code != ExitCompleted || !strings.Contains(r.stdout, "hello") {
		t.Fatalf("approved intent: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = toolgate(t, "", runIntent...)
	if r.code != ExitCompleted || !strings.Contains(r.stderr, "replayed") || !strings.Contains(r.stderr, "already_executed") || !strings.Contains(r.stdout, "hello") {
		t.Fatalf("second run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = toolgate(t, "", "intent", "show", id, "--json")
	var v struct {
		Status    string `json:"status"`
		Execution *struct {
			ExecutionID string `json:"executionId"`
		} `json:"execution"`
		Refusals []struct{ Code string } `json:"refusals"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Status != "executed" || v.Execution == nil || len(v.Refusals) < 3 {
		t.Fatalf("show --json: %v\n%s", err, r.stdout)
	}
	if r := toolgate(t, "", "show", v.Execution.ExecutionID); r.code != 0 || !strings.Contains(r.stdout, "COMPLETED") {
		t.Errorf("the intent's execution record: exit %d\n%s", r.code, r.stdout)
	}
}

func TestIntent_CLIReject(t *testing.T) {
	workdir(t)
	id, hash := propose(t, "file.read", "--input", `{"path":"hello.txt"}`)
	if r := toolgate(t, "", "intent", "reject", id); r.code != ExitUsage {
		t.Errorf("reject without --reason: exit %d", r.code)
	}
	if r := toolgate(t, "", "intent", "reject", id, "--reason", "not today"); r.code != ExitCompleted {
		t.Fatalf("reject: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "intent", "approve", id, "--yes"); r.code != ExitDenied || !strings.Contains(r.stderr, "final") {
		t.Errorf("approve after reject: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "run", "--intent", id, "--hash", hash, "--allow", "filesystem.read:."); r.code != ExitDenied || !strings.Contains(r.stderr, "not today") {
		t.Errorf("rejected intent: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "intent", "show", id); !strings.Contains(r.stdout, "rejected by") || !strings.Contains(r.stdout, "not today") {
		t.Errorf("show:\n%s", r.stdout)
	}
}

// For a process tool, show and approve say exactly what will run: the
// resolved executable and each argument.
func TestIntent_CLIShowsArgv(t *testing.T) {
	workdir(t)
	id, _ := propose(t, "exec_capture", "--input", `{"command":"echo","args":["-n","a b","$(id)"]}`)
	r := toolgate(t, "", "intent", "show", id)
	if !regexp.MustCompile(`Executable:\s+/\S*/echo`).MatchString(r.stdout) || !strings.Contains(r.stdout, `Argv:        echo -n "a b" "$(id)"`) {
		t.Fatalf("show:\n%s", r.stdout)
	}
}

func TestRun_IdempotencyKey(t *testing.T) {
	workdir(t)
	base := []string{"run", "file.read", "--allow", "filesystem.read:.", "--idempotency-key", "k1"}
	r := toolgate(t, "", append(base, "--input", `{"path":"hello.txt"}`)...)
	if r.code != ExitCompleted || strings.Contains(r.stderr, "replayed") {
		t.Fatalf("first: exit %d\n%s", r.code, r.stderr)
	}
	r = toolgate(t, "", append(base, "--input", `{"path":"hello.txt"}`, "--json")...)
	var res struct {
		Replayed bool `json:"replayed"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != ExitCompleted || !res.Replayed {
		t.Fatalf("second: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", append(base, "--input", `{"path":"big.txt"}`)...); r.code != ExitDenied || !strings.Contains(r.stderr, "different request") {
		t.Fatalf("same key, other input: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", append(base, "--input", `{"path":"hello.txt"}`, "--bypass-idempotency")...); r.code != ExitCompleted || strings.Contains(r.stderr, "replayed") {
		t.Fatalf("bypass: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "run", "file.read", "--bypass-idempotency"); r.code != ExitUsage {
		t.Errorf("--bypass-idempotency without a key: exit %d", r.code)
	}
}

// intent approve prints a run hint that works as printed (with the --allow
// the run needs); intent list --status takes any case (show prints
// PENDING); intent show lists the history in time order.
func TestIntent_ApproveHintStatusCaseHistoryOrder(t *testing.T) {
	workdir(t)
	id, hash := propose(t, "file.read", "--input", `{"path":"hello.txt"}`)
	for _, s := range []string{"PENDING", "Pending", "pending"} {
		if r := toolgate(t, "", "intent", "list", "--status", s); r.code != 0 || !strings.Contains(r.stdout, id) {
			t.Errorf("list --status %s: exit %d\n%s%s", s, r.code, r.stdout, r.stderr)
		}
	}
	if r := toolgate(t, "", "intent", "list", "--status", "APPROVED"); r.code != 0 || strings.Contains(r.stdout, id) {
		t.Errorf("list --status APPROVED: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Refused while pending, then approved: the refusal comes first.
	if r := toolgate(t, "", "run", "--intent", id, "--hash", hash, "--allow", "filesystem.read:."); r.code != ExitDenied {
		t.Fatalf("pending intent: exit %d\n%s", r.code, r.stderr)
	}
	r := toolgate(t, "", "intent", "approve", id, "--yes")
	_, hint, ok := strings.Cut(r.stdout, "run it with: toolgate ")
	if r.code != 0 || !ok || !strings.Contains(hint, "--allow filesystem.read:.") {
		t.Fatalf("approve: exit %d, want a hint with --allow filesystem.read:.\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", strings.Fields(hint)...); r.code != 0 || !strings.Contains(r.stdout, `"content": "hello\n"`) {
		t.Fatalf("the hint as printed (%s): exit %d\n%s%s", strings.TrimSpace(hint), r.code, r.stdout, r.stderr)
	}
	// A path that climbs out by "..": the hint never suggests granting the
	// place it climbs to.
	esc, _ := propose(t, "file.write", "--input", `{"path":"out/../../elsewhere/x.txt","content":"x"}`)
	r = toolgate(t, "", "intent", "approve", esc, "--yes")
	if r.code != 0 || strings.Contains(r.stdout, "elsewhere") || !strings.Contains(r.stdout, "--allow filesystem.write:DIR") {
		t.Errorf("approving a climbing path hints:\n%s%s", r.stdout, r.stderr)
	}
	show := toolgate(t, "", "intent", "show", id).stdout
	proposed, refused, approved, executed := strings.Index(show, "proposed by"), strings.Index(show, "refused to"),
		strings.Index(show, "approved by"), strings.Index(show, "executed by")
	if proposed < 0 || !(proposed < refused && refused < approved && approved < executed) {
		t.Fatalf("history not in time order:\n%s", show)
	}
}
