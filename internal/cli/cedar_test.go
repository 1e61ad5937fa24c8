package cli

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const cedarRegistry = `tools:
  - id: shop.refund
    version: 1.0.0
    description: refunds an order
    command: echo
    argv: ["refund", "{order}"]
    input_schema: {$schema: "https://json-schema.org/draft/2020-12/schema", type: object, properties: {order: {type: string, description: the order, maxLength: 20}, amount: {type: integer, description: how much}}, required: [order, amount], additionalProperties: false}
    limits: {max_execution_time: 10s}
  - id: git.push
    version: 1.0.0
    description: pushes a branch
    command: echo
    argv: ["push", "origin", "{branch}"]
    input_schema: {$schema: "https://json-schema.org/draft/2020-12/schema", type: object, properties: {branch: {type: string, description: the branch, maxLength: 40}}, required: [branch], additionalProperties: false}
    limits: {max_execution_time: 10s}
`

const cedarPolicies = `// Refunds over 100 need a person of finance.
@id("refund-over-100")
@approval("finance")
forbid(principal, action in Toolgate::Action::"shop.refund", resource)
when { context.input.amount > 100 };

// A push to main needs a person; other branches do not.
@id("push-main")
@approval
forbid(principal, action == Toolgate::Action::"git.push@1.0.0", resource)
when { context.input.branch == "main" };

// ci-bot may run kubectl get, never kubectl delete.
@id("no-kubectl-delete")
forbid(principal == Toolgate::Principal::"ci-bot", action in Toolgate::Action::"exec_capture", resource)
when { context.input.command == "kubectl" && context.input.args.contains("delete") };
`

const cedarPolicyJSON = `{
  "version": 1,
  "principals": {
    "agent": ["process.exec:echo"],
    "ci-bot": ["process.exec:kubectl"]
  },
  "cedar": ["shop.cedar"],
  "groups": {"finance": ["fiona"]}
}`

func cedarWorkdir(t *testing.T) {
	t.Helper()
	workdir(t)
	must(t, os.WriteFile("reg.yaml", []byte(cedarRegistry), 0o600))
	must(t, os.WriteFile("shop.cedar", []byte(cedarPolicies), 0o600))
	must(t, os.WriteFile("policy.json", []byte(cedarPolicyJSON), 0o600))
	t.Setenv("TOOLGATE_REGISTRY", "reg.yaml")
	t.Setenv("TOOLGATE_POLICY", "policy.json")
}

// policy check --input explains the Cedar decision: the policy ids and
// the policy set's revision, in text and JSON; a refund over 100 and a
// push to main need a person (of finance, for the refund), the others do
// not; run agrees.
func TestCedar_PolicyCheckAndRun(t *testing.T) {
	cedarWorkdir(t)
	check := func(tool, input string) (run, map[string]any) {
		args := []string{"policy", "check", "--principal", "agent", tool, "--input", input}
		r := toolgate(t, "", args...)
		j := toolgate(t, "", append(args, "--json")...)
		var v map[string]any
		if err := json.Unmarshal([]byte(j.stdout), &v); err != nil {
			t.Fatalf("%s --json: %v\n%s", tool, err, j.stdout)
		}
		return r, v
	}
	r, v := check("shop.refund", `{"order":"A1","amount":40}`)
	set, _ := v["cedarPolicySet"].(string)
	if r.code != ExitCompleted || !strings.HasPrefix(r.stdout, "ALLOWED: agent may run shop.refund") || !strings.HasPrefix(set, "sha256:") ||
		!regexp.MustCompile(`cedar policy set +`+set).MatchString(r.stdout) || !strings.Contains(r.stdout, "allow: no policy forbids this call") {
		t.Errorf("refund 40: exit %d\n%s", r.code, r.stdout)
	}
	r, v = check("shop.refund", `{"order":"A1","amount":250}`)
	cedar, _ := v["cedar"].(map[string]any)
	if r.code != ExitCompleted || !strings.HasPrefix(r.stdout, "ALLOWED AS AN APPROVED INTENT: agent may run shop.refund@1.0.0 once a member of finance approves") ||
		!strings.Contains(r.stdout, "approval by refund-over-100") || v["requiresApproval"] != true ||
		cedar["effect"] != "approval" || cedar["revision"] != set || !slices.Equal(strs(cedar["policies"]), []string{"refund-over-100"}) || !slices.Equal(strs(cedar["approvers"]), []string{"finance"}) {
		t.Errorf("refund 250: exit %d\n%s\n%v", r.code, r.stdout, v)
	}
	r, _ = check("git.push", `{"branch":"main"}`)
	if r.code != ExitCompleted || !strings.HasPrefix(r.stdout, "ALLOWED AS AN APPROVED INTENT: agent may run git.push@1.0.0 once a person approves") || !strings.Contains(r.stdout, "push-main") {
		t.Errorf("push main: exit %d\n%s", r.code, r.stdout)
	}
	r, _ = check("git.push", `{"branch":"topic"}`)
	if r.code != ExitCompleted || !strings.HasPrefix(r.stdout, "ALLOWED: agent may run git.push") {
		t.Errorf("push topic: exit %d\n%s", r.code, r.stdout)
	}
	if r := toolgate(t, "", "policy", "show"); !regexp.MustCompile(`cedar policy set +` + set + ` \(3 policies in shop.cedar\)`).MatchString(r.stdout) {
		t.Errorf("policy show:\n%s", r.stdout)
	}
	// Without --input, Cedar cannot decide: policy check says so.
	if r := toolgate(t, "", "policy", "check", "--principal", "agent", "git.push"); !strings.Contains(r.stdout, "Cedar policies decide on the call's input (--input)") {
		t.Errorf("without --input:\n%s", r.stdout)
	}

	runAs := func(tool, input string) run {
		return toolgate(t, "", "run", "--principal", "agent", tool, "--input", input)
	}
	if r := runAs("git.push", `{"branch":"topic"}`); r.code != ExitCompleted || !strings.Contains(r.stdout, "push origin topic") {
		t.Errorf("run push topic: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runAs("git.push", `{"branch":"main"}`); r.code != ExitDenied || !strings.Contains(r.stderr, "requires an approved intent (Cedar policy push-main)") {
		t.Errorf("run push main: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runAs("shop.refund", `{"order":"A1","amount":250}`); r.code != ExitDenied || !strings.Contains(r.stderr, "approved by a member of finance") {
		t.Errorf("run refund 250: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// The approver group: an approver outside finance is refused and the
// intent stays pending; fiona's approval runs it once.
func TestCedar_ApproverGroupCLI(t *testing.T) {
	cedarWorkdir(t)
	id, hash := propose(t, "shop.refund", "--principal", "agent", "--input", `{"order":"A1","amount":250}`)
	r := toolgate(t, "", "intent", "approve", id, "--yes", "--approver", "bob")
	if r.code == ExitCompleted || !strings.Contains(r.stderr, "bob is not a member of finance") || !strings.Contains(r.stderr, "refund-over-100") {
		t.Fatalf("bob approves: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "intent", "show", id); !strings.Contains(r.stdout, "PENDING") {
		t.Fatalf("after bob:\n%s", r.stdout)
	}
	if r := toolgate(t, "", "intent", "approve", id, "--yes", "--approver", "fiona"); r.code != ExitCompleted {
		t.Fatalf("fiona approves: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "run", "--principal", "agent", "--intent", id, "--hash", hash); r.code != ExitCompleted || !strings.Contains(r.stdout, "refund A1") {
		t.Fatalf("run the intent: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The records hold the Cedar decisions, and verify.
	if r := toolgate(t, "", "audit", "verify"); r.code != ExitCompleted {
		t.Fatalf("audit verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// ci-bot may run kubectl get, never kubectl delete, though the policy
// grants it process.exec:kubectl: the forbid overrides the grant, on the
// argv, and nothing runs.
func TestCedar_ForbidOverridesGrantCLI(t *testing.T) {
	cedarWorkdir(t)
	check := func(args string) run {
		return toolgate(t, "", "policy", "check", "--principal", "ci-bot", "exec_capture", "--input", `{"command":"kubectl","args":`+args+`}`)
	}
	if r := check(`["get","pods"]`); r.code != ExitCompleted || !strings.HasPrefix(r.stdout, "ALLOWED") {
		t.Errorf("kubectl get: exit %d\n%s", r.code, r.stdout)
	}
	if r := check(`["delete","pod","web-1"]`); r.code != ExitDenied || !strings.Contains(r.stdout, "deny by no-kubectl-delete") || !strings.Contains(r.stdout, "forbidden by Cedar policy no-kubectl-delete") {
		t.Errorf("kubectl delete: exit %d\n%s", r.code, r.stdout)
	}
	r := toolgate(t, "", "run", "--principal", "ci-bot", "exec_capture", "--input", `{"command":"kubectl","args":["delete","pod","web-1"]}`, "--json")
	if r.code != ExitDenied || !strings.Contains(r.stdout, `"cedar_forbidden"`) {
		t.Errorf("run kubectl delete: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A policy set that does not parse, or names an action for no tool, is
// refused with the file and position: a usage error, nothing runs.
func TestCedar_LoadRefused(t *testing.T) {
	cedarWorkdir(t)
	cases := []struct{ src, want string }{
		{"forbid(principal, action, resource);\n\nforbid(principal action, resource);", "shop.cedar:3:"},
		{"\n@id(\"typo\")\nforbid(principal, action == Toolgate::Action::\"shop.refnud\", resource);", `shop.cedar:2:1: action Toolgate::Action::"shop.refnud" names no registered tool`},
		{"permit(principal, action, resource);", "shop.cedar:1:1: a permit policy grants nothing here"},
	}
	for _, c := range cases {
		must(t, os.WriteFile("shop.cedar", []byte(c.src), 0o600))
		for _, args := range [][]string{
			{"policy", "check", "--principal", "agent", "git.push"},
			{"run", "--principal", "agent", "git.push", "--input", `{"branch":"topic"}`},
		} {
			r := toolgate(t, "", args...)
			if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stdout, "push origin") {
				t.Errorf("%q, %s: exit %d\n%s%s", c.src, args[0], r.code, r.stdout, r.stderr)
			}
		}
	}
}

func strs(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}
