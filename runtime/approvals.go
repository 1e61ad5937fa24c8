package runtime

import (
	"errors"
	"fmt"
	"slices"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
)

// Signed approvals: see Options.ApprovalKey and
// capability.Policy.ApprovalKeys.

// approverKeys are a policy's approval keys, parsed: approver (or "*", any
// approver) to the keys whose signatures make its approvals count. Empty:
// approvals need no signature.
type approverKeys map[string][]*audit.VerifierKey

// approvalKeys parses the approval keys a policy lists.
func approvalKeys(p *capability.Policy) (approverKeys, error) {
	if p == nil {
		return nil, nil
	}
	raw := p.ApprovalKeys()
	if len(raw) == 0 {
		return nil, nil
	}
	out := make(approverKeys, len(raw))
	for approver, ks := range raw {
		for _, s := range ks {
			k, err := audit.ParseVerifierKey(s)
			if err != nil {
				return nil, fmt.Errorf("%w: the policy's approval key %q for %q: %s", capability.ErrPolicy, s, approver, Message(err))
			}
			out[approver] = append(out[approver], k)
		}
	}
	return out, nil
}

// listed reports whether key is listed for approver, or for any approver
// ("*").
func (a approverKeys) listed(key *audit.VerifierKey, approver string) bool {
	same := func(k *audit.VerifierKey) bool { return k.Equal(key) }
	return slices.ContainsFunc(a[approver], same) || slices.ContainsFunc(a["*"], same)
}

// canSign refuses, before anything is recorded, an approval this runtime
// could not sign with a key the policy lists for its approver: it would
// never run.
func (r *Runtime) canSign(id, approver string) *IntentError {
	if len(r.approvers) == 0 {
		return nil
	}
	if r.opts.ApprovalKey == nil {
		return &IntentError{Code: "intent_unsigned", IntentID: id,
			Reason: fmt.Sprintf("the policy requires approvals signed by a key it lists for %s, and no approval key is set here (toolgate: --approval-key FILE or $TOOLGATE_APPROVAL_KEY); nothing was recorded", approver)}
	}
	if k := r.opts.ApprovalKey.Verifier(); !r.approvers.listed(k, approver) {
		return &IntentError{Code: "intent_unsigned", IntentID: id,
			Reason: fmt.Sprintf("the approval key %s is not listed for %s in the policy's approvalKeys; nothing was recorded", k, approver)}
	}
	return nil
}

// trusted says why the decision event of an approved intent does not
// prove its approver, or "" when it does (or no keys are listed). A
// rejection needs no signature: forging one stops a run, never starts
// one.
func (a approverKeys) trusted(decision *audit.Event) string {
	if len(a) == 0 || decision.Intent.Action != audit.IntentApproved {
		return ""
	}
	key, err := audit.VerifyDecision(decision)
	switch {
	case errors.Is(err, audit.ErrUnsigned):
		return fmt.Sprintf("its approval by %s is not signed, and the policy requires approvals signed by a key it lists: it was approved without a signature (before the policy listed approval keys, or by someone without a listed key), or forged", decision.UserID)
	case err != nil:
		return "its approval's signature does not verify (" + Message(err) + ")"
	case !a.listed(key, decision.UserID):
		return fmt.Sprintf("its approval by %s is signed by key %s, which the policy does not list for %s", decision.UserID, key, decision.UserID)
	}
	return ""
}
