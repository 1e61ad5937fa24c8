package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if r.code != ExitCompleted || !strings.Contains(r.stdout, "ALLOWED: alice may run file.read@1.1.0") ||
		!strings.Contains(r.stdout, "met by filesystem.read:"+dir) || !strings.Contains(r.stdout, "sha256:") {
		t.Fatalf("alice: code %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = toolgate(t, "", "policy", "check", "--policy", policy, "--principal", "mallory", "file.read")
	if r.code != ExitDenied || !strings.Contains(r.stdout, "DENIED: mallory may not run file.read@1.1.0") || !strings.Contains(r.stdout, "MISSING") {
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
	if r.code != ExitDenied || !strings.Contains(r.stdout, "policy unavailable") || !strings.Contains(r.stderr, "policy.json:1:") {
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
	// bob holds only sub/: authorized (file.read requires filesystem.read),
	// but the handle refuses hello.txt.
	if r := toolgate(t, "", "run", "--policy", policy, "--principal", "bob", "file.read", "--input", in); r.code != ExitRollback || !strings.Contains(r.stderr, "outside the granted scopes") {
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

	// An unreadable policy denies everything, --allow included, and says so.
	r := toolgate(t, "", "run", "--policy", filepath.Join(dir, "nope.json"), "--principal", "alice", "--allow", "filesystem.read:.", "file.read", "--input", in, "--json")
	if r.code != ExitDenied || !strings.Contains(r.stderr, "nope.json") || !strings.Contains(r.stdout, "policy_unavailable") {
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
	if r := toolgate(t, "", "policy", "show", "--policy", filepath.Join(dir, "nope.json")); r.code != ExitDenied || !strings.Contains(r.stderr, "denied") {
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
