package cli

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// policy check on a tool that requires approval says it runs only as an
// approved intent (a plain run is denied whatever the grants), in text and
// JSON, and the run agrees.
func TestPolicyCheck_RequiresApproval(t *testing.T) {
	workdir(t)
	must(t, os.WriteFile("reg.yaml", []byte(`tools:
  - id: test.hello
    version: 1.0.0
    description: says hello
    command: echo
    argv: ["hello", "{name}"]
    input_schema: {$schema: "https://json-schema.org/draft/2020-12/schema", type: object, properties: {name: {type: string, description: who, maxLength: 20}}, required: [name], additionalProperties: false}
    limits: {max_execution_time: 10s}
    requires_approval: true
`), 0o600))
	args := []string{"--registry", "reg.yaml", "policy", "check", "test.hello", "--allow", "process.exec:echo"}
	r := toolgate(t, "", args...)
	if r.code != ExitCompleted || !strings.HasPrefix(r.stdout, "ALLOWED AS AN APPROVED INTENT:") || !strings.Contains(r.stdout, "intent propose") {
		t.Errorf("policy check: exit %d\n%s", r.code, r.stdout)
	}
	r = toolgate(t, "", append(args, "--json")...)
	var v struct{ Allowed, RequiresApproval bool }
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || !v.Allowed || !v.RequiresApproval {
		t.Errorf("policy check --json: %+v %v\n%s", v, err, r.stdout)
	}
	if r := toolgate(t, "", "--registry", "reg.yaml", "run", "test.hello", "--input", `{"name":"x"}`, "--allow", "process.exec:echo"); r.code != ExitDenied {
		t.Errorf("a plain run of it: exit %d, want denied\n%s", r.code, r.stderr)
	}
}
