package driver_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/txn/driver"
)

func event(data string) driver.Event {
	return driver.Event{Data: []byte(data), Sum: sha256.Sum256([]byte(data))}
}

// link is the chain's next hash: SHA-256(previous hash || SHA-256(event)).
func link(prev [32]byte, data string) [32]byte {
	sum := sha256.Sum256([]byte(data))
	return sha256.Sum256(append(prev[:], sum[:]...))
}

// AppendAuditGroup writes the entries every backend stores: a JSON array
// of {seq, prevHash, hash, event}, numbered on from seq, each hash linking
// the previous one (the first entry of the log having no prevHash), and
// returns the last seq and hash; AuditGroupSize is never less than the
// group's length, whatever its seqs (it sizes the buffer the group is
// written into).
func TestAppendAuditGroup(t *testing.T) {
	type entry struct {
		Seq      uint64          `json:"seq"`
		PrevHash string          `json:"prevHash"`
		Hash     string          `json:"hash"`
		Event    json.RawMessage `json:"event"`
	}
	datas := []string{`{"a":1}`, `"two"`, `[3,{"b":"\u2028"}]`}
	var seed [32]byte
	copy(seed[:], bytes.Repeat([]byte{0xab}, 32))
	for _, start := range []struct {
		seq  uint64
		link [32]byte
	}{{0, [32]byte{}}, {1, seed}, {41, seed}, {math.MaxUint64 - 10, seed}} {
		for n := 1; n <= len(datas); n++ {
			var evs []driver.Event
			for _, d := range datas[:n] {
				evs = append(evs, event(d))
			}
			prefix := []byte("kept")
			out, seq, last := driver.AppendAuditGroup(bytes.Clone(prefix), start.seq, start.link, evs)
			if !bytes.HasPrefix(out, prefix) {
				t.Fatalf("the group did not go after dst: %q", out)
			}
			group := out[len(prefix):]
			if size := driver.AuditGroupSize(evs); size < len(group) {
				t.Errorf("from seq %d, %d events: AuditGroupSize %d < the group's %d bytes", start.seq, n, size, len(group))
			}
			var got []entry
			if err := json.Unmarshal(group, &got); err != nil {
				t.Fatalf("the group is not a JSON array of entries: %v: %s", err, group)
			}
			if len(got) != n {
				t.Fatalf("%d entries, want %d: %s", len(got), n, group)
			}
			prev := start.link
			for i, e := range got {
				want := start.seq + uint64(i) + 1
				wantPrev := hex.EncodeToString(prev[:])
				if want == 1 {
					wantPrev = ""
				}
				prev = link(prev, datas[i])
				if e.Seq != want || e.PrevHash != wantPrev || e.Hash != hex.EncodeToString(prev[:]) || string(e.Event) != datas[i] {
					t.Fatalf("entry %d from seq %d = %+v; want seq %d, prevHash %q, hash %x, event %s", i, start.seq, e, want, wantPrev, prev, datas[i])
				}
			}
			if seq != start.seq+uint64(n) || last != prev {
				t.Errorf("returned seq %d and hash %x; want %d and %x", seq, last, start.seq+uint64(n), prev)
			}
		}
	}
	if out, seq, last := driver.AppendAuditGroup(nil, 7, seed, nil); string(out) != "[]" || seq != 7 || last != seed {
		t.Errorf("no events: %q, %d, %x", out, seq, last)
	}
}

// A stored head is 40 bytes: the big-endian seq, then the hash; any other
// length is ErrCorrupt.
func TestParseAuditHead(t *testing.T) {
	head := binary.BigEndian.AppendUint64(nil, 300)
	head = append(head, bytes.Repeat([]byte{7}, 32)...)
	seq, l, err := driver.ParseAuditHead(head)
	if err != nil || seq != 300 || l != [32]byte(bytes.Repeat([]byte{7}, 32)) {
		t.Fatalf("ParseAuditHead = %d, %x, %v", seq, l, err)
	}
	for _, n := range []int{0, 39, 41} {
		b := make([]byte, n)
		if _, _, err := driver.ParseAuditHead(b); !errors.Is(err, driver.ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("%d bytes", n)) {
			t.Errorf("a head of %d bytes: %v; want ErrCorrupt saying its length", n, err)
		}
	}
}

// The next group may be written only after every stored one: a log with
// entries and no head, or whose last group starts past the head's seq, is
// ErrCorrupt.
func TestCheckAuditTail(t *testing.T) {
	for _, tc := range []struct {
		hasHead   bool
		seq, last uint64
		ok        bool
	}{
		{false, 0, 0, true}, // an empty log
		{true, 0, 0, true},
		{true, 9, 0, true},
		{false, 0, 1, false}, // entries, no head
		{true, 10, 10, true}, // the last group is the head's entry
		{true, 10, 7, true},
		{true, 10, 11, false}, // a group after the head's seq
		{true, 0, 1, false},
	} {
		err := driver.CheckAuditTail(tc.hasHead, tc.seq, tc.last)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, driver.ErrCorrupt) {
			t.Errorf("CheckAuditTail(%v, %d, %d) = %v; want ok %v", tc.hasHead, tc.seq, tc.last, err, tc.ok)
		}
	}
}

// Timestamps reads the least and greatest "timestamp" of a group from its
// bytes: negative ones and every digit included, the key at the very start
// or end of the bytes; a group with none, or with one that is not an
// integer, gives the widest range.
func TestTimestamps(t *testing.T) {
	const lo, hi = math.MinInt64, math.MaxInt64
	for _, tc := range []struct {
		group    string
		min, max int64
	}{
		{`[{"event":{"timestamp":1000}}]`, 1000, 1000},
		{`"timestamp":9`, 9, 9},
		{`"timestamp":1234567890`, 1234567890, 1234567890},
		{`"timestamp":-5,"x":{"timestamp":70,"y":"timestamp"},"timestamp":0}`, -5, 70},
		{`[{"timestamp":300},{"timestamp":200},{"timestamp":100}]`, 100, 300},
		{`[{"timestamp":100},{"timestamp":300},{"timestamp":200}]`, 100, 300},
		{`{"msg":"\"timestamp\":1","timestamp":42}`, 42, 42}, // inside a string: escaped
		{`[]`, lo, hi},
		{`{"timestamp":"soon"}`, lo, hi},
		{`{"timestamp":5},{"timestamp":x}`, lo, hi},
		{`{"timestamp":9223372036854775807}`, hi, hi},
		{`{"timestamp":99999999999999999999}`, lo, hi}, // out of range
	} {
		min, max := driver.Timestamps([]byte(tc.group))
		if min != tc.min || max != tc.max {
			t.Errorf("Timestamps(%s) = %d, %d; want %d, %d", tc.group, min, max, tc.min, tc.max)
		}
	}
}

// AuditGroupSize grows with each event's bytes.
func TestAuditGroupSize(t *testing.T) {
	small, big := driver.AuditGroupSize([]driver.Event{event(`1`)}), driver.AuditGroupSize([]driver.Event{event(`1000000`)})
	if big-small != 6 {
		t.Errorf("six bytes more of event: %d more of group size", big-small)
	}
	if two := driver.AuditGroupSize([]driver.Event{event(`1`), event(`1`)}); two <= small {
		t.Errorf("two events: %d, one: %d", two, small)
	}
	if none := driver.AuditGroupSize(nil); none != 2 {
		t.Errorf("no events: %d; want 2 (the brackets)", none)
	}
}

// A Postgres database without toolgate's schema, opened read-only, is an
// error that is ErrNoSchema, ErrIncompatible and fs.ErrNotExist, and names
// the database.
func TestNoSchemaError(t *testing.T) {
	err := error(&driver.NoSchemaError{Shown: "postgres://db"})
	for _, target := range []error{driver.ErrNoSchema, driver.ErrIncompatible, fs.ErrNotExist} {
		if !errors.Is(err, target) {
			t.Errorf("NoSchemaError is not %v", target)
		}
	}
	if errors.Is(err, driver.ErrCorrupt) {
		t.Error("NoSchemaError is ErrCorrupt")
	}
	if !strings.Contains(err.Error(), "postgres://db: no toolgate schema") {
		t.Errorf("message %q does not name the database", err)
	}
}
