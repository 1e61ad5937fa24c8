package webui_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/client"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// The intent page's "Policy now" shows the Cedar decision on the intent's
// input: the policy's id, the approver group and the policy set's
// revision. An approver outside the group is refused, on the page and
// over the HTTP API (403), and the intent stays pending.
func TestIntentPage_Cedar(t *testing.T) {
	dir := t.TempDir()
	src := "@id(\"refund-needs-finance\")\n@approval(\"finance\")\nforbid(principal, action in Toolgate::Action::\"test.echo\", resource) when { context.input.msg == \"refund\" };\n"
	if err := os.WriteFile(filepath.Join(dir, "shop.cedar"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	pj := `{"version": 1, "principals": {"alice": ["state.write:test"], "agent": ["state.write:test"]}, "cedar": ["shop.cedar"], "groups": {"finance": ["fiona"]}}`
	if err := os.WriteFile(filepath.Join(dir, "policy.json"), []byte(pj), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := capability.LoadPolicy(filepath.Join(dir, "policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, false, nil, nil, func(o *tgruntime.Options) { o.Policy, o.Grants = pol, nil })
	in, err := f.rt.Propose(context.Background(), tgruntime.Invocation{Tool: "test.echo", Input: []byte(`{"msg":"refund"}`), Principal: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	b := f.browser(t)
	b.login(aliceToken)
	_, page := b.get("/ui/intents/" + in.ID)
	for _, want := range []string{
		`<code id="cedar-set">` + pol.Rules().Revision() + `</code>`,
		`approval by <code class="cedar-policy">refund-needs-finance</code>: approved by a member of <code class="cedar-group">finance</code>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the intent page lacks %q", want)
		}
	}
	resp, page := b.post("/ui/intents/"+in.ID+"/approve", url.Values{"csrf": {b.csrf()}, "hash": {in.Hash}})
	if resp.StatusCode == http.StatusSeeOther || !strings.Contains(page, "alice is not a member of finance") {
		t.Errorf("alice approves on the page: %d\n%s", resp.StatusCode, page)
	}
	_, err = f.api(t, aliceToken).Approve(context.Background(), in.ID)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusForbidden || !strings.Contains(ce.Detail, "alice is not a member of finance") {
		t.Errorf("alice approves over HTTP: %v", err)
	}
	if s := f.status(t, in.ID); s != "pending" {
		t.Errorf("after the refused approvals: %s", s)
	}
}
