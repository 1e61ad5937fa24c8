package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	tgruntime "github.com/toolgate/toolgate/runtime"
)

// A decision says what was decided, by whom, how (via, and the name of the
// key that signed it: the part of the signer before its "+"), and, for a
// rejection only, why.
func TestIntentDecision_String(t *testing.T) {
	for _, tc := range []struct {
		d    tgruntime.IntentDecision
		want string
	}{
		{tgruntime.IntentDecision{Approved: true, By: "alice"}, "approved by alice"},
		{tgruntime.IntentDecision{By: "bob", Reason: "not now"}, "rejected by bob: not now"},
		{tgruntime.IntentDecision{Approved: true, By: "alice", Reason: "fine", Via: "elicitation"}, "approved by alice via elicitation"},
		{tgruntime.IntentDecision{Approved: true, By: "alice", Via: "elicitation", Signer: "alice+AAAA"}, "approved by alice via elicitation, signed with key alice"},
		{tgruntime.IntentDecision{By: "bob", Reason: "no", Signer: "ops+BBBB"}, "rejected by bob, signed with key ops: no"},
		{tgruntime.IntentDecision{Approved: true, By: "alice", Signer: "no-plus"}, "approved by alice"},
	} {
		if got := tc.d.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.d, got, tc.want)
		}
	}
}

// Propose refuses an empty input and one over MaxInputBytes with a
// ValidationError, storing nothing; an input of exactly MaxInputBytes is
// proposed.
func TestPropose_InputBounds(t *testing.T) {
	const input = `{"msg":"exactly"}`
	rt, _ := openRuntime(t, &tgruntime.Options{MaxInputBytes: len(input)}, echo("test.echo"))
	ctx := context.Background()
	for _, bad := range []string{"", `{"msg":"exactly!"}`} {
		in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(bad), Principal: "agent"})
		var ve *tgruntime.ValidationError
		if in != nil || !errors.As(err, &ve) || ve.Phase != "input" {
			t.Fatalf("propose %q: %+v, %v; want an input ValidationError", bad, in, err)
		}
	}
	if all, err := rt.Intents(ctx, tgruntime.IntentFilter{}); err != nil || len(all) != 0 {
		t.Fatalf("refused proposals stored intents: %v, %v", all, err)
	}
	in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(input), Principal: "agent"})
	if err != nil || in.Status != tgruntime.IntentPending || string(in.Input) != input {
		t.Fatalf("an input of MaxInputBytes: %+v, %v", in, err)
	}
}
