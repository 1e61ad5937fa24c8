package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// eventIn returns the event of the execution that entered state, failing
// the test when there is none.
func eventIn(t *testing.T, rt *tgruntime.Runtime, executionID string, state lifecycle.State) audit.Event {
	t.Helper()
	for _, e := range auditEventsOf(t, rt, executionID) {
		if e.State == string(state) {
			return e
		}
	}
	t.Fatalf("no %s audit event for %s", state, executionID)
	return audit.Event{}
}

// Rule 2 with a policy: every decision, allowed or denied, is recorded in
// the audit log with its id, the policy revision, and what was required,
// granted and missing; a denial also names the decision in its error.
func TestExecute_DecisionsAreAudited(t *testing.T) {
	policy, err := capability.ParsePolicy("", []byte(`{"version": 1, "principals": {
		"alice": ["state.write:test", "filesystem.read:/srv/data"],
		"bob":   ["state.write:test", "filesystem.read:/srv/data2"]
	}}`))
	if err != nil {
		t.Fatal(err)
	}
	reqs := func(d *tools.Declaration) {
		d.RequiredCapabilities = []capability.Capability{capability.MustParse("state.write:test"), capability.MustParse("filesystem.read:/srv/data/reports")}
	}
	rt, _ := openRuntime(t, &tgruntime.Options{Policy: policy}, echo("test.reports", reqs))

	inv := invoke("test.reports", `{"msg":"q3"}`)
	inv.Principal = "alice"
	res, err := rt.Execute(context.Background(), inv)
	if err != nil {
		t.Fatalf("alice: %v", err)
	}
	d := eventIn(t, rt, res.ExecutionID, lifecycle.Authorized).Decision
	if d == nil || d.ID == "" || d.PolicyRevision != policy.Revision() || len(d.Missing) != 0 ||
		!slices.Equal(d.Required, []string{"state.write:test", "filesystem.read:/srv/data/reports"}) ||
		!slices.Equal(d.Granted, []string{"state.write:test", "filesystem.read:/srv/data"}) {
		t.Errorf("AUTHORIZED event's decision = %+v", d)
	}

	inv.Principal = "bob" // holds /srv/data2, which shares a prefix with /srv/data but is not above it
	res, err = rt.Execute(context.Background(), inv)
	var ae *tgruntime.AuthorizationError
	if !errors.As(err, &ae) || res.State != lifecycle.Denied {
		t.Fatalf("bob: err = %v, state %s; want DENIED", err, res.State)
	}
	ev := eventIn(t, rt, res.ExecutionID, lifecycle.Denied)
	d = ev.Decision
	if d == nil || d.ID != ae.DecisionID || d.PolicyRevision != policy.Revision() || ae.PolicyRevision != policy.Revision() ||
		!slices.Equal(d.Missing, []string{"filesystem.read:/srv/data/reports"}) || ev.UserID != "bob" {
		t.Errorf("DENIED event's decision = %+v, error's id %q; want the missing scope and the same id", d, ae.DecisionID)
	}
	if ev.Error == nil || ev.Error.Code != "capability_denied" {
		t.Errorf("DENIED event's error = %+v", ev.Error)
	}
	if _, ok := stateOf(t, rt); !ok {
		t.Error("alice's run did not commit")
	}
}

// An unreadable or invalid policy denies everything, even a tool that
// requires nothing, and each denial says why.
func TestExecute_UnreadablePolicyDeniesEverything(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(bad, []byte(`{"version": 1, "principals": {"tester": ["state.write:test"],}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"missing": filepath.Join(dir, "nope.json"), "invalid": bad} {
		t.Run(name, func(t *testing.T) {
			policy, lerr := capability.LoadPolicy(path)
			if lerr == nil {
				t.Fatal("LoadPolicy succeeded")
			}
			rt, _ := openRuntime(t, &tgruntime.Options{Policy: policy},
				echo("test.free", func(d *tools.Declaration) { d.RequiredCapabilities = nil }))
			res, err := rt.Execute(context.Background(), invoke("test.free", `{"msg":"x"}`))
			var ae *tgruntime.AuthorizationError
			if !errors.As(err, &ae) || res.State != lifecycle.Denied {
				t.Fatalf("err = %v, state %s; want DENIED", err, res.State)
			}
			if !strings.Contains(err.Error(), "policy unavailable") || !strings.Contains(err.Error(), filepath.Base(path)) {
				t.Errorf("error %q does not say the policy is unavailable and which", err)
			}
			if res.Error.Code != "policy_unavailable" {
				t.Errorf("code = %q", res.Error.Code)
			}
			d := eventIn(t, rt, res.ExecutionID, lifecycle.Denied).Decision
			if d == nil || !strings.Contains(d.Reason, "policy unavailable") {
				t.Errorf("audit decision = %+v; want the reason", d)
			}
			if _, ok := stateOf(t, rt); ok {
				t.Error("the tool ran")
			}
		})
	}
}

// Every escape attempt through the filesystem handle is refused, the
// attempt rolls back, and the refusal is in the audit log.
func TestExecute_FilesystemEscapesAreDeniedAndAudited(t *testing.T) {
	base, err := os.MkdirTemp("", "tg") // short: the paths must fit the schema's 64 characters
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	data := filepath.Join(base, "data")
	for _, dir := range []string{data, filepath.Join(base, "data2")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, content := range map[string]string{"secret.txt": "secret", "data/ok.txt": "ok", "data2/x.txt": "x"} {
		if err := os.WriteFile(filepath.Join(base, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../secret.txt", filepath.Join(data, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(base, filepath.Join(data, "up")); err != nil {
		t.Fatal(err)
	}

	reader := tools.NewRaw(tools.Declaration{
		ID: "test.cat", Version: "1.0.0", Name: "cat", Description: "reads the file named by msg",
		InputSchema: json.RawMessage(msgSchema), OutputSchema: json.RawMessage(msgSchema),
		RequiredCapabilities: []capability.Capability{capability.MustParse("filesystem.read")},
		ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: 5e9},
	}, func(ctx context.Context, env *tools.Env, in json.RawMessage) (json.RawMessage, error) {
		var m msg
		if err := json.Unmarshal(in, &m); err != nil {
			return nil, err
		}
		f, err := env.FS("filesystem.read").Open(m.Msg)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		if err != nil {
			return nil, err
		}
		return json.Marshal(msg{Msg: string(b)})
	})
	grants := map[string][]capability.Capability{"tester": {{Name: "filesystem.read", Scope: data}}}
	rt, _ := openRuntime(t, &tgruntime.Options{Grants: grants, WorkDir: data}, reader)

	if res, err := rt.Execute(context.Background(), invoke("test.cat", `{"msg":"ok.txt"}`)); err != nil || string(res.Output) != `{"msg":"ok"}` {
		t.Fatalf("inside the grant: %v, %s", err, res.Output)
	}
	for _, p := range []string{"../secret.txt", filepath.Join(base, "secret.txt"), "link", "up/secret.txt", "/etc/passwd", filepath.Join(base, "data2", "x.txt"), "../data2/x.txt"} {
		t.Run(p, func(t *testing.T) {
			in, _ := json.Marshal(msg{Msg: p})
			res, err := rt.Execute(context.Background(), invoke("test.cat", string(in)))
			var ae *tgruntime.AuthorizationError
			if !errors.As(err, &ae) || !errors.Is(err, tools.ErrAccessDenied) || res.State != lifecycle.RolledBack {
				t.Fatalf("err = %v, state %s; want the handle's refusal, rolled back", err, res.State)
			}
			if strings.Contains(string(res.Output), "secret") {
				t.Fatalf("output %s leaks the secret", res.Output)
			}
			ev := eventIn(t, rt, res.ExecutionID, lifecycle.RolledBack)
			if ev.Error == nil || ev.Error.Type != "AuthorizationError" || ev.Error.Code != "capability_boundary" || !strings.Contains(ev.Error.Message, "access denied") {
				t.Errorf("ROLLED_BACK event's error = %+v; want the recorded refusal", ev.Error)
			}
		})
	}
}

// A symbolic link swapped in while the tool runs is refused like any other
// escape, and the refusal is audited: the tool keeps opening swap/f while
// the test flips swap between a directory inside the grant and a link to
// one outside it, and returns the first error it meets.
func TestExecute_SwappedSymlinkIsDeniedAndAudited(t *testing.T) {
	base, err := os.MkdirTemp("", "tg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	data, outside := filepath.Join(base, "data"), filepath.Join(base, "outside")
	for _, d := range []string{data, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "f"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	swap := filepath.Join(data, "swap")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.RemoveAll(swap)
			if os.Mkdir(swap, 0o755) == nil {
				os.WriteFile(filepath.Join(swap, "f"), []byte("inside"), 0o644)
			}
			os.RemoveAll(swap)
			os.Symlink("../outside", swap)
		}
	}()
	defer func() { close(stop); <-done }()

	prober := tools.NewRaw(tools.Declaration{
		ID: "test.probe", Version: "1.0.0", Name: "probe", Description: "opens swap/f until refused",
		InputSchema: json.RawMessage(msgSchema), OutputSchema: json.RawMessage(msgSchema),
		RequiredCapabilities: []capability.Capability{capability.MustParse("filesystem.read")},
		ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: 20e9},
	}, func(ctx context.Context, env *tools.Env, in json.RawMessage) (json.RawMessage, error) {
		for ctx.Err() == nil {
			f, err := env.FS("filesystem.read").Open("swap/f")
			if errors.Is(err, tools.ErrAccessDenied) {
				return nil, err
			}
			if err != nil {
				continue // the swapper removed a component mid-walk
			}
			b, _ := io.ReadAll(f)
			f.Close()
			if string(b) == "secret" {
				return json.Marshal(msg{Msg: "read the secret"})
			}
		}
		return nil, ctx.Err()
	})
	grants := map[string][]capability.Capability{"tester": {{Name: "filesystem.read", Scope: data}}}
	rt, _ := openRuntime(t, &tgruntime.Options{Grants: grants, WorkDir: data}, prober)
	for range 3 {
		res, err := rt.Execute(context.Background(), invoke("test.probe", `{"msg":"x"}`))
		if err == nil {
			t.Fatalf("the tool got through the swapped link: %s", res.Output)
		}
		if !errors.Is(err, tools.ErrAccessDenied) || res.State != lifecycle.RolledBack {
			t.Fatalf("err = %v, state %s; want the handle's refusal", err, res.State)
		}
		if ev := eventIn(t, rt, res.ExecutionID, lifecycle.RolledBack); ev.Error == nil || ev.Error.Code != "capability_boundary" {
			t.Errorf("audit: %+v", ev.Error)
		}
	}
}
