package server_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/audit"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// Under a policy with approval keys, the server signs its approvers'
// approvals with its own key (listed under "*"), and they run; a server
// whose key is not listed answers an approval 403 approval-unsigned, and
// records nothing.
func TestServer_SignedApprovals(t *testing.T) {
	ctx := context.Background()
	serverKey, _ := audit.GenerateSigningKey(rand.Reader, "server")
	otherKey, _ := audit.GenerateSigningKey(rand.Reader, "other")
	keyed := func(listed *audit.SigningKey, key *audit.SigningKey) func(*tgruntime.Options) {
		return func(o *tgruntime.Options) {
			p, err := o.Policy.WithApprovalKeys(map[string][]string{"*": {listed.Verifier().String()}})
			if err != nil {
				t.Fatal(err)
			}
			o.Policy, o.ApprovalKey = p, key
		}
	}

	f := newFixtureWith(t, nil, nil, true, keyed(serverKey, serverKey))
	agent := f.client(t, agentToken)
	it, err := agent.Propose(ctx, inv("test.echo", `{"msg":"signed"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client(t, approverToken).Approve(ctx, it.ID); err != nil {
		t.Fatalf("approval signed with the server's listed key: %v", err)
	}
	if res, err := agent.ExecuteIntent(ctx, it.ID, it.Hash); err != nil || res.State != "COMPLETED" {
		t.Fatalf("the signed approval's run: %+v, %v", res, err)
	}

	g := newFixtureWith(t, nil, nil, true, keyed(otherKey, serverKey))
	it, err = g.client(t, agentToken).Propose(ctx, inv("test.echo", `{"msg":"unsigned"}`))
	if err != nil {
		t.Fatal(err)
	}
	code, _, body := g.post(t, "/v1/intents/"+it.ID+"/approve", approverToken, "application/json", `{}`)
	if code != 403 || !strings.HasSuffix(body["type"].(string), "/approval-unsigned") || !strings.Contains(body["detail"].(string), "not listed") {
		t.Fatalf("an approval the server cannot sign with a listed key: %d %v", code, body)
	}
	if got, err := g.rt.Intent(ctx, it.ID); err != nil || got.Status != tgruntime.IntentPending {
		t.Fatalf("the refused approval was recorded: %+v, %v", got, err)
	}
}

// A proposer at its limit of pending intents is answered 429
// too-many-pending, and nothing is stored (the store is not blamed).
func TestServer_PendingLimit(t *testing.T) {
	ctx := context.Background()
	f := newFixtureWith(t, nil, nil, true, func(o *tgruntime.Options) { o.MaxPendingIntents = 1 })
	if _, err := f.client(t, agentToken).Propose(ctx, inv("test.echo", `{"msg":"one"}`)); err != nil {
		t.Fatal(err)
	}
	code, _, body := f.post(t, "/v1/intents", agentToken, "application/json", `{"tool":"test.echo","input":{"msg":"two"}}`)
	if code != 429 || !strings.HasSuffix(body["type"].(string), "/too-many-pending") {
		t.Fatalf("a proposal over the limit: %d %v", code, body)
	}
	if all, _ := f.rt.Intents(ctx, tgruntime.IntentFilter{}); len(all) != 1 {
		t.Errorf("%d intents stored, want 1", len(all))
	}
	if code, _, _ := f.post(t, "/v1/intents", agentToken, "application/json", `{"tool":"nope","input":{}}`); code != 404 {
		t.Errorf("the server refuses what follows: %d", code)
	}
}
