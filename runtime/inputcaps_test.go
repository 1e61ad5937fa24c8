package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// decisionOf returns the capability decision an execution recorded in the
// audit log: on its AUTHORIZED event, or its DENIED one.
func decisionOf(t *testing.T, rt *tgruntime.Runtime, res *tgruntime.Result) (required, granted, missing []string) {
	t.Helper()
	state := lifecycle.Authorized
	if res.State == lifecycle.Denied {
		state = lifecycle.Denied
	}
	d := eventIn(t, rt, res.ExecutionID, state).Decision
	if d == nil {
		t.Fatalf("%s: no decision recorded", res.ExecutionID)
	}
	return d.Required, d.Granted, d.Missing
}

// A process tool requires filesystem.read only for a call that gives a
// working directory, scoped to that directory and decided in rule 2
// (AUTHORIZED, on the validated input): without a cwd the process runs in
// a fresh empty directory and needs no filesystem grant; with one, a
// principal without filesystem.read covering it is DENIED before anything
// runs. The decision recorded lists exactly what that input required.
func TestExecute_ProcessToolRequiresFilesystemOnlyForCwd(t *testing.T) {
	exe := childBinary(t)
	work := t.TempDir()
	dir := filepath.Join(work, "granted")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	grants := map[string][]capability.Capability{
		"nofs":   {{Name: "process.exec", Scope: exe}},
		"tester": {{Name: "process.exec", Scope: exe}, {Name: "filesystem.read", Scope: dir}},
		// A relative scope is taken from the runtime's working directory,
		// as the handles take it.
		"relative": {{Name: "process.exec", Scope: exe}, {Name: "filesystem.read", Scope: "granted"}},
	}
	rt, _ := openRuntime(t, &tgruntime.Options{Grants: grants, WorkDir: work, Retry: tgruntime.RetryPolicy{MaxRetries: -1}}, tools.ProcessTools()...)
	run := func(principal string, in map[string]any) (*tgruntime.Result, error) {
		b, _ := json.Marshal(in)
		return rt.Execute(context.Background(), tgruntime.Invocation{Tool: tools.ExecCaptureID, Input: b, Principal: principal})
	}
	execGrant := "process.exec:" + exe

	for _, tc := range []struct {
		name      string
		principal string
		in        map[string]any
		state     lifecycle.State
		required  []string
		granted   []string
		missing   []string
	}{
		{"no cwd, no filesystem grant", "nofs", map[string]any{"command": exe, "args": []string{"pwd"}},
			lifecycle.Completed, []string{"process.exec"}, []string{execGrant}, nil},
		{"no cwd, with a filesystem grant", "tester", map[string]any{"command": exe, "args": []string{"pwd"}},
			lifecycle.Completed, []string{"process.exec"}, []string{execGrant}, nil},
		{"cwd, no filesystem grant", "nofs", map[string]any{"command": exe, "args": []string{"pwd"}, "cwd": dir},
			lifecycle.Denied, []string{"process.exec", "filesystem.read:" + dir}, []string{execGrant}, []string{"filesystem.read:" + dir}},
		{"cwd outside the grant", "tester", map[string]any{"command": exe, "args": []string{"pwd"}, "cwd": other},
			lifecycle.Denied, []string{"process.exec", "filesystem.read:" + other}, []string{execGrant}, []string{"filesystem.read:" + other}},
		{"cwd escaping the grant with ..", "tester", map[string]any{"command": exe, "args": []string{"pwd"}, "cwd": dir + "/sub/../.."},
			lifecycle.Denied, []string{"process.exec", "filesystem.read:" + work}, []string{execGrant}, []string{"filesystem.read:" + work}},
		{"cwd in the grant", "tester", map[string]any{"command": exe, "args": []string{"pwd"}, "cwd": dir},
			lifecycle.Completed, []string{"process.exec", "filesystem.read:" + dir}, []string{execGrant, "filesystem.read:" + dir}, nil},
		{"cwd a link staying inside the grant", "tester", map[string]any{"command": exe, "args": []string{"pwd"}, "cwd": dir + "/link"},
			lifecycle.Completed, []string{"process.exec", "filesystem.read:" + dir + "/link"}, []string{execGrant, "filesystem.read:" + dir}, nil},
		{"relative grant", "relative", map[string]any{"command": exe, "args": []string{"pwd"}, "cwd": dir + "/sub"},
			lifecycle.Completed, []string{"process.exec", "filesystem.read:" + dir + "/sub"}, []string{execGrant, "filesystem.read:granted"}, nil},
		{"relative grant, cwd outside it", "relative", map[string]any{"command": exe, "args": []string{"pwd"}, "cwd": other},
			lifecycle.Denied, []string{"process.exec", "filesystem.read:" + other}, []string{execGrant}, []string{"filesystem.read:" + other}},
		{"relative cwd, from the working directory", "tester", map[string]any{"command": exe, "args": []string{"pwd"}, "cwd": "granted/sub"},
			lifecycle.Completed, []string{"process.exec", "filesystem.read:" + filepath.Join(dir, "sub")}, []string{execGrant, "filesystem.read:" + dir}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := run(tc.principal, tc.in)
			if res == nil {
				t.Fatalf("no result: %v", err)
			}
			if res.State != tc.state {
				t.Fatalf("state %s (%v); want %s", res.State, err, tc.state)
			}
			if tc.state == lifecycle.Denied {
				var ae *tgruntime.AuthorizationError
				if !errors.As(err, &ae) || res.Error == nil || res.Error.Code != "capability_denied" {
					t.Errorf("err = %v; want a capability denial", err)
				}
				if len(res.Attempts) != 1 || slices.ContainsFunc(res.Attempts[0].Transitions, func(tr lifecycle.Transition) bool { return tr.To == lifecycle.Executing }) {
					t.Errorf("a denied call must not reach EXECUTING: %+v", res.Attempts)
				}
			}
			// Decide, ahead of Execute, decides as Execute did.
			e, err := rt.Registry().Lookup(tools.ExecCaptureID, "")
			if err != nil {
				t.Fatal(err)
			}
			in, _ := json.Marshal(tc.in)
			if d := rt.Decide(tc.principal, e, in, nil); d.Allowed() != (tc.state != lifecycle.Denied) ||
				!slices.Equal(capability.Strings(d.Required), tc.required) {
				t.Errorf("Decide: allowed %v, required %q", d.Allowed(), capability.Strings(d.Required))
			}
			required, granted, missing := decisionOf(t, rt, res)
			if !slices.Equal(required, tc.required) || !slices.Equal(granted, tc.granted) || !slices.Equal(missing, tc.missing) {
				t.Errorf("decision: required %q granted %q missing %q; want %q, %q, %q", required, granted, missing, tc.required, tc.granted, tc.missing)
			}
			rec, err := rt.Execution(context.Background(), res.ExecutionID)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rec.Capabilities, tc.granted) {
				t.Errorf("record's capabilities %q; want %q", rec.Capabilities, tc.granted)
			}
		})
	}
}

// pathInput is the input of the Go tool below: an optional file to read.
type pathInput struct {
	Path  string `json:"path,omitempty"`
	NS    string `json:"ns,omitempty"`
	Probe bool   `json:"probe,omitempty"`
}

type pathOutput struct {
	Content string `json:"content"`
}

// A Go tool uses the same mechanism: it declares filesystem.read scoped
// by its optional input field path, and state.write scoped by ns. A call
// without them requires neither; a call with them requires exactly their
// scopes, decided before the tool runs; the tool's handles then reach the
// grants that met them.
func TestExecute_GoToolInputCapabilities(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	tl := tools.NewTyped(tools.Declaration{
		ID: "test.maybe_read", Version: "1.0.0", Name: "maybe read", Description: "reads path when given, writes ns when given",
		InputSchema: json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "a file to read"},
    "ns": {"type": "string", "description": "a state namespace to write"},
    "probe": {"type": "boolean", "description": "try the granted file and namespace without naming them"}
  },
  "required": [],
  "additionalProperties": false
}`),
		OutputSchema: json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {"content": {"type": "string", "description": "what was read"}},
  "required": ["content"],
  "additionalProperties": false
}`),
		InputCapabilities: []tools.InputCapability{{Name: "filesystem.read", ScopeFrom: "path"}, {Name: "state.write", ScopeFrom: "ns"}},
		ResourceLimits:    tools.ResourceLimits{MaxExecutionTime: 5 * time.Second},
	}, func(ctx context.Context, env *tools.Env, in pathInput) (pathOutput, error) {
		ran.Add(1)
		var out pathOutput
		if in.Probe { // the handles expose an input capability only to a call that required it
			if f, err := env.FS("filesystem.read").Open(filepath.Join(dir, "notes.txt")); err == nil {
				f.Close()
				out.Content += "read "
			}
			if err := env.State.Put("orders", "k", []byte("v")); err == nil {
				out.Content += "wrote"
			}
		}
		if in.Path != "" {
			f, err := env.FS("filesystem.read").Open(in.Path)
			if err != nil {
				return out, err
			}
			defer f.Close()
			b, err := io.ReadAll(f)
			if err != nil {
				return out, err
			}
			out.Content = string(b)
		}
		if in.NS != "" {
			if err := env.State.Put(in.NS, "k", []byte("v")); err != nil {
				return out, err
			}
		}
		return out, nil
	})
	grants := map[string][]capability.Capability{"tester": {{Name: "filesystem.read", Scope: dir}, {Name: "state.write", Scope: "orders"}}}
	rt, _ := openRuntime(t, &tgruntime.Options{Grants: grants}, tl)

	for _, tc := range []struct {
		name     string
		in       string
		state    lifecycle.State
		required []string
		runs     bool
	}{
		{"neither field", `{}`, lifecycle.Completed, []string{}, true},
		{"neither field, probing", `{"probe": true}`, lifecycle.Completed, []string{}, true},
		{"empty path", `{"path": ""}`, lifecycle.Completed, []string{}, true},
		{"path in the grant", `{"path": "` + dir + `/notes.txt"}`, lifecycle.Completed, []string{"filesystem.read:" + dir + "/notes.txt"}, true},
		{"path outside the grant", `{"path": "` + outside + `/secret.txt"}`, lifecycle.Denied, []string{"filesystem.read:" + outside + "/secret.txt"}, false},
		{"both", `{"path": "` + dir + `/notes.txt", "ns": "orders"}`, lifecycle.Completed, []string{"filesystem.read:" + dir + "/notes.txt", "state.write:orders"}, true},
		{"namespace not granted", `{"ns": "billing"}`, lifecycle.Denied, []string{"state.write:billing"}, false},
		{"namespace that is no scope", `{"ns": "orders/../billing"}`, lifecycle.Denied, []string{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := ran.Load()
			res, err := rt.Execute(context.Background(), invoke("test.maybe_read", tc.in))
			if res == nil || res.State != tc.state {
				t.Fatalf("res %+v, err %v; want %s", res, err, tc.state)
			}
			if got := ran.Load() > before; got != tc.runs {
				t.Errorf("the tool ran: %v; want %v", got, tc.runs)
			}
			if tc.name == "neither field, probing" && string(res.Output) != `{"content":""}` {
				t.Errorf("without path or ns, the tool reached %s", res.Output)
			}
			required, _, _ := decisionOf(t, rt, res)
			if !slices.Equal(required, tc.required) {
				t.Errorf("required %q; want %q", required, tc.required)
			}
			if tc.name == "namespace that is no scope" {
				var ae *tgruntime.AuthorizationError
				if !errors.As(err, &ae) || ae.Reason == "" {
					t.Errorf("err = %v; want a denial that says why", err)
				}
			}
		})
	}
}
