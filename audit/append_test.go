package audit_test

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/toolgate/toolgate/audit"
)

// AppendJSON and MarshalJSON decode to the same event, over random events
// with awkward strings.
func TestEvent_AppendJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pieces := []string{"", "a", "é", "\"", "\\", "\n", "\x00", "\x1f", "\u2028", "\xff", "<&>", "😀"}
	str := func() string {
		s := ""
		for range rng.IntN(5) {
			s += pieces[rng.IntN(len(pieces))]
		}
		return s
	}
	for i := range 2000 {
		e := audit.Event{
			EventID: str(), Timestamp: rng.Int64N(1 << 50), ToolID: str(), ToolVersion: str(), ExecutionID: str(),
			CallID: str(), Attempt: rng.IntN(9), State: str(), UserID: str(), InputHash: str(), OutputHash: str(),
		}
		if rng.IntN(2) == 0 {
			e.Seq, e.PrevHash = rng.Uint64N(1<<53), str()
		}
		if rng.IntN(2) == 0 {
			e.Capabilities = []string{str(), str()}
		}
		if rng.IntN(2) == 0 {
			d := rng.Int64N(1e6)
			e.Duration = &d
		}
		if rng.IntN(2) == 0 {
			e.Error = &audit.ErrorDetails{Type: str(), Code: str(), Message: str()}
		}
		if rng.IntN(2) == 0 {
			e.Decision = &audit.Decision{ID: str(), PolicyRevision: str(), Reason: str()}
			for _, l := range []*[]string{&e.Decision.Required, &e.Decision.Granted, &e.Decision.Missing} {
				if rng.IntN(3) > 0 {
					*l = []string{str(), str()}[:rng.IntN(3)]
				}
			}
			if rng.IntN(2) == 0 {
				e.Decision.Cedar = &audit.CedarDecision{Revision: str(), Effect: str(),
					Policies: []string{str(), str()}[:rng.IntN(3)], Approvers: []string{str()}[:rng.IntN(2)]}
			}
		}
		if rng.IntN(2) == 0 {
			e.IdempotencyKey, e.IdempotencyBypass = str(), rng.IntN(2) == 0
		}
		if rng.IntN(2) == 0 {
			e.IntentID = str()
		}
		if rng.IntN(2) == 0 {
			e.Intent = &audit.IntentAction{ID: str(), Hash: str(), Action: str(), Code: str(), Reason: str(), Via: str(), Signer: str(), Signature: str()}
		}
		if rng.IntN(2) == 0 {
			e.Token = &audit.Token{Issuer: str(), Subject: str(), SHA256: str()}
		}
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		got := e.AppendJSON(nil)
		var a, b map[string]any
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("event %d: AppendJSON wrote invalid JSON: %v\n%s", i, err, got)
		}
		json.Unmarshal(want, &b)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("event %d differs:\n got %s\nwant %s", i, got, want)
		}
	}
}
