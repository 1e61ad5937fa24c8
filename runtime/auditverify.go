package runtime

import (
	"context"
	"errors"

	"github.com/toolgate/toolgate/audit"
)

// VerifyAuditLog passes the whole stored audit log, as stored, to v (in
// one read of the store) and finishes it: nil when the log is valid (and
// extends v.Checkpoint, if set), a *audit.VerifyError naming the first bad
// event, or a *StateError when the log cannot be read. It is what
// `toolgate audit verify` checks.
func (r *Reader) VerifyAuditLog(ctx context.Context, v *audit.Verifier) error {
	if err := r.store.AuditRaw(ctx, v.Add); err != nil {
		var ve *audit.VerifyError
		if errors.As(err, &ve) {
			return err
		}
		return &StateError{Op: "read", Err: err}
	}
	return v.Finish()
}
