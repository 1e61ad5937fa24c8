package webui_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/audit"
	tgruntime "github.com/toolgate/toolgate/runtime"
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
