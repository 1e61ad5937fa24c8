package txn

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketAudit = []byte("audit")
	// keyAuditHead holds the 8-byte last seq and the 32-byte last link. It
	// lives in the audit bucket and sorts after every 8-byte entry key, so
	// it shares the last leaf page with the newest entries.
	keyAuditHead = []byte{0xff}
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

// auditEvent is an event ready to append: its bytes, checked, and their
// SHA-256, computed before the write is queued so the serialized commit
// only links them.
type auditEvent struct {
	data []byte
	sum  [32]byte
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

// appendAudit appends events to the chain inside the caller's update. The
// events of one update (every write of a group commit's batch, in order) are
// stored under one key (the sequence number of the first, big-endian) as a
// JSON array of entries: one bbolt put per update rather than per event or
// per write, which matters because every put materializes the path to the
// tree's last leaf, and many small values leave pages part empty.
//
// The group is encoded into a pooled buffer that the committer returns to
// the pool once the update has ended (see Store.used).
func (s *Store) appendAudit(tx *bolt.Tx, events []auditEvent) error {
	if len(events) == 0 {
		return nil
	}
	log := tx.Bucket(bucketAudit)
	log.FillPercent = 1.0 // append-only: split full pages, not half-full ones
	var seq uint64
	var link [32]byte
	head := log.Get(keyAuditHead)
	if head != nil {
		if len(head) != 40 {
			return fmt.Errorf("%w: audit head is %d bytes", ErrCorrupt, len(head))
		}
		seq = binary.BigEndian.Uint64(head)
		copy(link[:], head[8:])
	}
	if !s.auditTailChecked {
		// Once per Store: while it is open, its exclusive lock keeps every
		// other writer away, so the tail cannot change behind its back.
		if err := checkAuditTail(log, head != nil, seq); err != nil {
			return err
		}
		s.auditTailChecked = true
	}
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], seq+1)
	buf := getBuf(auditGroupSize(events))
	s.used = append(s.used, buf)
	value, seq, link := appendAuditGroup(*buf, seq, link, events)
	*buf = value
	if err := log.Put(key[:], value); err != nil {
		return fmt.Errorf("txn: append audit events from %d: %w", binary.BigEndian.Uint64(key[:]), err)
	}
	var next [40]byte
	binary.BigEndian.PutUint64(next[:], seq)
	copy(next[8:], link[:])
	return log.Put(keyAuditHead, next[:])
}

// auditGroupSize is about the size of the group appendAuditGroup encodes.
func auditGroupSize(events []auditEvent) int {
	size := 2
	for _, ev := range events {
		size += len(ev.data) + len(`{"seq":,"prevHash":"","hash":"","event":},`) + 20 + 2*64
	}
	return size
}

// appendAuditGroup appends to dst the group of events linked after the
// entry seq whose hash is link: the JSON form of []AuditEntry, written by
// hand, as every backend stores it; it returns it with the last seq and
// hash. It runs inside the serialized commit: each event was checked and
// hashed by prepareAudit before its write was queued.
func appendAuditGroup(dst []byte, seq uint64, link [32]byte, events []auditEvent) ([]byte, uint64, [32]byte) {
	value := append(dst, '[')
	for i, ev := range events {
		if i > 0 {
			value = append(value, ',')
		}
		value = append(value, `{"seq":`...)
		seq++
		value = strconv.AppendUint(value, seq, 10)
		value = append(value, `,"prevHash":"`...)
		if seq > 1 {
			value = hex.AppendEncode(value, link[:])
		}
		var buf [64]byte
		copy(buf[:32], link[:])
		copy(buf[32:], ev.sum[:])
		link = sha256.Sum256(buf[:])
		value = append(value, `","hash":"`...)
		value = hex.AppendEncode(value, link[:])
		value = append(value, `","event":`...)
		value = append(value, ev.data...)
		value = append(value, '}')
	}
	return append(value, ']'), seq, link
}

// checkAuditTail makes sure the next group, under key seq+1, goes after
// every stored one: a head that was deleted, or set back, must not make the
// store write over entries (and so erase the evidence that the log was
// tampered with). It refuses such a log with ErrCorrupt.
func checkAuditTail(log *bolt.Bucket, hasHead bool, seq uint64) error {
	c := log.Cursor()
	k, _ := c.Last()
	if k != nil && bytes.Equal(k, keyAuditHead) {
		k, _ = c.Prev()
	}
	switch {
	case k == nil:
		return nil
	case !hasHead:
		return fmt.Errorf("%w: the audit log holds entries but its head is missing; it was tampered with (toolgate audit verify)", ErrCorrupt)
	case len(k) != 8:
		return fmt.Errorf("%w: unexpected key %x in the audit log (toolgate audit verify)", ErrCorrupt, k)
	case binary.BigEndian.Uint64(k) > seq:
		return fmt.Errorf("%w: the audit log's head records %d entries but a group starts at entry %d; it was tampered with (toolgate audit verify)", ErrCorrupt, seq, binary.BigEndian.Uint64(k))
	}
	return nil
}

// prepareAudit refuses events that are not one valid JSON value (unless
// marked Checked), before their write is queued, and hashes them.
func prepareAudit(events []AuditEvent) ([]auditEvent, error) {
	if len(events) == 0 {
		return nil, nil
	}
	out := make([]auditEvent, len(events))
	for i, ev := range events {
		if len(ev.Data) == 0 || !ev.Checked && !json.Valid(ev.Data) {
			return nil, fmt.Errorf("%w: audit event %d is not valid JSON", ErrInvalidRecord, i)
		}
		// Stored bytes are hashed as they are; whitespace around the value
		// would not survive a decode and re-encode, so refuse it.
		if n := len(ev.Data); isSpace(ev.Data[0]) || isSpace(ev.Data[n-1]) {
			return nil, fmt.Errorf("%w: audit event %d has whitespace around its JSON value", ErrInvalidRecord, i)
		}
		out[i] = auditEvent{data: ev.Data, sum: sha256.Sum256(ev.Data)}
	}
	return out, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// AuditLog returns up to limit entries (limit <= 0: all) from seq from on.
func (s *Store) AuditLog(ctx context.Context, from uint64, limit int) ([]AuditEntry, error) {
	var out []AuditEntry
	if s.be != nil {
		err := s.be.auditGroups(ctx, from, nil, func(seq uint64, v []byte) (bool, error) {
			var group []AuditEntry
			if err := json.Unmarshal(v, &group); err != nil {
				return false, fmt.Errorf("%w: audit entries at %d: %v", ErrCorrupt, seq, err)
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
	err := s.view(ctx, func(tx *bolt.Tx) error {
		log := tx.Bucket(bucketAudit)
		if log == nil {
			return nil
		}
		c := log.Cursor()
		// The group holding from starts at or before it.
		k, v := c.Seek(binary.BigEndian.AppendUint64(nil, from))
		if k == nil || len(k) != 8 || binary.BigEndian.Uint64(k) > from {
			if pk, pv := c.Prev(); pk != nil {
				k, v = pk, pv
			} else {
				k, v = c.First()
			}
		}
		for ; k != nil; k, v = c.Next() {
			if len(k) != 8 {
				continue // the head
			}
			var group []AuditEntry
			if err := json.Unmarshal(v, &group); err != nil {
				return fmt.Errorf("%w: audit entries at %d: %v", ErrCorrupt, binary.BigEndian.Uint64(k), err)
			}
			for _, e := range group {
				if e.Seq < from {
					continue
				}
				if limit > 0 && len(out) == limit {
					return nil
				}
				out = append(out, e)
			}
		}
		return nil
	})
	return out, err
}
