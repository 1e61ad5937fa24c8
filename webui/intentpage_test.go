package webui_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"html"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// The intent page decides as Execute will, with the intent's own input: a
// process call with a cwd requires reading that directory, shown MISSING
// for a proposer without it. Its history says which key signed the
// approval.
func TestIntentPage_DecidedWithTheInput(t *testing.T) {
	key, err := audit.GenerateSigningKey(rand.Reader, "serverkey")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, false, nil, nil, func(o *tgruntime.Options) { o.ApprovalKey = key })
	dir := t.TempDir()
	input, _ := json.Marshal(map[string]any{"command": "true", "cwd": dir})
	in, err := f.rt.Propose(context.Background(), tgruntime.Invocation{Tool: "exec_status", Input: input, Principal: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.rt.Approve(context.Background(), in.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	b := f.browser(t)
	b.login(aliceToken)
	_, page := b.get("/ui/intents/" + in.ID)
	for _, want := range []string{"requires <code>filesystem.read:" + dir, "approved by alice, signed with key serverkey"} {
		if !strings.Contains(page, want) {
			t.Errorf("the intent page lacks %q", want)
		}
	}
}

// fileFixture is newFixture with the built-in file tools registered too,
// and agent granted filesystem.write on out (a new directory) besides.
func fileFixture(t *testing.T) (f *fixture, out string) {
	t.Helper()
	out = filepath.Join(t.TempDir(), "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	f = newFixture(t, false, nil, nil, func(o *tgruntime.Options) {
		reg := tools.NewRegistry()
		for _, tl := range append([]tools.Tool{echoTool()}, tools.Builtins()...) {
			if err := reg.Register(tl); err != nil {
				t.Fatal(err)
			}
		}
		o.Registry = reg
		o.Grants["agent"] = append(o.Grants["agent"], capability.MustParse("filesystem.write:"+out))
	})
	return f, out
}

// An intent whose path leaves the grant, by "..", by a symbolic link, or
// names a missing place: the intent page shows the cleaned absolute path,
// where it leads, "(missing)", and the grant it falls outside of; Policy
// now is DENIED as the run would be, and the page says plainly that
// approving cannot make it run.
func TestIntentPage_PathWhereItLeads(t *testing.T) {
	f, out := fileFixture(t)
	home := filepath.Join(filepath.Dir(out), "home")
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(home, ".ssh"), filepath.Join(out, "link")); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(home, ".ssh", "authorized_keys")
	cases := []struct {
		name, path string
		allowed    bool
		want       []string
	}{
		{"dotdot", out + "/../home/.ssh/authorized_keys", false, []string{
			`<code class="abs">` + keys + `</code>`, "(missing)",
			`outside <code>filesystem.write:` + out + `</code>`, `id="cannot-run"`, "cannot make the call run",
		}},
		{"symlink", out + "/link/authorized_keys", false, []string{
			`<code class="abs">` + filepath.Join(out, "link", "authorized_keys") + `</code> leads to <code class="leads">` + keys + `</code>`,
			"out of filesystem.write:" + out, `id="cannot-run"`,
		}},
		{"missing directory", out + "/new/x.txt", true, []string{
			`<code class="abs">` + filepath.Join(out, "new", "x.txt") + `</code>`, "(missing)", "and so is its directory",
			`inside <code>filesystem.write:` + out + `</code>`, "Approve exactly this</button>",
		}},
	}
	b := f.browser(t)
	b.login(aliceToken)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			input, _ := json.Marshal(map[string]any{"path": c.path, "content": "ssh-ed25519 AAAA mallory\n"})
			in, err := f.rt.Propose(context.Background(), tgruntime.Invocation{Tool: "file.write", Input: input, Principal: "agent"})
			if err != nil {
				t.Fatal(err)
			}
			_, page := b.get("/ui/intents/" + in.ID)
			verdict := "DENIED: agent may not run file.write@1.1.0"
			if c.allowed {
				verdict = "ALLOWED: agent may run file.write@1.1.0"
			}
			for _, want := range append(c.want, verdict) {
				if !strings.Contains(page, html.EscapeString(want)) && !strings.Contains(page, want) {
					t.Errorf("the intent page lacks %q", want)
				}
			}
			if c.allowed && strings.Contains(page, `id="cannot-run"`) {
				t.Error("an allowed intent's page says approving cannot make it run")
			}
			// The run agrees with the page.
			if _, err := f.rt.Approve(context.Background(), in.ID, "alice"); err != nil {
				t.Fatal(err)
			}
			res, err := f.rt.Execute(context.Background(), tgruntime.Invocation{IntentID: in.ID, IntentHash: in.Hash, Principal: "agent"})
			if res == nil {
				t.Fatal(err)
			}
			if denied := res.State == lifecycle.Denied; denied == c.allowed {
				t.Errorf("the page said allowed=%v; the run: %s %v", c.allowed, res.State, err)
			}
		})
	}
}

// The pending list's one-line preview shows the fields that decide (a
// file tool's path) first: a long content never pushes the path out.
func TestIntentList_PreviewDecidingFieldsFirst(t *testing.T) {
	f, out := fileFixture(t)
	input, _ := json.Marshal(map[string]any{"content": strings.Repeat("a", 500), "path": out + "/../../etc/cron.d/x"})
	if _, err := f.rt.Propose(context.Background(), tgruntime.Invocation{Tool: "file.write", Input: input, Principal: "agent"}); err != nil {
		t.Fatal(err)
	}
	b := f.browser(t)
	b.login(aliceToken)
	_, page := b.get("/ui/intents?status=pending")
	want := html.EscapeString(`{"path":"` + out + `/../../etc/cron.d/x","content":"aaa`)
	if !strings.Contains(page, want) {
		t.Errorf("the pending list's preview does not begin with the path %q:\n%s", want, page)
	}
}
