package audit_test

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolgate/toolgate/audit"
)

func decisionEvent() *audit.Event {
	return &audit.Event{
		EventID: "e1", Timestamp: 1764100000123, ToolID: "file.write", ToolVersion: "1.1.0",
		State: "APPROVED", UserID: "alice", InputHash: "ab",
		Intent: &audit.IntentAction{
			ID: "3f1c4e2a-9b7d-4c1e-8f2a-6d5b4c3a2e1f", Hash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			Action: audit.IntentApproved, Reason: "looks right\nship it", Via: "elicitation",
		},
	}
}

// A signed decision verifies and names its key; a change to any field
// the statement covers, another key's signature, a forged or malformed
// signature do not verify. The signature survives the event's JSON.
func TestDecision_SignVerify(t *testing.T) {
	k, err := audit.GenerateSigningKey(rand.Reader, "approver")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := audit.GenerateSigningKey(rand.Reader, "approver")
	e := decisionEvent()
	if _, err := audit.VerifyDecision(e); !errors.Is(err, audit.ErrUnsigned) {
		t.Fatalf("unsigned: %v, want ErrUnsigned", err)
	}
	if err := k.SignDecision(e); err != nil {
		t.Fatal(err)
	}
	var back audit.Event // through JSON, as stored
	if err := json.Unmarshal(e.AppendJSON(nil), &back); err != nil {
		t.Fatal(err)
	}
	got, err := audit.VerifyDecision(&back)
	if err != nil || !got.Equal(k.Verifier()) || got.Equal(other.Verifier()) {
		t.Fatalf("VerifyDecision = %v, %v; want the signing key", got, err)
	}
	for name, change := range map[string]func(e *audit.Event){
		"id":     func(e *audit.Event) { e.Intent.ID = "4f1c4e2a-9b7d-4c1e-8f2a-6d5b4c3a2e1f" },
		"hash":   func(e *audit.Event) { e.Intent.Hash = "1" + e.Intent.Hash[1:] },
		"action": func(e *audit.Event) { e.Intent.Action = audit.IntentRejected },
		"who":    func(e *audit.Event) { e.UserID = "mallory" },
		"when":   func(e *audit.Event) { e.Timestamp++ },
		"via":    func(e *audit.Event) { e.Intent.Via = "" },
		"reason": func(e *audit.Event) { e.Intent.Reason = "looks right" },
		"signer": func(e *audit.Event) { e.Intent.Signer = other.Verifier().String() },
		"signature": func(e *audit.Event) { // one base64 digit other than it was
			s := []byte(e.Intent.Signature)
			s[10] = map[bool]byte{true: 'B', false: 'A'}[s[10] == 'A']
			e.Intent.Signature = string(s)
		},
		"no signature": func(e *audit.Event) { e.Intent.Signature = "" },
		"not base64":   func(e *audit.Event) { e.Intent.Signature = "!!" },
		"bad signer":   func(e *audit.Event) { e.Intent.Signer = "approver+00000000+AQ==" },
		"a newline":    func(e *audit.Event) { e.UserID = "alice\nbob" },
	} {
		c := back
		in := *back.Intent
		c.Intent = &in
		change(&c)
		if k, err := audit.VerifyDecision(&c); err == nil || !errors.Is(err, audit.ErrDecisionSignature) {
			t.Errorf("%s changed: VerifyDecision = %v, %v; want ErrDecisionSignature", name, k, err)
		}
	}
	// Only decisions are signed.
	p := decisionEvent()
	p.Intent.Action = audit.IntentProposed
	if err := k.SignDecision(p); err == nil {
		t.Error("a proposal was signed")
	}
}
