package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	tgruntime "github.com/toolgate/toolgate/runtime"
)

// A call that a Cedar @approval policy sends to a person is denied saying
// which policy asks for the approval and, when the policy names approver
// groups, whose members may give it; a policy that names none says no
// group.
func TestCedar_ApprovalDenialSaysWhoMayApprove(t *testing.T) {
	rt := openShop(t)
	ctx := context.Background()
	for _, c := range []struct{ tool, input, says string }{
		{"shop.refund", `{"amount": 250}`, "shop.refund@1.0.0 requires an approved intent (Cedar policy refund-over-100, approved by a member of finance): propose it"},
		{"git.push", `{"branch": "main"}`, "git.push@1.0.0 requires an approved intent (Cedar policy push-main): propose it"},
	} {
		res, err := rt.Execute(ctx, invoke(c.tool, c.input))
		var ae *tgruntime.AuthorizationError
		if res == nil || res.State != "DENIED" || err == nil {
			t.Fatalf("%s: %+v, %v", c.tool, res, err)
		}
		if !errors.As(err, &ae) || !strings.Contains(ae.Reason, c.says) {
			t.Errorf("%s: %v; want the reason to say %q", c.tool, err, c.says)
		}
	}
}
