package rules_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/rules"
)

func write(t testing.TB, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const shop = `
@id("refund-over-100")
@approval("finance")
forbid(principal, action in Toolgate::Action::"refund", resource)
when { context.input.amount > 100 };

@id("push-main")
@approval
forbid(principal, action == Toolgate::Action::"git.push@1.0.0", resource)
when { context.input.branch == "main" };

@id("no-kubectl-delete")
forbid(principal == Toolgate::Principal::"ci-bot", action, resource)
when { context.input has command && context.input.command == "kubectl" && context.input.args.contains("delete") };

@id("interns-no-push")
forbid(principal in Toolgate::Group::"interns", action in Toolgate::Action::"git.push", resource)
unless { principal.claims has team && principal.claims.team.contains("release") };
`

func load(t *testing.T) *rules.Set {
	t.Helper()
	s, err := rules.Load([]string{write(t, "shop.cedar", shop)}, map[string][]string{"finance": {"fiona"}, "interns": {"ian"}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDecide(t *testing.T) {
	s := load(t)
	cases := []struct {
		name                string
		req                 rules.Request
		effect              string
		policies, approvers []string
	}{
		{"refund 50", rules.Request{Principal: "bob", Tool: "refund", Version: "1.0.0", Input: json.RawMessage(`{"amount":50}`)}, rules.Allow, nil, nil},
		{"refund 101 v2", rules.Request{Principal: "bob", Tool: "refund", Version: "2.0.0", Input: json.RawMessage(`{"amount":101}`)}, rules.Approval, []string{"refund-over-100"}, []string{"finance"}},
		{"refund 100.5 fails closed", rules.Request{Principal: "bob", Tool: "refund", Version: "1.0.0", Input: json.RawMessage(`{"amount":100.5}`)}, rules.Deny, []string{"refund-over-100"}, nil},
		{"refund 250", rules.Request{Principal: "bob", Tool: "refund", Version: "1.0.0", Input: json.RawMessage(`{"amount":250}`)}, rules.Approval, []string{"refund-over-100"}, []string{"finance"}},
		{"refund no amount", rules.Request{Principal: "bob", Tool: "refund", Version: "1.0.0", Input: json.RawMessage(`{}`)}, rules.Deny, []string{"refund-over-100"}, nil},
		{"push main", rules.Request{Principal: "bob", Tool: "git.push", Version: "1.0.0", Input: json.RawMessage(`{"branch":"main"}`)}, rules.Approval, []string{"push-main"}, nil},
		{"push topic", rules.Request{Principal: "bob", Tool: "git.push", Version: "1.0.0", Input: json.RawMessage(`{"branch":"topic"}`)}, rules.Allow, nil, nil},
		{"kubectl get", rules.Request{Principal: "ci-bot", Tool: "exec", Version: "1.0.0", Input: json.RawMessage(`{"command":"kubectl","args":["get","pods"]}`)}, rules.Allow, nil, nil},
		{"kubectl delete", rules.Request{Principal: "ci-bot", Tool: "exec", Version: "1.0.0", Input: json.RawMessage(`{"command":"kubectl","args":["delete","pod","x"]}`)}, rules.Deny, []string{"no-kubectl-delete"}, nil},
		{"kubectl delete other", rules.Request{Principal: "alice", Tool: "exec", Version: "1.0.0", Input: json.RawMessage(`{"command":"kubectl","args":["delete","pod","x"]}`)}, rules.Allow, nil, nil},
		{"intern push", rules.Request{Principal: "ian", Tool: "git.push", Version: "1.0.0", Input: json.RawMessage(`{"branch":"topic"}`)}, rules.Deny, []string{"interns-no-push"}, nil},
		{"intern push main", rules.Request{Principal: "ian", Tool: "git.push", Version: "1.0.0", Input: json.RawMessage(`{"branch":"main"}`)}, rules.Deny, []string{"interns-no-push"}, nil},
		{"intern release", rules.Request{Principal: "ian", Claims: map[string][]string{"team": {"release"}}, Tool: "git.push", Version: "1.0.0", Input: json.RawMessage(`{"branch":"topic"}`)}, rules.Allow, nil, nil},
	}
	for _, c := range cases {
		d := s.Decide(c.req)
		if d.Effect != c.effect || !slices.Equal(d.Policies, c.policies) || !slices.Equal(d.Approvers, c.approvers) || d.Revision != s.Revision() {
			t.Errorf("%s: got %+v, want %s %v %v", c.name, d, c.effect, c.policies, c.approvers)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		src, want string
	}{
		{"forbid(principal, action, resource);\n\nforbid(principal action, resource);", "bad.cedar:3:"},
		{"\n  permit(principal, action, resource);", "bad.cedar:2:3: a permit policy grants nothing"},
		{"@approval(\"nobody\")\nforbid(principal, action, resource);", `bad.cedar:1:1: @approval("nobody") names a group`},
		{"@id(\"a\")\nforbid(principal, action, resource);\n@id(\"a\")\nforbid(principal, action, resource);", `bad.cedar:3:1: policy id "a" is used already`},
	}
	for _, c := range cases {
		_, err := rules.Load([]string{write(t, "bad.cedar", c.src)}, nil)
		var re *rules.Error
		if !errors.As(err, &re) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.src, err, c.want)
		}
	}
	_, err := rules.Load([]string{filepath.Join(t.TempDir(), "none.cedar")}, nil)
	if !strings.Contains(err.Error(), "none.cedar: cannot be read") {
		t.Errorf("missing file: %v", err)
	}
}

func TestCheckActions(t *testing.T) {
	s := load(t)
	known := func(tool, version string) bool {
		return tool == "refund" && version == "" || tool == "git.push" && (version == "" || version == "1.0.0")
	}
	if err := s.CheckActions(known); err != nil {
		t.Fatal(err)
	}
	eq, err := rules.Load([]string{write(t, "eq.cedar", "\n  forbid(principal, action == Toolgate::Action::\"refund\", resource);")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := eq.CheckActions(known); err == nil || !strings.Contains(err.Error(), `eq.cedar:2:3: action == Toolgate::Action::"refund" never matches`) {
		t.Errorf("== a tool without its version: %v", err)
	}
	err = s.CheckActions(func(tool, version string) bool { return tool != "git.push" || version == "" })
	var re *rules.Error
	if !errors.As(err, &re) || re.Line != 7 || re.Column != 1 || !strings.Contains(err.Error(), `Toolgate::Action::"git.push@1.0.0" names no registered tool`) {
		t.Fatalf("got %v", err)
	}
}

func TestRevision(t *testing.T) {
	a, b := load(t), load(t)
	if a.Revision() != b.Revision() || !strings.HasPrefix(a.Revision(), "sha256:") {
		t.Fatal(a.Revision(), b.Revision())
	}
	c, err := rules.Load([]string{write(t, "shop.cedar", shop+"\n// changed\n")}, map[string][]string{"finance": {"fiona"}, "interns": {"ian"}})
	if err != nil || c.Revision() == a.Revision() {
		t.Fatal(err, c.Revision())
	}
}
