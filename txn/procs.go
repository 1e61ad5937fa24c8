package txn

import (
	"context"
	"fmt"
	"slices"
)

// SetProcesses stores ps as the running processes of the execution, in its
// claim: recovery, after a crash, kills those still alive before it
// records the attempt as interrupted (Record.Processes). The runtime calls
// it when a tool starts a process and again when the process has ended.
// It fails with ErrTxDone once the Tx has ended, and with ErrNotFound if
// the claim is gone (swept by another node).
func (t *Tx) SetProcesses(ctx context.Context, ps []Process) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return ErrTxDone
	}
	if t.unclaimed {
		return fmt.Errorf("txn: record the processes of execution %q: %w: it was begun without a claim", t.id, ErrNotFound)
	}
	ps = slices.Clone(ps)
	set := func(data []byte) ([]byte, error) {
		rec, err := decodeRecord(t.id, data)
		if err != nil {
			return nil, err
		}
		rec.Processes = ps
		return encodeRecord(rec)
	}
	err := t.store.ready(ctx)
	if err == nil {
		err = t.store.be.SetClaim(ctx, t.id, set)
	}
	if err != nil {
		return fmt.Errorf("txn: record the processes of execution %q: %w", t.id, err)
	}
	return nil
}
