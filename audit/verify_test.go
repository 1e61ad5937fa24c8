package audit_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/txn"
)

// entry is a stored entry, as txn.AuditEntry.
type entry struct {
	Seq      uint64
	PrevHash string
	Hash     string
	Event    []byte
}

// chain numbers and links events, as the store does.
func chain(events [][]byte) []entry {
	var link [32]byte
	out := make([]entry, len(events))
	for i, ev := range events {
		e := entry{Seq: uint64(i + 1), Event: ev}
		if i > 0 {
			e.PrevHash = hex.EncodeToString(link[:])
		}
		link = audit.ChainHash(link, ev)
		e.Hash = hex.EncodeToString(link[:])
		out[i] = e
	}
	return out
}

// relink recomputes the seqs and hashes of entries from index i on, as a
// forger rewriting the log consistently would.
func relink(entries []entry, i int) {
	var link [32]byte
	if i > 0 {
		h, _ := hex.DecodeString(entries[i-1].Hash)
		copy(link[:], h)
	}
	for j := i; j < len(entries); j++ {
		entries[j].Seq = uint64(j + 1)
		entries[j].PrevHash = ""
		if j > 0 {
			entries[j].PrevHash = hex.EncodeToString(link[:])
		}
		link = audit.ChainHash(link, entries[j].Event)
		entries[j].Hash = hex.EncodeToString(link[:])
	}
}

type kv struct{ k, v []byte }

// group encodes entries as the store writes one group.
func group(entries []entry) []byte {
	b := []byte{'['}
	for i, e := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"seq":%d,"prevHash":"%s","hash":"%s","event":%s}`, e.Seq, e.PrevHash, e.Hash, e.Event)
	}
	return append(b, ']')
}

func key(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

func head(entries []entry) kv {
	last := entries[len(entries)-1]
	h, _ := hex.DecodeString(last.Hash)
	return kv{[]byte{0xff}, append(key(last.Seq), h...)}
}

// store lays entries out as the store does, in groups of the given sizes
// (repeated), with the head.
func store(entries []entry, sizes ...int) []kv {
	var out []kv
	for i, s := 0, 0; i < len(entries); s++ {
		n := min(sizes[s%len(sizes)], len(entries)-i)
		out = append(out, kv{key(entries[i].Seq), group(entries[i : i+n])})
		i += n
	}
	if len(entries) > 0 {
		out = append(out, head(entries))
	}
	return out
}

func events(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		e := audit.Event{EventID: fmt.Sprintf("ev-%d", i+1), Timestamp: 1700000000000 + int64(i), ToolID: "test.echo",
			ToolVersion: "1.0.0", ExecutionID: fmt.Sprintf("ex-%d", i/4), CallID: "c", Attempt: 1, State: "EXECUTING", InputHash: "ab"}
		out[i] = e.AppendJSON(nil)
	}
	return out
}

func verify(cp *audit.Checkpoint, log []kv) (*audit.Verifier, error) {
	v := &audit.Verifier{Checkpoint: cp}
	for _, x := range log {
		if err := v.Add(x.k, x.v); err != nil {
			return v, err
		}
	}
	return v, v.Finish()
}

// wantBad asserts that err is a *VerifyError at seq whose reason mentions
// why.
func wantBad(t *testing.T, err error, seq uint64, why string) {
	t.Helper()
	var ve *audit.VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v, want a VerifyError at event %d", err, seq)
	}
	if ve.Seq != seq || !strings.Contains(ve.Reason, why) {
		t.Fatalf("VerifyError at event %d: %s\nwant event %d, reason mentioning %q", ve.Seq, ve.Reason, seq, why)
	}
	if !strings.Contains(err.Error(), "event "+strconv.FormatUint(seq, 10)+":") {
		t.Fatalf("Error() = %q", err.Error())
	}
}

func TestVerifier_Valid(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 100} {
		entries := chain(events(n))
		for _, sizes := range [][]int{{1}, {3}, {1, 4, 2}, {1000}} {
			v, err := verify(nil, store(entries, sizes...))
			if err != nil {
				t.Fatalf("%d events in groups %v: %v", n, sizes, err)
			}
			if v.Len() != uint64(n) {
				t.Fatalf("Len() = %d, want %d", v.Len(), n)
			}
			if want := [32]byte{}; n > 0 {
				h, _ := hex.DecodeString(entries[n-1].Hash)
				copy(want[:], h)
				if v.Hash() != want {
					t.Fatalf("Hash() = %x, want %x", v.Hash(), want)
				}
			} else if v.Hash() != want {
				t.Fatalf("Hash() of an empty log = %x", v.Hash())
			}
		}
	}
}

// Every kind of tampering is caught at the first bad event.
func TestVerifier_Tampered(t *testing.T) {
	const n = 40
	sizes := []int{1, 3, 2, 4} // groups start at 1, 2, 5, 7, 11, 12, 15, 17, ...
	cases := []struct {
		name   string
		tamper func(es []entry) []kv // returns the stored log; nil: store(es)
		seq    uint64
		why    string
	}{
		{"event byte, first event", func(es []entry) []kv { flip(es[0].Event, 30); return nil }, 1, "altered"},
		{"event byte, mid-group", func(es []entry) []kv { flip(es[12].Event, 40); return nil }, 13, "altered"},
		{"event byte, last event", func(es []entry) []kv { flip(es[n-1].Event, len(es[n-1].Event)-3); return nil }, n, "altered"},
		{"event made invalid JSON", func(es []entry) []kv { es[20].Event[0] = 'x'; return nil }, 21, "does not decode"},
		{"event byte, first of a later group", func(es []entry) []kv { flip(es[10].Event, 50); return nil }, 11, "altered"},
		{"prevHash byte", func(es []entry) []kv { es[8].PrevHash = flipHex(es[8].PrevHash); return nil }, 9, "chain is broken"},
		// A second event numbered 1 that names the zero link as its
		// predecessor is out of order, not a copy of the first event.
		{"second event numbered 1 after the empty link", func(es []entry) []kv {
			es[1].Seq, es[1].PrevHash = 1, strings.Repeat("0", 64)
			return nil
		}, 2, "out of order"},
		// Before event 1 the chain's link is 32 zero bytes, but no event
		// has that hash: event 2 naming it follows nothing that was stored.
		{"second event follows the empty link", func(es []entry) []kv {
			es[1].PrevHash = strings.Repeat("0", 64)
			return nil
		}, 2, "chain is broken"},
		// The first event says it follows another, and its hash agrees: the
		// events before it were cut off. There is no event 0 to blame: the
		// first event breaks the chain.
		{"first event follows a cut-off one", func(es []entry) []kv {
			var cut [32]byte
			cut[0] = 7
			es[0].PrevHash = hex.EncodeToString(cut[:])
			h := audit.ChainHash(cut, es[0].Event)
			es[0].Hash = hex.EncodeToString(h[:])
			relink(es, 1)
			return nil
		}, 1, "chain is broken"},
		{"hash byte", func(es []entry) []kv { es[8].Hash = flipHex(es[8].Hash); return nil }, 9, "altered"},
		{"hash in upper case", func(es []entry) []kv { es[8].Hash = strings.ToUpper(es[8].Hash); return nil }, 9, "altered"},
		{"key in another case", func(es []entry) []kv {
			s := store(es, sizes...)
			s[3].v = bytes.Replace(s[3].v, []byte(`"event":`), []byte(`"Event":`), 1)
			return s
		}, 7, "not the form the store writes"},
		{"event with a space added", func(es []entry) []kv {
			es[5].Event = bytes.Replace(es[5].Event, []byte(`,"toolId"`), []byte(`, "toolId"`), 1)
			return nil
		}, 6, "altered"},
		{"seq edited", func(es []entry) []kv { es[14].Seq = 99; return nil }, 15, "numbered 99"},
		{"event deleted from its group", func(es []entry) []kv { return store(del(es, 12), 1, 3, 2, 4) }, 13, "missing"},
		{"event deleted, later ones renumbered", func(es []entry) []kv {
			es = del(es, 12)
			for i := 12; i < len(es); i++ {
				es[i].Seq--
			}
			return store(es, 1, 3, 2, 4)
		}, 12, "events deleted after it"},
		{"group deleted", func(es []entry) []kv { s := store(es, sizes...); return append(s[:3:3], s[4:]...) }, 7, "missing"},
		{"two events swapped", func(es []entry) []kv { es[3], es[30] = es[30], es[3]; return store(es, sizes...) }, 4, "numbered 31"},
		{"two neighbours swapped", func(es []entry) []kv { es[12], es[13] = es[13], es[12]; return store(es, sizes...) }, 13, "numbered 14"},
		{"two events' contents swapped", func(es []entry) []kv { es[3].Event, es[30].Event = es[30].Event, es[3].Event; return nil }, 4, "altered"},
		{"event inserted", func(es []entry) []kv { return store(insert(es, 12, forged(es, 12)), 1, 3, 2, 5) }, 13, "inserted"},
		{"event inserted, later ones renumbered", func(es []entry) []kv {
			es = insert(es, 12, forged(es, 12))
			for i := 13; i < len(es); i++ {
				es[i].Seq++
			}
			return store(es, 1, 3, 2, 5)
		}, 13, "inserted"},
		{"event inserted first", func(es []entry) []kv { return store(insert(es, 0, forged(es, 0)), 2, 3, 2, 4) }, 1, "inserted"},
		{"event inserted first, later ones renumbered", func(es []entry) []kv {
			es = insert(es, 0, forged(es, 0))
			for i := 1; i < len(es); i++ {
				es[i].Seq++
			}
			return store(es, 2, 3, 2, 4)
		}, 1, "inserted"},
		{"event replaced, its hash recomputed", func(es []entry) []kv {
			es[12].Event = bytes.Replace(es[12].Event, []byte("EXECUTING"), []byte("COMPLETED"), 1)
			relink(es[:13], 12)
			return nil
		}, 13, "replaced"},
		{"group key edited", func(es []entry) []kv { s := store(es, sizes...); s[3].k = key(8); return s }, 7, "keys were altered"},
		{"unexpected key", func(es []entry) []kv { s := store(es, sizes...); s[3].k = []byte("x"); return s }, 7, "unexpected key"},
		{"empty group", func(es []entry) []kv {
			s := store(es, sizes...)
			return append(s[:3:3], append([]kv{{key(7), []byte("[]")}}, s[3:]...)...)
		}, 7, "holds no event"},
		{"bytes after a group", func(es []entry) []kv { s := store(es, sizes...); s[2].v = append(s[2].v, ' '); return s }, 6, "malformed after event 6"},
		{"group not an array", func(es []entry) []kv { s := store(es, sizes...); s[2].v[0] = '{'; return s }, 5, "not a JSON array"},
		{"head missing", func(es []entry) []kv { s := store(es, sizes...); return s[:len(s)-1] }, n, "head is missing"},
		{"head short", func(es []entry) []kv { s := store(es, sizes...); s[len(s)-1].v = s[len(s)-1].v[:39]; return s }, n, "not 40"},
		{"head hash", func(es []entry) []kv { s := store(es, sizes...); flip(s[len(s)-1].v, 20); return s }, n, "head hash"},
		{"tail deleted, head kept", func(es []entry) []kv { s := store(es, sizes...); return append(s[:len(s)-3:len(s)-3], s[len(s)-1]) }, 35, "tail was deleted"},
		{"events appended, head kept", func(es []entry) []kv {
			s := store(es[:30], sizes...)
			return append(s[:len(s)-1], store(es[30:], 100)[0], s[len(s)-1])
		}, 31, "behind the store's back"},
		{"key after the head", func(es []entry) []kv { return append(store(es, sizes...), kv{[]byte{0xff, 0}, []byte("[]")}) }, n + 1, "after the log's head"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			es := chain(events(n))
			log := tc.tamper(es)
			if log == nil {
				log = store(es, sizes...)
			}
			v, err := verify(nil, log)
			wantBad(t, err, tc.seq, tc.why)
			// The error sticks.
			if err2 := v.Add(key(1000), []byte("[]")); err2 != err {
				t.Fatalf("Add after the error = %v", err2)
			}
			if err2 := v.Finish(); err2 != err {
				t.Fatalf("Finish after the error = %v", err2)
			}
		})
	}
}

// A hash that differs from the expected one only after the first 12 hex
// digits is shown in full, beside the expected one: two equal
// abbreviations would say nothing.
func TestVerifier_HashesDifferLate(t *testing.T) {
	const n = 10
	late := func(h string) string { // h with hex digit 40 changed
		b := []byte(h)
		b[40] = '0' + (b[40]-'0'+1)%2
		return string(b)
	}
	cases := []struct {
		name   string
		tamper func(es []entry, cp *audit.Checkpoint) (got, want string) // the hashes the message must show
		seq    uint64
		why    string
	}{
		{"hash", func(es []entry, _ *audit.Checkpoint) (string, string) {
			want := es[4].Hash
			es[4].Hash = late(want)
			return es[4].Hash, want
		}, 5, "not the hash of its content"},
		{"prevHash", func(es []entry, _ *audit.Checkpoint) (string, string) {
			want := es[4].PrevHash
			es[4].PrevHash = late(want)
			return es[4].PrevHash, want
		}, 5, "chain is broken"},
		{"checkpoint", func(es []entry, cp *audit.Checkpoint) (string, string) {
			cp.Hash[20] ^= 0x10 // hex digit 40
			return es[n-1].Hash, hex.EncodeToString(cp.Hash[:])
		}, n, "does not extend the checkpoint"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			es := chain(events(n))
			cp := checkpointOf(es, n)
			got, want := tc.tamper(es, cp)
			if got[:12] != want[:12] || got == want {
				t.Fatalf("bad fixture: %s, %s", got, want)
			}
			_, err := verify(cp, store(es, 3))
			wantBad(t, err, tc.seq, tc.why)
			if !strings.Contains(err.Error(), got) || !strings.Contains(err.Error(), want) {
				t.Fatalf("the message does not show both hashes in full (%s, %s):\n%v", got, want, err)
			}
		})
	}
}

func flip(b []byte, i int) { b[i] ^= 0x01 }

func flipHex(s string) string {
	b := []byte(s)
	if b[10] == '0' {
		b[10] = '1'
	} else {
		b[10] = '0'
	}
	return string(b)
}

func del(es []entry, i int) []entry { return append(es[:i:i], es[i+1:]...) }

func insert(es []entry, i int, e entry) []entry {
	return append(es[:i:i], append([]entry{e}, es[i:]...)...)
}

// forged is an event made to sit at index i, numbered and linked after
// event i-1 as if it belonged there.
func forged(es []entry, i int) entry {
	ev := []byte(`{"eventId":"forged","state":"COMPLETED"}`)
	var link [32]byte
	e := entry{Seq: uint64(i + 1), Event: ev}
	if i > 0 {
		e.PrevHash = es[i-1].Hash
		h, _ := hex.DecodeString(es[i-1].Hash)
		copy(link[:], h)
	}
	next := audit.ChainHash(link, ev)
	e.Hash = hex.EncodeToString(next[:])
	return e
}

func checkpointOf(entries []entry, size int) *audit.Checkpoint {
	c := &audit.Checkpoint{Size: uint64(size)}
	if size > 0 {
		h, _ := hex.DecodeString(entries[size-1].Hash)
		copy(c.Hash[:], h)
	}
	return c
}

// A checkpoint detects what the chain cannot: truncation, and a log
// rewritten from some event on with every later hash recomputed.
func TestVerifier_Checkpoint(t *testing.T) {
	const n = 40
	orig := chain(events(n))
	rewritten := chain(events(n))
	rewritten[19].Event = bytes.Replace(rewritten[19].Event, []byte("EXECUTING"), []byte("COMPLETED"), 1)
	relink(rewritten, 19) // events 20 to 40 rewritten consistently

	for _, size := range []int{0, 1, 19, 20, 39, 40} {
		if _, err := verify(checkpointOf(orig, size), store(orig, 3)); err != nil {
			t.Errorf("the log does not extend its own checkpoint of %d events: %v", size, err)
		}
	}
	// The rewritten log is consistent: only a checkpoint covering event 20
	// tells, at its own size (the chain cannot say which event changed).
	if _, err := verify(nil, store(rewritten, 3)); err != nil {
		t.Fatalf("a consistently rewritten log fails without a checkpoint: %v", err)
	}
	if _, err := verify(checkpointOf(orig, 19), store(rewritten, 3)); err != nil {
		t.Fatalf("a checkpoint before the rewrite: %v", err)
	}
	for _, size := range []int{20, 33, 40} {
		_, err := verify(checkpointOf(orig, size), store(rewritten, 3))
		wantBad(t, err, uint64(size), "does not extend the checkpoint")
	}
	// Truncation: consistent without a checkpoint, caught with one.
	truncated := orig[:25]
	if v, err := verify(nil, store(truncated, 3)); err != nil || v.Len() != 25 {
		t.Fatalf("a truncated log (head rewritten) fails without a checkpoint: %v", err)
	}
	_, err := verify(checkpointOf(orig, 30), store(truncated, 3))
	wantBad(t, err, 26, "truncated")
	_, err = verify(checkpointOf(orig, 30), nil)
	wantBad(t, err, 1, "truncated")
}

// The verifier reads the log as package txn stores it, group-committed
// writes included.
func TestVerifier_TxnStore(t *testing.T) {
	ctx := context.Background()
	s, err := txn.Open(filepath.Join(t.TempDir(), "toolgate.db"), &txn.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs := events(4)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			rec := &txn.Record{ExecutionID: fmt.Sprintf("ex-%d", i), CallID: "c", Attempt: 1, ToolID: "t", ToolVersion: "1.0.0",
				State: "DENIED", StartedAt: time.Unix(1, 0), EndedAt: time.Unix(2, 0),
				Transitions: []txn.Transition{{From: "DECLARED", To: "DENIED", Event: "deny", At: time.Unix(2, 0)}}}
			var batch []txn.AuditEvent
			for j := range i%4 + 1 {
				batch = append(batch, txn.AuditEvent{Data: evs[j]})
			}
			batch = append(batch, txn.AuditEvent{Data: []byte(`{"nested":{"a":[1,2.5,"<&>\u2028"]},"s":"é"}`)})
			if err := s.Put(ctx, rec, batch...); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	log, err := s.AuditLog(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	v := &audit.Verifier{}
	if err := s.AuditRaw(ctx, v.Add); err != nil {
		t.Fatal(err)
	}
	if err := v.Finish(); err != nil {
		t.Fatal(err)
	}
	last := log[len(log)-1]
	if v.Len() != last.Seq || hex.EncodeToString(hashSlice(v.Hash())) != last.Hash {
		t.Fatalf("verified %d events, head %x; the log has %d, head %s", v.Len(), v.Hash(), last.Seq, last.Hash)
	}
}

func hashSlice(h [32]byte) []byte { return h[:] }
