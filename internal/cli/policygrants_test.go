package cli

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/server"
)

// A policy file's grants are checked as --allow checks its values: a
// capability name no tool requires is refused with the name it is likely a
// typo of, and '*' is refused rather than taken as a path named "*". Every
// command that decides with the policy refuses it before anything runs or
// is opened, naming the file, the line and the column of the grant: policy
// show, policy check, doctor (failed), and serve and mcp at their start
// (exit 2).
func TestPolicyFile_GrantsCheckedAsAllow(t *testing.T) {
	dir := workdir(t)
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok")+`"}]}`), 0o600))
	addr := func() string { // a free loopback address, for the servers not to start on
		l, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		defer l.Close()
		return l.Addr().String()
	}
	for _, tc := range []struct {
		name, policy string
		want         []string
	}{
		{"typo", "{\"version\": 1,\n \"principals\": {\n  \"alice\": [\"filesystem.read:/tmp\",\n     \"filesystem.raed:/tmp\"]}}\n",
			[]string{"typo.json:4:7", `unknown capability "filesystem.raed"`, "did you mean filesystem.read?"}},
		{"star", `{"version": 1, "principals": {"alice": ["filesystem.read:*"]}}`,
			[]string{"star.json:1:42", `"filesystem.read:*": '*' is not a wildcard`}},
		{"unknown", `{"version": 1, "principals": {"alice": ["teleport.now"]}}`,
			[]string{"unknown.json:1:42", `unknown capability "teleport.now"; known: filesystem.read`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, tc.name+".json")
			must(t, os.WriteFile(file, []byte(tc.policy), 0o600))
			db := filepath.Join(dir, tc.name, "toolgate.db")
			for _, args := range [][]string{
				{"policy", "show"},
				{"policy", "check", "--principal", "alice", "file.read"},
				{"policy", "check", "--principal", "alice", "file.read", "--input", `{"path":"/tmp/x"}`},
				{"serve", "--config", cfg, "--addr", addr()},
				{"mcp"},
				{"mcp", "--http", addr(), "--config", cfg},
				{"run", "file.read", "--input", `{"path":"hello.txt"}`},
			} {
				r := toolgateWithin(t, 10*time.Second, append([]string{"--policy", file, "--db", db}, args...)...)
				if r.code != ExitUsage {
					t.Errorf("%v: exit %d; want %d\n%s%s", args, r.code, ExitUsage, r.stdout, r.stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("%v: the error does not say %q:\n%s", args, w, r.stderr)
					}
				}
			}
			r := toolgate(t, "", "--policy", file, "--db", db, "doctor")
			if r.code == ExitCompleted || strings.Contains(r.stdout, "policy ok") || !strings.Contains(r.stdout, tc.want[0]) {
				t.Errorf("doctor: exit %d; want the policy failed, naming %s\n%s", r.code, tc.want[0], r.stdout)
			}
			if _, err := os.Stat(db); err == nil {
				t.Error("a refused command created the database")
			}
		})
	}
	// A good policy still passes; a name only a registry file's tool
	// requires is known with that registry, and only with it.
	good := filepath.Join(dir, "good.json")
	must(t, os.WriteFile(good, []byte(`{"version": 1, "principals": {"alice": ["filesystem.read:`+dir+`", "process.exec:git", "idempotency.bypass", "network.http:api.example.com"]}}`), 0o600))
	reg := filepath.Join(dir, "registry.yaml")
	must(t, os.WriteFile(reg, []byte(`tools:
  - id: fetch
    version: 1.0.0
    name: Fetch
    description: Fetches a page
    command: curl
    argv: ["--", "https://api.example.com/"]
    capabilities: ["network.http:api.example.com"]
    input_schema:
      $schema: https://json-schema.org/draft/2020-12/schema
      type: object
      properties: {}
      required: []
      additionalProperties: false
    limits:
      max_execution_time: 30s
`), 0o600))
	if r := toolgate(t, "", "--registry", reg, "tools"); r.code != ExitCompleted || !strings.Contains(r.stdout, "fetch") {
		t.Fatalf("the registry does not load: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "--policy", good, "--registry", reg, "policy", "show"); r.code != ExitCompleted {
		t.Errorf("a good policy with its registry: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "--policy", good, "policy", "show"); r.code != ExitUsage || !strings.Contains(r.stderr, `unknown capability "network.http"`) {
		t.Errorf("network.http without the registry that requires it: exit %d\n%s", r.code, r.stderr)
	}
}

// toolgateWithin is toolgate with a context that ends after d: a server
// that starts when it should have refused stops, and the test fails
// rather than waits.
func toolgateWithin(t *testing.T, d time.Duration, args ...string) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errb bytes.Buffer
	code := Main(ctx, args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	return run{code, out.String(), errb.String()}
}

// --allow says which known name a typo is likely of.
func TestAllow_DidYouMean(t *testing.T) {
	workdir(t)
	r := toolgate(t, "", "run", "--allow", "filesystem.wrtie:.", "file.read", "--input", `{"path":"hello.txt"}`)
	if r.code != ExitUsage || !strings.Contains(r.stderr, "did you mean filesystem.write?") {
		t.Errorf("exit %d, %s", r.code, r.stderr)
	}
	r = toolgate(t, "", "run", "--allow", "network.http:x", "file.read", "--input", `{"path":"hello.txt"}`)
	if r.code != ExitUsage || strings.Contains(r.stderr, "did you mean") {
		t.Errorf("a name like none: exit %d, %s", r.code, r.stderr)
	}
}

// A refusal's hint names the grant the path falls outside of, never a
// grant of the place it went to (by an absolute path, "..", or a link);
// policy check --input and run decide alike (exit 4 both).
func TestRefusalHint_NamesTheGrant(t *testing.T) {
	dir := workdir(t)
	must(t, os.Mkdir("data", 0o700))
	must(t, os.WriteFile(filepath.Join("data", "a.txt"), []byte("a\n"), 0o600))
	must(t, os.Symlink("/etc/hostname", filepath.Join("data", "link")))
	grant := "filesystem.read:" + filepath.Join(dir, "data")
	for _, tc := range []struct {
		name, path string
		never      []string
	}{
		{"absolute", "/etc/shadow", []string{"--allow filesystem.read:/etc/shadow", "--allow filesystem.read:/etc"}},
		{"dotdot", "data/../../../etc/shadow", []string{"--allow filesystem.read:/etc", "--allow filesystem.read:" + filepath.Dir(dir)}},
		{"symlink", "data/link", []string{"--allow filesystem.read:data/link", "--allow filesystem.read:" + filepath.Join(dir, "data", "link"), "--allow filesystem.read:/etc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := `{"path":"` + tc.path + `"}`
			check := toolgate(t, "", "policy", "check", "--allow", "filesystem.read:data", "file.read", "--input", in)
			ran := toolgate(t, "", "run", "--allow", "filesystem.read:data", "file.read", "--input", in)
			if check.code != ExitDenied || ran.code != ExitDenied {
				t.Fatalf("policy check exit %d, run exit %d; want %d both\n%s\n%s", check.code, ran.code, ExitDenied, check.stdout, ran.stderr)
			}
			for _, out := range []string{check.stdout, ran.stderr} {
				if !strings.Contains(out, grant) {
					t.Errorf("the refusal does not name the grant %s:\n%s", grant, out)
				}
				for _, n := range tc.never {
					if strings.Contains(out, n) {
						t.Errorf("the refusal suggests %q:\n%s", n, out)
					}
				}
			}
		})
	}
}
