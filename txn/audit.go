package txn

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketAudit  = []byte("audit")
	keyAuditHead = []byte("audit_head") // in meta: 8-byte last seq + 32-byte last link
)

// AuditEvent is an audit event to append in the same update as the write it
// accompanies, so the state change and its evidence are all or nothing.
// Data is the event as stored (JSON); the store does not interpret it.
type AuditEvent struct {
	Data []byte
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

// appendAudit appends events to the chain inside the caller's update.
func appendAudit(tx *bolt.Tx, events []AuditEvent) error {
	if len(events) == 0 {
		return nil
	}
	meta, log := tx.Bucket(bucketMeta), tx.Bucket(bucketAudit)
	var seq uint64
	var link [32]byte
	if head := meta.Get(keyAuditHead); head != nil {
		if len(head) != 40 {
			return fmt.Errorf("%w: audit head is %d bytes", ErrCorrupt, len(head))
		}
		seq = binary.BigEndian.Uint64(head)
		copy(link[:], head[8:])
	}
	for _, ev := range events {
		if !json.Valid(ev.Data) {
			return fmt.Errorf("%w: audit event is not valid JSON", ErrInvalidRecord)
		}
		prev := ""
		if seq > 0 {
			prev = hex.EncodeToString(link[:])
		}
		seq++
		sum := sha256.Sum256(ev.Data)
		link = sha256.Sum256(append(link[:], sum[:]...))
		entry, err := json.Marshal(AuditEntry{Seq: seq, PrevHash: prev, Hash: hex.EncodeToString(link[:]), Event: ev.Data})
		if err != nil {
			return err
		}
		if err := log.Put(binary.BigEndian.AppendUint64(nil, seq), entry); err != nil {
			return fmt.Errorf("txn: append audit event %d: %w", seq, err)
		}
	}
	head := binary.BigEndian.AppendUint64(make([]byte, 0, 40), seq)
	return meta.Put(keyAuditHead, append(head, link[:]...))
}

// AuditLog returns up to limit entries (limit <= 0: all) from seq from on.
func (s *Store) AuditLog(ctx context.Context, from uint64, limit int) ([]AuditEntry, error) {
	var out []AuditEntry
	err := s.view(ctx, func(tx *bolt.Tx) error {
		log := tx.Bucket(bucketAudit)
		if log == nil {
			return nil
		}
		c := log.Cursor()
		for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, from)); k != nil; k, v = c.Next() {
			if limit > 0 && len(out) == limit {
				break
			}
			var e AuditEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("%w: audit entry %x: %v", ErrCorrupt, k, err)
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}
