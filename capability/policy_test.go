package capability

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var at = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func mustPolicy(t *testing.T, src string) *Policy {
	t.Helper()
	p, err := ParsePolicy("policy.json", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const policySrc = `{
  "version": 1,
  "principals": {
    "alice": ["filesystem.read:/srv/data", "state.write:orders", "process.exec:git"],
    "bob":   ["filesystem.read"]
  }
}`

// TestPolicy_Decide is the table of capability decisions of issue 5: each
// case is a principal, what a tool requires and what the decision must be.
func TestPolicy_Decide(t *testing.T) {
	p := mustPolicy(t, policySrc)
	cases := []struct {
		name      string
		principal string
		required  []string
		extra     []string
		missing   []string
	}{
		{"granted exactly", "alice", []string{"filesystem.read:/srv/data"}, nil, nil},
		{"granted below the scope", "alice", []string{"filesystem.read:/srv/data/reports/q3.csv"}, nil, nil},
		{"missing name", "alice", []string{"network.http:api.example.com"}, nil, []string{"network.http:api.example.com"}},
		{"scope too narrow", "alice", []string{"filesystem.read:/srv"}, nil, []string{"filesystem.read:/srv"}},
		{"prefix trickery: data2 is not below data", "alice", []string{"filesystem.read:/srv/data2"}, nil, []string{"filesystem.read:/srv/data2"}},
		{"prefix trickery: database", "alice", []string{"filesystem.read:/srv/database/x"}, nil, []string{"filesystem.read:/srv/database/x"}},
		{"read is not write", "alice", []string{"filesystem.write:/srv/data"}, nil, []string{"filesystem.write:/srv/data"}},
		{"command scope is exact", "alice", []string{"process.exec:git-lfs"}, nil, []string{"process.exec:git-lfs"}},
		{"state namespace", "alice", []string{"state.write:orders"}, nil, nil},
		{"state namespace prefix trickery", "alice", []string{"state.write:orders2"}, nil, []string{"state.write:orders2"}},
		{"unscoped grant covers every scope", "bob", []string{"filesystem.read:/etc/hosts"}, nil, nil},
		{"unknown principal holds nothing", "mallory", []string{"filesystem.read:/srv/data"}, nil, []string{"filesystem.read:/srv/data"}},
		{"unknown principal, nothing required", "mallory", nil, nil, nil},
		{"extra grants add", "alice", []string{"network.http:api.example.com"}, []string{"network.http:api.example.com"}, nil},
		{"some met, some missing", "alice", []string{"state.write:orders", "state.write:users"}, nil, []string{"state.write:users"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(tc.principal, "tool.x", mustList(t, tc.required), mustList(t, tc.extra), at)
			if got := Strings(d.Missing); !slices.Equal(got, nonNil(tc.missing)) {
				t.Errorf("missing = %q, want %q", got, tc.missing)
			}
			if d.Allowed() != (len(tc.missing) == 0) {
				t.Errorf("Allowed() = %v with missing %q", d.Allowed(), d.Missing)
			}
			if d.ID == "" || d.PolicyRevision != p.Revision() || !d.At.Equal(at) || d.Principal != tc.principal || d.Tool != "tool.x" {
				t.Errorf("decision record incomplete: %+v", d)
			}
		})
	}
}

func TestPolicy_DecisionIDsAreUnique(t *testing.T) {
	p := mustPolicy(t, policySrc)
	seen := map[string]bool{}
	for range 100 {
		d := p.Decide("alice", "t", nil, nil, at)
		if seen[d.ID] {
			t.Fatalf("decision id %s repeated", d.ID)
		}
		seen[d.ID] = true
	}
}

func TestDecision_Effective(t *testing.T) {
	p, err := NewPolicy(map[string][]Capability{
		"alice": mustList(t, []string{"filesystem.read:/srv", "filesystem.read:/home/alice", "state.write:orders", "process.exec:git"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	d := p.Decide("alice", "t", mustList(t, []string{"filesystem.read:/srv/data", "state.write"}), nil, at)
	if !d.Allowed() {
		t.Fatalf("denied: %+v", d)
	}
	got := Strings(d.Effective())
	want := []string{"filesystem.read:/srv/data", "state.write:orders"}
	if !slices.Equal(got, want) {
		t.Errorf("Effective() = %q, want %q (the declared scope, not the broader grant; no process.exec the tool did not declare)", got, want)
	}
	d = p.Decide("alice", "t", mustList(t, []string{"filesystem.read"}), nil, at)
	if got, want := Strings(d.Effective()), []string{"filesystem.read:/home/alice", "filesystem.read:/srv"}; !slices.Equal(got, want) {
		t.Errorf("unscoped requirement: Effective() = %q, want the granted scopes %q", got, want)
	}
}

func TestPolicy_RevisionIsContent(t *testing.T) {
	fromFile := mustPolicy(t, policySrc)
	fromValue, err := NewPolicy(map[string][]Capability{
		"bob":   mustList(t, []string{"filesystem.read"}),
		"alice": mustList(t, []string{"process.exec:git", "state.write:orders", "filesystem.read:/srv/data", "state.write:orders"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if fromFile.Revision() != fromValue.Revision() {
		t.Errorf("same grants, different revisions: %s vs %s", fromFile.Revision(), fromValue.Revision())
	}
	if !strings.HasPrefix(fromFile.Revision(), "sha256:") || len(fromFile.Revision()) != len("sha256:")+64 {
		t.Errorf("revision %q is not sha256:<hex>", fromFile.Revision())
	}
	changed := mustPolicy(t, strings.Replace(policySrc, "/srv/data", "/srv/data2", 1))
	if changed.Revision() == fromFile.Revision() {
		t.Error("a changed grant kept the revision")
	}
	if got := fromFile.Principals(); !slices.Equal(got, []string{"alice", "bob"}) {
		t.Errorf("Principals() = %q", got)
	}
	g := fromFile.Grants("alice")
	g[0] = MustParse("filesystem.write")
	if fromFile.Grants("alice")[0] == g[0] {
		t.Error("Grants returned the policy's own slice")
	}
}

func TestLoadPolicy_FailsClosed(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name    string
		path    func() string
		wantErr string
	}{
		{"missing file", func() string { return filepath.Join(dir, "nope.json") }, "no such file"},
		{"a directory", func() string { return dir }, "is a directory"},
		{"syntax error", write(t, dir, "syntax.json", "{\n  \"version\": 1,\n  \"principals\": {\"a\": [\"x\",]}\n}"), "syntax.json:3:"},
		{"unknown field", write(t, dir, "unknown.json", `{"version": 1, "principals": {}, "roles": {}}`), `unknown field "roles"`},
		{"wrong version", write(t, dir, "version.json", `{"version": 2, "principals": {}}`), `"version" must be 1`},
		{"no version", write(t, dir, "noversion.json", `{"principals": {}}`), `"version" must be 1`},
		{"bad capability", write(t, dir, "badcap.json", "{\"version\": 1,\n \"principals\": {\"alice\": [\"filesystem.read:/srv/../etc\"]}}"), `badcap.json:2:`},
		{"duplicate principal", write(t, dir, "dup.json", "{\"version\": 1, \"principals\": {\n\"alice\": [],\n\"alice\": [\"process.exec\"]}}"), `dup.json:3:2: principal "alice" is listed twice`},
		{"grants not a list", write(t, dir, "type.json", `{"version": 1, "principals": {"alice": "filesystem.read"}}`), "a list of capability strings"},
		{"empty file", write(t, dir, "empty.json", ""), "empty"},
		{"trailing data", write(t, dir, "trailing.json", `{"version": 1, "principals": {}} {}`), "after the policy object"},
		{"empty principal", write(t, dir, "emptyname.json", `{"version": 1, "principals": {"": ["state.read"]}}`), "empty principal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := LoadPolicy(tc.path())
			if err == nil || !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want ErrPolicy containing %q", err, tc.wantErr)
			}
			if p == nil || p.Err() == nil {
				t.Fatal("LoadPolicy did not return a deny-all policy with its error")
			}
			for _, req := range [][]Capability{nil, mustList(t, []string{"filesystem.read"})} {
				d := p.Decide("alice", "t", req, mustList(t, []string{"filesystem.read"}), at)
				if d.Allowed() {
					t.Errorf("a policy that failed to load allowed %v", req)
				}
				if !strings.Contains(d.Reason, "policy unavailable") || !strings.Contains(d.Reason, tc.wantErr) {
					t.Errorf("reason %q does not say why", d.Reason)
				}
			}
		})
	}
}

func TestLoadPolicy_Valid(t *testing.T) {
	p, err := LoadPolicy(write(t, t.TempDir(), "ok.json", policySrc)())
	if err != nil || p.Err() != nil {
		t.Fatal(err, p.Err())
	}
	if !p.Decide("alice", "t", mustList(t, []string{"state.write:orders"}), nil, at).Allowed() {
		t.Error("valid policy denied a granted capability")
	}
}

func TestNewPolicy_Refuses(t *testing.T) {
	for _, grants := range []map[string][]Capability{
		{"": nil},
		{"a b": nil},
		{"alice": {{Name: "Not A Name"}}},
	} {
		if _, err := NewPolicy(grants); !errors.Is(err, ErrPolicy) {
			t.Errorf("NewPolicy(%v) = %v, want ErrPolicy", grants, err)
		}
	}
}

func write(t *testing.T, dir, name, content string) func() string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return func() string { return p }
}

func mustList(t *testing.T, ss []string) []Capability {
	t.Helper()
	cs, err := ParseList(ss)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func nonNil(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

// DecideIn takes a relative filesystem grant from the working directory it
// is given, as the tools' handles do; Decide, with none, matches scopes as
// written.
func TestPolicy_DecideIn(t *testing.T) {
	p, err := NewPolicy(map[string][]Capability{"alice": {MustParse("filesystem.read:data"), MustParse("state.write:orders")}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tc := range []struct {
		workDir string
		req     string
		allowed bool
	}{
		{"/work", "filesystem.read:/work/data", true},
		{"/work", "filesystem.read:/work/data/sub", true},
		{"/work", "filesystem.read:/work/database", false},
		{"/work", "filesystem.read:/other/data", false},
		{"/work", "filesystem.read:data", true},
		{"", "filesystem.read:/work/data", false},
		{"/work", "state.write:/work/orders", false},
	} {
		d := p.DecideIn(tc.workDir, "alice", "t", []Capability{MustParse(tc.req)}, nil, now)
		if d.Allowed() != tc.allowed {
			t.Errorf("in %q, %s: allowed %v; want %v", tc.workDir, tc.req, d.Allowed(), tc.allowed)
		}
	}
}

// ParsePolicyChecked refuses a grant its check refuses, at the grant's own
// line and column, in the file's order; ParsePolicy checks nothing more.
func TestParsePolicyChecked(t *testing.T) {
	data := []byte("{\"version\": 1, \"principals\": {\n  \"bob\": [\"state.write:x\", \"filesystem.raed:/a\"],\n  \"alice\": [\"filesystem.raed:/b\"]\n}}")
	check := func(g string) error {
		if strings.HasPrefix(g, "filesystem.raed") {
			return errors.New("unknown capability")
		}
		return nil
	}
	_, err := ParsePolicyChecked("p.json", data, check)
	if !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), `p.json:2:29: principal "bob": unknown capability`) {
		t.Errorf("err = %v; want bob's second grant at 2:29", err)
	}
	if _, err := ParsePolicy("p.json", data); err != nil {
		t.Errorf("ParsePolicy: %v", err)
	}
}
