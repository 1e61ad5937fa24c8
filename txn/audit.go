package txn

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/txn/driver"
)

// AuditEvent is an audit event to append in the same update as the write it
// accompanies, so the state change and its evidence are all or nothing.
// Data is the event as stored (JSON); the store does not interpret it.
type AuditEvent struct {
	Data []byte

	// Checked says that Data is known to be one valid JSON value with no
	// whitespace around it, as audit.Event.AppendJSON writes it, so the
	// store skips its own check (encoding/json's Valid, a few percent of an
	// invocation's CPU). Set it only for bytes built by such an encoder:
	// the log's readers decode every stored event.
	Checked bool
}

// AuditEntry is a stored audit event with its place in the chain. Entries
// are numbered from 1 without gaps; each Hash is SHA-256(previous Hash ||
// SHA-256(Event)), the first one's previous Hash being 32 zero bytes, so
// changing, removing or reordering any entry breaks every later link. No
// code path updates or deletes an entry.
type AuditEntry struct {
	Seq      uint64          `json:"seq"`
	PrevHash string          `json:"prevHash"` // hex; "" for the first entry
	Hash     string          `json:"hash"`     // hex
	Event    json.RawMessage `json:"event"`
}

// prepareAudit refuses events that are not one valid JSON value (unless
// marked Checked), before their write is queued, and hashes them.
func prepareAudit(events []AuditEvent) ([]driver.Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	out := make([]driver.Event, len(events))
	for i, ev := range events {
		if len(ev.Data) == 0 || !ev.Checked && !json.Valid(ev.Data) {
			return nil, fmt.Errorf("%w: audit event %d is not valid JSON", ErrInvalidRecord, i)
		}
		// Stored bytes are hashed as they are; whitespace around the value
		// would not survive a decode and re-encode, so refuse it.
		if n := len(ev.Data); isSpace(ev.Data[0]) || isSpace(ev.Data[n-1]) {
			return nil, fmt.Errorf("%w: audit event %d has whitespace around its JSON value", ErrInvalidRecord, i)
		}
		out[i] = driver.Event{Data: ev.Data, Sum: sha256.Sum256(ev.Data)}
	}
	return out, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// AuditLog returns up to limit entries (limit <= 0: all) from seq from on.
func (s *Store) AuditLog(ctx context.Context, from uint64, limit int) ([]AuditEntry, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	var out []AuditEntry
	err := s.be.AuditGroups(ctx, from, func(seq uint64, v []byte) (bool, error) {
		group, err := decodeGroup(seq, v)
		if err != nil {
			return false, err
		}
		for _, e := range group {
			if e.Seq < from {
				continue
			}
			if limit > 0 && len(out) == limit {
				return false, nil
			}
			out = append(out, e)
		}
		return true, nil
	})
	return out, err
}

// decodeGroup decodes a stored group of entries, whose first is seq.
func decodeGroup(seq uint64, v []byte) ([]AuditEntry, error) {
	var group []AuditEntry
	if err := json.Unmarshal(v, &group); err != nil {
		return nil, fmt.Errorf("%w: audit entries at %d: %v", ErrCorrupt, seq, err)
	}
	return group, nil
}
