package audit_test

import (
	"encoding/hex"
	"strconv"
	"testing"
)

// TestVerifier_Reasons pins the whole reason each kind of tampering is
// reported with: the event it names, the events and keys it counts, and
// the hashes it contrasts (abbreviated to 12 hex digits).
func TestVerifier_Reasons(t *testing.T) {
	const n = 40
	sizes := []int{1, 3, 2, 4} // groups start at 1, 2, 5, 7, 11, 12, 15, 17, ...
	orig := chain(events(n))
	short := func(h string) string { return h[:12] + "…" }
	cases := []struct {
		name   string
		tamper func(es []entry) []kv // returns the stored log; nil: store(es)
		seq    uint64
		reason string
	}{
		{"prevHash byte", func(es []entry) []kv { es[8].PrevHash = flipHex(es[8].PrevHash); return nil }, 9,
			"its prevHash " + short(flipHex(orig[8].PrevHash)) + " is not the hash " + short(orig[7].Hash) + " of event 8: the chain is broken"},
		{"hash byte", func(es []entry) []kv { es[8].Hash = flipHex(es[8].Hash); return nil }, 9,
			"its hash " + short(flipHex(orig[8].Hash)) + " is not the hash of its content (" + short(orig[8].Hash) + "): the event was altered"},
		{"seq edited up", func(es []entry) []kv { es[14].Seq = 99; return nil }, 15,
			"missing: the next stored event is numbered 99 (events deleted or reordered)"},
		{"seq edited down", func(es []entry) []kv { es[14].Seq = 3; return nil }, 15,
			"out of order: the event stored at position 15 is numbered 3 (events reordered or inserted)"},
		{"seq edited to the previous one", func(es []entry) []kv { es[14].Seq = 14; return nil }, 15,
			"out of order: the event stored at position 15 is numbered 14 (events reordered or inserted)"},
		{"event deleted", func(es []entry) []kv { return store(del(es, 12), 1, 3, 2, 4) }, 13,
			"missing: the next stored event is numbered 14 (events deleted or reordered)"},
		{"event deleted, later ones renumbered", func(es []entry) []kv {
			es = del(es, 12)
			for i := 12; i < len(es); i++ {
				es[i].Seq--
			}
			return store(es, 1, 3, 2, 4)
		}, 12, "replaced, or events deleted after it: event 13 was recorded after an event with hash " + short(orig[12].Hash) +
			", not after this one (" + short(orig[11].Hash) + ")"},
		{"event repeated later", func(es []entry) []kv { return store(insert(es, 13, es[4]), 1, 3, 2, 5) }, 14,
			"out of order: the event stored at position 14 is numbered 5 (events reordered or inserted)"},
		{"event inserted", func(es []entry) []kv { return store(insert(es, 12, forged(es, 12)), 1, 3, 2, 5) }, 13,
			"inserted: the events stored at positions 13 and 14 are both numbered 13 and both follow event 12; one of them was inserted"},
		{"event inserted, later ones renumbered", func(es []entry) []kv {
			es = insert(es, 12, forged(es, 12))
			for i := 13; i < len(es); i++ {
				es[i].Seq++
			}
			return store(es, 1, 3, 2, 5)
		}, 13, "inserted: event 14 was recorded right after event 12 (its prevHash is event 12's hash)"},
		{"event inserted first", func(es []entry) []kv { return store(insert(es, 0, forged(es, 0)), 2, 3, 2, 4) }, 1,
			"inserted: the events stored at positions 1 and 2 are both numbered 1 and both the log's first event; one of them was inserted"},
		{"event inserted second", func(es []entry) []kv { return store(insert(es, 1, forged(es, 1)), 2, 3, 2, 4) }, 2,
			"inserted: the events stored at positions 2 and 3 are both numbered 2 and both follow event 1; one of them was inserted"},
		{"event inserted first, later ones renumbered", func(es []entry) []kv {
			es = insert(es, 0, forged(es, 0))
			for i := 1; i < len(es); i++ {
				es[i].Seq++
			}
			return store(es, 2, 3, 2, 4)
		}, 1, "inserted: event 2 was recorded as the log's first event (its prevHash is empty)"},
		{"group key edited", func(es []entry) []kv { s := store(es, sizes...); s[3].k = key(8); return s }, 7,
			"its group is stored under key 8: keys were altered"},
		{"unexpected key", func(es []entry) []kv { s := store(es, sizes...); s[3].k = []byte("x"); return s }, 7,
			"unexpected key 78 in the log: keys are 8-byte seqs"},
		{"empty group", func(es []entry) []kv {
			s := store(es, sizes...)
			return append(s[:3:3], append([]kv{{key(7), []byte("[]")}}, s[3:]...)...)
		}, 7, "the stored group under key 7 holds no event"},
		{"group not an array", func(es []entry) []kv { s := store(es, sizes...); s[2].v[0] = '{'; return s }, 5,
			"the stored group under key 5 is not a JSON array: its bytes were altered"},
		{"empty value", func(es []entry) []kv { s := store(es, sizes...); s[2].v = nil; return s }, 5,
			"the stored group under key 5 is not a JSON array: its bytes were altered"},
		{"bytes after a group", func(es []entry) []kv { s := store(es, sizes...); s[2].v = append(s[2].v, ' '); return s }, 6,
			"the stored group of events 5 to 6 is malformed after event 6: its bytes were altered"},
		{"head missing", func(es []entry) []kv { s := store(es, sizes...); return s[:len(s)-1] }, n,
			"the log's head is missing: it should record event 40"},
		{"head short", func(es []entry) []kv { s := store(es, sizes...); s[len(s)-1].v = s[len(s)-1].v[:39]; return s }, n,
			"the log's head is 39 bytes, not 40: it was altered"},
		{"head hash", func(es []entry) []kv { s := store(es, sizes...); flip(s[len(s)-1].v, 20); return s }, n,
			"the log's head hash " + short(flipHex12(orig[n-1].Hash)) + " is not event 40's hash: the head or the event was altered"},
		{"tail deleted, head kept", func(es []entry) []kv {
			s := store(es, sizes...)
			return append(s[:len(s)-3:len(s)-3], s[len(s)-1])
		}, 35, "missing: the log's head records 40 events, the log holds 34 (the tail was deleted)"},
		{"events appended, head kept", func(es []entry) []kv {
			s := store(es[:30], sizes...)
			return append(s[:len(s)-1], store(es[30:], 100)[0], s[len(s)-1])
		}, 31, "the log's head records 30 events, the log holds 40: events from 31 were added behind the store's back"},
		{"key after the head", func(es []entry) []kv { return append(store(es, sizes...), kv{[]byte{0xff, 0}, []byte("[]")}) }, n + 1,
			"unexpected key ff00 stored after the log's head"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			es := chain(events(n))
			log := tc.tamper(es)
			if log == nil {
				log = store(es, sizes...)
			}
			_, err := verify(nil, log)
			wantBad(t, err, tc.seq, tc.reason)
			if want := "audit: event " + strconv.FormatUint(tc.seq, 10) + ": " + tc.reason; err.Error() != want {
				t.Fatalf("got  %s\nwant %s", err, want)
			}
		})
	}
	_, err := verify(checkpointOf(orig, 30), store(orig[:25], 3))
	wantBad(t, err, 26, "missing: the checkpoint covers 30 events, the log holds 25 (the log was truncated)")
}

// flipHex12 is hash h (hex) with the low bit of its byte 12 flipped.
func flipHex12(h string) string {
	b, _ := hex.DecodeString(h)
	b[12] ^= 0x01
	return hex.EncodeToString(b)
}
