package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"

	"github.com/toolgate/toolgate/audit"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// intentIndex finds the newest intent a principal proposed for a call (its
// hash) without listing every intent on each call of a tool that requires
// approval; runtime.IntentFilter has no field for the hash or the
// proposer. It is built once, at the first lookup, from runtime.Intents,
// and then kept current from the audit log: every proposal, by any front
// end or any node sharing the store, appends an audit event (intent.action
// "proposed", with the intent's id and hash, and the proposer as userId),
// and the index reads the log on from where it stopped. A lookup costs the
// events appended since the previous one, not the intents stored.
type intentIndex struct {
	mu    sync.Mutex
	built bool
	next  uint64            // the first audit sequence number not read
	ids   map[string]string // proposer "\x00" hash -> the newest intent id
}

// auditPage is how many audit entries a lookup reads at a time.
const auditPage = 512

// lookup returns the id of the newest intent proposer proposed with hash,
// or "".
func (x *intentIndex) lookup(ctx context.Context, rt *tgruntime.Runtime, proposer, hash string) (string, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.built {
		if err := x.build(ctx, rt); err != nil {
			return "", err
		}
	}
	if err := x.follow(ctx, rt); err != nil {
		return "", err
	}
	return x.ids[proposer+"\x00"+hash], nil
}

// build finds the end of the audit log, then reads every intent: a
// proposal appended meanwhile is in both, which is harmless, and one
// appended after is read by follow.
func (x *intentIndex) build(ctx context.Context, rt *tgruntime.Runtime) error {
	head, err := auditHead(ctx, rt)
	if err != nil {
		return err
	}
	all, err := rt.Intents(ctx, tgruntime.IntentFilter{})
	if err != nil {
		return err
	}
	x.ids = make(map[string]string, len(all))
	for _, in := range all { // oldest proposal first: the newest stays
		x.ids[in.Proposer+"\x00"+in.Hash] = in.ID
	}
	x.next, x.built = head+1, true
	return nil
}

// auditHead returns the sequence number of the last audit entry (0 when
// there is none) with about 2·log2(n) reads of one entry, rather than
// reading the log.
func auditHead(ctx context.Context, rt *tgruntime.Runtime) (uint64, error) {
	has := func(seq uint64) (bool, error) {
		es, err := rt.AuditLog(ctx, seq, 1)
		return len(es) > 0, err
	}
	lo, hi := uint64(0), uint64(1) // an entry at lo (or lo is 0); none at or after hi
	for {
		ok, err := has(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi, hi*2
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := has(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// follow reads the audit log from x.next to its end, indexing proposals.
func (x *intentIndex) follow(ctx context.Context, rt *tgruntime.Runtime) error {
	for {
		es, err := rt.AuditLog(ctx, x.next, auditPage)
		if err != nil {
			return err
		}
		for _, e := range es {
			x.next = e.Seq + 1
			if !bytes.Contains(e.Event, []byte(`"intent"`)) {
				continue // most events: an execution's
			}
			var ev struct {
				UserID string              `json:"userId"`
				Intent *audit.IntentAction `json:"intent"`
			}
			if json.Unmarshal(e.Event, &ev) == nil && ev.Intent != nil && ev.Intent.Action == audit.IntentProposed {
				x.ids[ev.UserID+"\x00"+ev.Intent.Hash] = ev.Intent.ID
			}
		}
		if len(es) < auditPage {
			return nil
		}
	}
}
