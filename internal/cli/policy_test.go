package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/server"
)

func writePolicy(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "policy.json")
	src := `{"version": 1, "principals": {
		"alice": ["filesystem.read:` + dir + `"],
		"bob":   ["filesystem.read:` + filepath.Join(dir, "sub") + `"]
	}}`
	must(t, os.WriteFile(p, []byte(src), 0o600))
	return p
}

func TestPolicyCheck(t *testing.T) {
	dir := workdir(t)
	policy := writePolicy(t, dir)

	r := toolgate(t, "", "policy", "check", "--policy", policy, "--principal", "alice", "file.read")
	if r.code != ExitCompleted || !strings.Contains(r.stdout, "ALLOWED: alice may run file.read@1.2.0") ||
		!strings.Contains(r.stdout, "met by filesystem.read:"+dir) || !strings.Contains(r.stdout, "sha256:") {
		t.Fatalf("alice: code %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = toolgate(t, "", "policy", "check", "--policy", policy, "--principal", "mallory", "file.read")
	if r.code != ExitDenied || !strings.Contains(r.stdout, "DENIED: mallory may not run file.read@1.2.0") || !strings.Contains(r.stdout, "MISSING") {
		t.Fatalf("mallory: code %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = toolgate(t, "", "policy", "check", "--policy", policy, "--principal", "mallory", "--allow", "filesystem.read:.", "file.read", "--json")
	var v decisionView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != ExitCompleted || !v.Allowed || v.DecisionID == "" ||
		len(v.Effective) != 1 || v.Effective[0] != "filesystem.read:"+dir {
		t.Fatalf("--allow adds to the policy: code %d, %+v, %v\n%s", r.code, v, err, r.stderr)
	}

	if err := os.WriteFile(policy, []byte(`{"version": 1, "principals": {"alice": ["filesystem.read:`+dir+`"],}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = toolgate(t, "", "policy", "check", "--policy", policy, "--principal", "alice", "file.read")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "policy.json:1:") {
		t.Fatalf("invalid policy: code %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = toolgate(t, "", "policy", "check", "no.such.tool")
	if r.code != ExitUsage {
		t.Fatalf("unknown tool: code %d", r.code)
	}
}

func TestRun_Principal(t *testing.T) {
	dir := workdir(t)
	policy := writePolicy(t, dir)
	in := `{"path":"hello.txt"}`

	if r := toolgate(t, "", "run", "--policy", policy, "--principal", "alice", "file.read", "--input", in); r.code != ExitCompleted {
		t.Fatalf("alice: code %d\n%s", r.code, r.stderr)
	}
	// bob holds only sub/: file.read of hello.txt requires
	// filesystem.read covering it, which bob lacks: denied, exit 4, the
	// hint naming the grant the path falls outside of.
	if r := toolgate(t, "", "run", "--policy", policy, "--principal", "bob", "file.read", "--input", in); r.code != ExitDenied || !strings.Contains(r.stderr, "is outside filesystem.read:"+filepath.Join(dir, "sub")) {
		t.Fatalf("bob: code %d\n%s", r.code, r.stderr)
	}
	// --allow adds to what the policy gives.
	if r := toolgate(t, "", "run", "--policy", policy, "--principal", "bob", "--allow", "filesystem.read:.", "file.read", "--input", in); r.code != ExitCompleted {
		t.Fatalf("bob with --allow: code %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "run", "--policy", policy, "--principal", "mallory", "file.read", "--input", in); r.code != ExitDenied {
		t.Fatalf("mallory: code %d\n%s", r.code, r.stderr)
	}
	t.Setenv("TOOLGATE_POLICY", policy)
	if r := toolgate(t, "", "run", "--principal", "alice", "file.read", "--input", in); r.code != ExitCompleted {
		t.Fatalf("TOOLGATE_POLICY: code %d\n%s", r.code, r.stderr)
	}

	// An unreadable policy is a usage error (TestPolicyFile_BrokenIsUsageError).
	r := toolgate(t, "", "run", "--policy", filepath.Join(dir, "nope.json"), "--principal", "alice", "--allow", "filesystem.read:.", "file.read", "--input", in, "--json")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "nope.json") {
		t.Fatalf("unreadable policy: code %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestPolicyShow(t *testing.T) {
	dir := workdir(t)
	policy := writePolicy(t, dir)
	r := toolgate(t, "", "policy", "show", "--policy", policy)
	if r.code != ExitCompleted || !strings.Contains(r.stdout, "alice") || !strings.Contains(r.stdout, "revision") {
		t.Fatalf("code %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "policy", "show", "--policy", filepath.Join(dir, "nope.json")); r.code != ExitUsage || !strings.Contains(r.stderr, "nope.json") {
		t.Fatalf("unreadable: code %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "policy", "show"); r.code != ExitUsage {
		t.Fatalf("no policy: code %d", r.code)
	}
}

// A filesystem grant names a place: its symbolic links are followed when
// the grant is made, and policy check shows where each grant the tool's
// handles would expose leads, from the policy as from --allow; run reaches
// the same place.
func TestPolicyCheck_ShowsResolvedGrant(t *testing.T) {
	dir := workdir(t)
	real := filepath.Join(dir, "sub")
	must(t, os.WriteFile(filepath.Join(real, "in.txt"), []byte("inside\n"), 0o600))
	must(t, os.Symlink("sub", filepath.Join(dir, "link")))
	link := filepath.Join(dir, "link")
	policy := filepath.Join(dir, "policy.json")
	must(t, os.WriteFile(policy, []byte(`{"version": 1, "principals": {"alice": ["filesystem.read:`+link+`"]}}`), 0o600))

	r := toolgate(t, "", "policy", "check", "--policy", policy, "--principal", "alice", "file.read")
	if want := "filesystem.read:" + link + " -> " + real + " (directory)"; r.code != ExitCompleted || !strings.Contains(r.stdout, want) {
		t.Fatalf("code %d; want %q in\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	r = toolgate(t, "", "policy", "check", "--principal", "bob", "--allow", "filesystem.read:link", "file.read", "--json")
	var v decisionView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != ExitCompleted || len(v.Places) != 1 ||
		v.Places[0] != (placeView{Capability: "filesystem.read:" + link, Place: real, Kind: "directory"}) {
		t.Fatalf("--allow: code %d, %+v, %v\n%s", r.code, v, err, r.stderr)
	}
	if r := toolgate(t, "", "policy", "show", "--policy", policy); !strings.Contains(r.stdout, "leads to "+real) {
		t.Errorf("policy show does not say where the grant leads:\n%s", r.stdout)
	}
	if r := toolgate(t, "", "run", "--policy", policy, "--principal", "alice", "file.read", "--input", `{"path":"link/in.txt"}`); r.code != ExitCompleted || !strings.Contains(r.stdout, "inside") {
		t.Fatalf("run through the resolved grant: code %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A policy file that is missing or invalid, given by --policy or
// $TOOLGATE_POLICY, is a usage error (exit 2) before anything is recorded:
// run, policy check and policy show refuse, and serve does not start.
func TestPolicyFile_BrokenIsUsageError(t *testing.T) {
	dir := workdir(t)
	db := os.Getenv("TOOLGATE_DB")
	invalid := filepath.Join(dir, "invalid.json")
	must(t, os.WriteFile(invalid, []byte("{\"version\": 1,\n \"principals\": {\"alice\": [\"filesystem.read:.\",]}}"), 0o600))
	missing := filepath.Join(dir, "missing.json")
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok")+`"}]}`), 0o600))
	cmds := [][]string{
		{"run", "--principal", "alice", "--allow", "filesystem.read:.", "file.read", "--input", `{"path":"hello.txt"}`},
		{"run", "--principal", "alice", "--allow", "filesystem.read:.", "file.read", "--input", `{"path":"hello.txt"}`, "--json"},
		{"policy", "check", "--principal", "alice", "file.read"},
		{"policy", "show"},
		{"serve", "--config", cfg, "--addr", "127.0.0.1:0"},
	}
	for _, file := range []struct{ path, want string }{{invalid, "invalid.json:2:"}, {missing, "missing.json"}} {
		for _, args := range cmds {
			for _, viaEnv := range []bool{false, true} {
				a := append([]string{"--policy", file.path}, args...)
				if viaEnv {
					t.Setenv("TOOLGATE_POLICY", file.path)
					a = args
				}
				var r run
				if args[0] == "serve" {
					// A server that starts anyway stops when ctx ends (and
					// fails the test); one that refuses returns at once.
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					var out, errb syncBuffer
					code := Main(ctx, a, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
					cancel()
					r = run{code, out.String(), errb.String()}
				} else {
					r = toolgate(t, "", a...)
				}
				t.Setenv("TOOLGATE_POLICY", "")
				if r.code != ExitUsage || !strings.Contains(r.stderr, file.want) {
					t.Errorf("%v (env %v): exit %d, want 2 naming %s\n%s%s", a, viaEnv, r.code, file.want, r.stdout, r.stderr)
				}
			}
		}
	}
	if dbCreated(t, db) {
		t.Fatal("a broken policy file let a command create the database")
	}
}
