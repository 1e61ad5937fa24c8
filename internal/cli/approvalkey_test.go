package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Signed approvals through the CLI: keygen makes a private key and prints
// the line the policy lists; under that policy an approval signed with it
// runs; an approval recorded by a writer without a listed key (here the
// CLI under a policy without keys) is refused with exit 4 and named by
// audit verify; approving under the keyed policy without a listed key is
// refused before anything is recorded.
func TestIntent_SignedApprovals(t *testing.T) {
	dir := workdir(t)
	key := filepath.Join(dir, "alice.key")
	r := toolgate(t, "", "--approval-key", key, "intent", "keygen", "alice")
	pub := strings.TrimSpace(r.stdout)
	if r.code != ExitCompleted || !strings.HasPrefix(pub, "alice+") || !strings.Contains(r.stderr, "approvalKeys") {
		t.Fatalf("keygen: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The suggested line lists the key for the approver who signs with it.
	if !strings.Contains(r.stderr, `"approvalKeys": {"alice": ["`+pub+`"]}`) || strings.Contains(r.stderr, `"cli:`) {
		t.Errorf("keygen suggests:\n%s", r.stderr)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v, %v", fi, err)
	}
	before, _ := os.ReadFile(key)
	if r := toolgate(t, "", "--approval-key", key, "intent", "keygen", "alice"); r.code != ExitCompleted || strings.TrimSpace(r.stdout) != pub || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("keygen again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if after, _ := os.ReadFile(key); string(after) != string(before) {
		t.Fatal("keygen overwrote the key")
	}
	// The default file, when it exists, signs without a flag.
	if r := toolgate(t, "", "intent", "keygen", "me"); r.code != ExitCompleted {
		t.Fatalf("keygen to the default file: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "config", "toolgate", "approval.key")); err != nil {
		t.Fatalf("the default key: %v", err)
	}

	policy := filepath.Join(dir, "policy.json")
	pj, _ := json.Marshal(map[string]any{"version": 1, "principals": map[string]any{}, "approvalKeys": map[string][]string{"alice": {pub}}})
	must(t, os.WriteFile(policy, pj, 0o600))
	runIntent := func(id, hash string) run {
		return toolgate(t, "", "--policy", policy, "run", "--intent", id, "--hash", hash, "--allow", "filesystem.read:.")
	}

	// Signed by alice's key: runs.
	id, hash := propose(t, "file.read", "--input", `{"path":"hello.txt"}`)
	if r := toolgate(t, "", "--policy", policy, "--approval-key", key, "intent", "approve", id, "--yes", "--approver", "alice"); r.code != ExitCompleted {
		t.Fatalf("signed approval: exit %d\n%s", r.code, r.stderr)
	}
	if r := runIntent(id, hash); r.code != ExitCompleted || !strings.Contains(r.stdout, "hello") {
		t.Fatalf("a signed approval did not run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "intent", "show", id); !strings.Contains(r.stdout, "approved by alice, signed with key alice") {
		t.Errorf("intent show does not say who signed:\n%s", r.stdout)
	}

	// Under the keyed policy, an approval it would not count is refused.
	id2, hash2 := propose(t, "file.read", "--input", `{"path":"hello.txt"}`)
	r = toolgate(t, "", "--policy", policy, "intent", "approve", id2, "--yes", "--approver", "bob")
	if r.code != ExitDenied || !strings.Contains(r.stderr, "not listed for bob") {
		t.Fatalf("approval with a key not listed for its approver: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "intent", "show", id2); !strings.Contains(r.stdout, "PENDING") {
		t.Fatalf("the refused approval was recorded:\n%s", r.stdout)
	}

	// The forger: the same database, a policy without keys, no key.
	must(t, os.Remove(filepath.Join(dir, "config", "toolgate", "approval.key")))
	if r := toolgate(t, "", "intent", "approve", id2, "--yes", "--approver", "alice"); r.code != ExitCompleted {
		t.Fatalf("unsigned approval without keys: exit %d\n%s", r.code, r.stderr)
	}
	r = runIntent(id2, hash2)
	if r.code != ExitDenied || !strings.Contains(r.stderr, "not signed") || strings.Contains(r.stdout, "hello") {
		t.Fatalf("a forged approval: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = toolgate(t, "", "--policy", policy, "audit", "verify")
	if r.code != ExitVerify || !strings.Contains(r.stdout, id2) || !strings.Contains(r.stdout, "signature") {
		t.Fatalf("audit verify under the keyed policy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// An unsigned approval is named as what it is, not as a change outside toolgate.
	if !strings.Contains(r.stderr, "1 approval is not signed by a key the policy lists for its approver: it was made without a signature") ||
		strings.Contains(r.stderr, "changed outside toolgate") || strings.Contains(r.stdout, "changed outside toolgate") {
		t.Errorf("audit verify under the keyed policy says:\n%s%s", r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "audit", "verify"); r.code != ExitCompleted {
		t.Fatalf("audit verify without the policy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// A key named but missing, or not a key: usage errors, nothing opened.
	if r := toolgate(t, "", "--approval-key", filepath.Join(dir, "nope.key"), "intent", "approve", id2, "--yes"); r.code != ExitUsage || !strings.Contains(r.stderr, "keygen") {
		t.Errorf("a missing key: exit %d\n%s", r.code, r.stderr)
	}
	must(t, os.WriteFile(filepath.Join(dir, "bad.key"), []byte("not a key\n"), 0o600))
	if r := toolgate(t, "", "--approval-key", filepath.Join(dir, "bad.key"), "intent", "reject", id2, "--reason", "no"); r.code != ExitUsage || !strings.Contains(r.stderr, "bad.key") {
		t.Errorf("a malformed key: exit %d\n%s", r.code, r.stderr)
	}
	// Commands that decide nothing do not read the key.
	if r := toolgate(t, "", "--approval-key", filepath.Join(dir, "bad.key"), "run", "file.read", "--input", `{"path":"hello.txt"}`, "--allow", "filesystem.read:."); r.code != ExitCompleted {
		t.Errorf("run with a malformed approval key: exit %d\n%s", r.code, r.stderr)
	}
}

// doctor says whether decisions made here are signed, and fails when the
// policy requires signed approvals that this key cannot make.
func TestDoctor_ApprovalKey(t *testing.T) {
	dir := workdir(t)
	key := filepath.Join(dir, "alice.key")
	doctorLine := func(args ...string) string {
		t.Helper()
		r := toolgate(t, "", append(args, "doctor")...)
		for _, l := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(l, "approval key") {
				return l
			}
		}
		t.Fatalf("doctor has no approval key line:\n%s", r.stdout)
		return ""
	}
	if l := doctorLine(); !strings.Contains(l, "not signed") {
		t.Errorf("no key: %q", l)
	}
	pub := strings.TrimSpace(toolgate(t, "", "--approval-key", key, "intent", "keygen", "alice").stdout)
	if l := doctorLine("--approval-key", key); !strings.Contains(l, "are signed") || !strings.Contains(l, pub) {
		t.Errorf("a key: %q", l)
	}
	policy := filepath.Join(dir, "policy.json")
	must(t, os.WriteFile(policy, []byte(`{"version":1,"principals":{},"approvalKeys":{"alice":["`+pub+`"]}}`), 0o600))
	if l := doctorLine("--policy", policy, "--approval-key", key); !strings.Contains(l, "listed for alice") || strings.Contains(l, "failed") {
		t.Errorf("a listed key: %q", l)
	}
	if l := doctorLine("--policy", policy); !strings.Contains(l, "failed") || !strings.Contains(l, "refused") {
		t.Errorf("no key under a policy that requires one: %q", l)
	}
	must(t, os.WriteFile(policy, []byte(`{"version":1,"principals":{},"approvalKeys":{"bob":["bob+00000000+AQ=="]}}`), 0o600))
	if l := doctorLine("--policy", policy, "--approval-key", key); !strings.Contains(l, "failed") || !strings.Contains(l, "do not list") {
		t.Errorf("a key not listed: %q", l)
	}
}
