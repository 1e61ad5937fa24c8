package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
)

// ChainHash returns the hash that links event after the event whose hash
// is prev: SHA-256(prev || SHA-256(event)), over the event's bytes as
// stored. The first event of a log links after 32 zero bytes.
func ChainHash(prev [32]byte, event []byte) [32]byte {
	sum := sha256.Sum256(event)
	var buf [64]byte
	copy(buf[:32], prev[:])
	copy(buf[32:], sum[:])
	return sha256.Sum256(buf[:])
}

// VerifyError reports the first event of a log that fails verification.
type VerifyError struct {
	// Seq is the position of the first bad event, counted from 1 (the seq
	// it should have). An event missing from the end of the log is the
	// first one after the last stored event.
	Seq uint64
	// Reason says what is wrong with it.
	Reason string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("audit: event %d: %s", e.Seq, e.Reason)
}

// headKey is the key of the log's head in the store (txn.AuditHeadKey).
const headKey = "\xff"

// Verifier checks an audit log as toolgate's store keeps it (package txn),
// fed with the store's raw keys and values in key order, so that a log
// whose bytes were altered is still read as far as it goes and the first
// bad event is named precisely:
//
//   - an entry group per update: the key is the 8-byte big-endian seq of
//     its first entry, the value the JSON array of its entries, each
//     {"seq":N,"prevHash":"<hex>","hash":"<hex>","event":{...}} written
//     without spaces ("prevHash" is "" for the first entry);
//   - the head, under the key "\xff": the 8-byte big-endian seq and the
//     32 bytes of the hash of the last entry.
//
// It checks that the entries are numbered from 1 without gaps and in order,
// that each prevHash is the previous entry's hash, that each hash is
// [ChainHash] of the previous one and the event's bytes, that the stored
// bytes are exactly the form the store writes (so no byte of a stored entry
// can change unnoticed), that each group sits under its first entry's seq,
// and that the head records the last entry. With a [Checkpoint], it also
// checks that the log extends it: the entry at the checkpoint's size has
// the checkpoint's hash.
//
// The chain proves the log is internally consistent; only a checkpoint
// kept elsewhere can show that it was not truncated, or rewritten from
// some event on with every later hash recomputed.
//
// The zero Verifier is ready to use, without a checkpoint.
type Verifier struct {
	// Checkpoint, when set before the first Add, is an earlier state of the
	// log that the log must extend.
	Checkpoint *Checkpoint

	n        uint64   // events verified
	link     [32]byte // hash of event n
	back     [32]byte // hash of event n-1
	head     []byte   // the stored head, once seen
	haveHead bool
	err      error
	buf      []byte
}

// Len returns the number of events verified so far.
func (v *Verifier) Len() uint64 { return v.n }

// Hash returns the hash of the last event verified (32 zero bytes if none).
func (v *Verifier) Hash() [32]byte { return v.link }

// Add verifies one stored key and value of the log. Once an error is
// returned (a *VerifyError), every later call returns it too.
func (v *Verifier) Add(key, value []byte) error {
	if v.err == nil {
		v.err = v.add(key, value)
	}
	return v.err
}

// Finish checks the end of the log: the head and the checkpoint's size.
// It returns the first error found, a *VerifyError, or nil when every event
// of the log is valid (and the log extends the checkpoint, if one was set).
func (v *Verifier) Finish() error {
	if v.err == nil {
		v.err = v.finish()
	}
	return v.err
}

func (v *Verifier) fail(seq uint64, format string, args ...any) error {
	return &VerifyError{Seq: seq, Reason: fmt.Sprintf(format, args...)}
}

func (v *Verifier) add(key, value []byte) error {
	if string(key) == headKey {
		v.head, v.haveHead = bytes.Clone(value), true
		return nil
	}
	next := v.n + 1
	if v.haveHead {
		return v.fail(next, "unexpected key %x stored after the log's head", key)
	}
	if len(key) != 8 {
		return v.fail(next, "unexpected key %x in the log: keys are 8-byte seqs", key)
	}
	first := binary.BigEndian.Uint64(key)
	if len(value) == 0 || value[0] != '[' {
		return v.fail(next, "the stored group under key %d is not a JSON array: its bytes were altered", first)
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	if _, err := dec.Token(); err != nil { // '['
		return v.fail(next, "the stored group under key %d does not decode (%v): its bytes were altered", first, err)
	}
	start := 1 // offset of the first entry
	for head := true; dec.More(); head = false {
		var e entry
		if err := dec.Decode(&e); err != nil {
			return v.fail(v.n+1, "the stored entry does not decode (%v): its bytes were altered", err)
		}
		end := int(dec.InputOffset())
		if err := v.entry(&e, value[start:end], head); err != nil {
			return err
		}
		if head && first != e.Seq {
			return v.fail(e.Seq, "its group is stored under key %d: keys were altered", first)
		}
		start = end
	}
	if v.n < next {
		return v.fail(next, "the stored group under key %d holds no event", first)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim(']') || dec.InputOffset() != int64(len(value)) {
		return v.fail(v.n, "the stored group of events %d to %d is malformed after event %d: its bytes were altered", first, v.n, v.n)
	}
	return nil
}

// entry is a stored entry (txn.AuditEntry).
type entry struct {
	Seq      uint64          `json:"seq"`
	PrevHash string          `json:"prevHash"`
	Hash     string          `json:"hash"`
	Event    json.RawMessage `json:"event"`
}

// entry verifies e, the next event, decoded from stored (which begins with
// the separating comma unless first).
func (v *Verifier) entry(e *entry, stored []byte, first bool) error {
	p := v.n + 1 // the position this entry must hold
	if e.Seq != p {
		return v.misplaced(e, p)
	}
	wantPrev := ""
	if p > 1 {
		wantPrev = hex.EncodeToString(v.link[:])
	}
	if e.PrevHash != wantPrev {
		switch prev, ok := decodeHash(e.PrevHash); {
		case p == 2 && e.PrevHash == "":
			return v.fail(1, "inserted: event 2 was recorded as the log's first event (its prevHash is empty)")
		case p > 2 && ok && prev == v.back:
			return v.fail(p-1, "inserted: event %d was recorded right after event %d (its prevHash is event %d's hash)", p, p-2, p-2)
		case p > 1 && ok && hashIs(e.Hash, ChainHash(prev, e.Event)):
			// Event p is consistent with another predecessor.
			got, want := shortPair(e.PrevHash, wantPrev)
			return v.fail(p-1, "replaced, or events deleted after it: event %d was recorded after an event with hash %s, not after this one (%s)", p, got, want)
		}
		got, want := shortPair(e.PrevHash, wantPrev)
		return v.fail(p, "its prevHash %s is not the hash %s of event %d: the chain is broken", got, want, p-1)
	}
	link := ChainHash(v.link, e.Event)
	if want := hex.EncodeToString(link[:]); e.Hash != want {
		have, computed := shortPair(e.Hash, want)
		return v.fail(p, "its hash %s is not the hash of its content (%s): the event was altered", have, computed)
	}
	v.buf = v.buf[:0]
	if !first {
		v.buf = append(v.buf, ',')
	}
	v.buf = appendEntry(v.buf, e)
	if !bytes.Equal(stored, v.buf) {
		return v.fail(p, "its stored bytes are not the form the store writes: they were altered")
	}
	v.back, v.link, v.n = v.link, link, p
	if c := v.Checkpoint; c != nil && c.Size == p && c.Hash != link {
		got, want := shortPair(hex.EncodeToString(link[:]), hex.EncodeToString(c.Hash[:]))
		return v.fail(p, "the log does not extend the checkpoint: event %d's hash is %s, the checkpoint's %s; an event up to %d was altered and every later hash recomputed",
			p, got, want, p)
	}
	return nil
}

// misplaced explains an entry numbered e.Seq found at position p.
func (v *Verifier) misplaced(e *entry, p uint64) error {
	switch {
	case p == 2 && e.Seq == 1 && e.PrevHash == "":
		return v.fail(1, "inserted: the events stored at positions 1 and 2 are both numbered 1 and both the log's first event; one of them was inserted")
	case p > 2 && e.Seq == p-1 && e.PrevHash == hex.EncodeToString(v.back[:]):
		return v.fail(p-1, "inserted: the events stored at positions %d and %d are both numbered %d and both follow event %d; one of them was inserted", p-1, p, p-1, p-2)
	case e.Seq > p:
		return v.fail(p, "missing: the next stored event is numbered %d (events deleted or reordered)", e.Seq)
	}
	return v.fail(p, "out of order: the event stored at position %d is numbered %d (events reordered or inserted)", p, e.Seq)
}

func (v *Verifier) finish() error {
	n := v.n
	switch {
	case !v.haveHead && n == 0:
	case !v.haveHead:
		return v.fail(n, "the log's head is missing: it should record event %d", n)
	case len(v.head) != 40:
		return v.fail(n, "the log's head is %d bytes, not 40: it was altered", len(v.head))
	default:
		seq := binary.BigEndian.Uint64(v.head)
		switch {
		case seq > n:
			return v.fail(n+1, "missing: the log's head records %d events, the log holds %d (the tail was deleted)", seq, n)
		case seq < n:
			return v.fail(seq+1, "the log's head records %d events, the log holds %d: events from %d were added behind the store's back", seq, n, seq+1)
		case !bytes.Equal(v.head[8:], v.link[:]):
			return v.fail(n, "the log's head hash %s is not event %d's hash: the head or the event was altered", short(hex.EncodeToString(v.head[8:])), n)
		}
	}
	if c := v.Checkpoint; c != nil && c.Size > n {
		return v.fail(n+1, "missing: the checkpoint covers %d events, the log holds %d (the log was truncated)", c.Size, n)
	}
	return nil
}

// appendEntry appends e as the store writes it.
func appendEntry(b []byte, e *entry) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"prevHash":"`...)
	b = append(b, e.PrevHash...)
	b = append(b, `","hash":"`...)
	b = append(b, e.Hash...)
	b = append(b, `","event":`...)
	b = append(b, e.Event...)
	return append(b, '}')
}

func decodeHash(s string) ([32]byte, bool) {
	var h [32]byte
	if len(s) != 64 {
		return h, false
	}
	_, err := hex.Decode(h[:], []byte(s))
	return h, err == nil
}

func hashIs(s string, h [32]byte) bool {
	got, ok := decodeHash(s)
	return ok && got == h
}

// short abbreviates a hex hash for a message.
func short(s string) string {
	switch {
	case s == "":
		return `""`
	case len(s) > 12:
		return s[:12] + "…"
	}
	return strconv.Quote(s)
}

// shortPair abbreviates two hashes a message contrasts, unless their
// abbreviations are the same: then it quotes both in full, so that the
// message shows where they differ.
func shortPair(a, b string) (string, string) {
	if sa, sb := short(a), short(b); sa != sb {
		return sa, sb
	}
	return strconv.Quote(a), strconv.Quote(b)
}
