package audit

// A whitebox test of the room the streaming encoder makes ahead of time:
// the estimates (extent), the growth (grow), and what an object open at
// the top level and the sorting of its members reserve. None of it changes
// the canonical text; it bounds the allocations that Hash promises.

import (
	"bytes"
	"crypto/sha256"
	"hash"
	"strings"
	"testing"
)

func TestExtent(t *testing.T) {
	cases := []struct {
		data         string
		pos          int
		size, commas int
	}{
		{`{}`, 1, 1, 0},
		{`{"a":1}`, 1, 6, 0},
		{`{"a":1,"b":[1,2],"c":{"d":1,"e":2}}`, 1, 34, 2},
		// Commas, brackets and escaped quotes inside strings do not count.
		{`{"a,}":"x\"},{[","b":"\\"}`, 1, 25, 1},
		{`{"\"":",","\\":"]"}`, 1, 18, 1},
		// Only the object itself, not what follows it.
		{`{"a":1} [1,2]`, 1, 6, 0},
		{`[{"a":1,"b":2},{"c":3}]`, 2, 12, 1},
		{`{"a":[{"b":1},{"c":2}],"d":[[],[3]]}`, 1, 35, 1},
		// An object that does not close extends to the end of the input.
		{`{"a":1,"b`, 1, 8, 1},
		{`{"a":1,"b":"\`, 1, 12, 1},
		{`{"a":[1,2,`, 1, 9, 0},
	}
	for _, tc := range cases {
		if size, commas := extent([]byte(tc.data), tc.pos); size != tc.size || commas != tc.commas {
			t.Errorf("extent(%s, %d) = %d, %d; want %d, %d", tc.data, tc.pos, size, commas, tc.size, tc.commas)
		}
	}
}

func TestGrow(t *testing.T) {
	s := make([]byte, 2, 10)
	if g := grow(s, 8); &g[:cap(g)][0] != &s[:cap(s)][0] || len(g) != 2 || cap(g) != 10 {
		t.Errorf("grow with room for 8 more: a new slice (len %d, cap %d)", len(g), cap(g))
	}
	s[0], s[1] = 'a', 'b'
	// Too little room: at least double, and at least what is asked.
	if g := grow(s, 9); string(g) != "ab" || cap(g) != 20 {
		t.Errorf("grow(len 2 cap 10, 9) = %q, cap %d; want \"ab\", cap 20", g, cap(g))
	}
	if g := grow(s, 30); string(g) != "ab" || cap(g) != 32 {
		t.Errorf("grow(len 2 cap 10, 30) = %q, cap %d; want \"ab\", cap 32", g, cap(g))
	}
	if g := grow([]member(nil), 3); len(g) != 0 || cap(g) != 3 {
		t.Errorf("grow(nil, 3): len %d, cap %d", len(g), cap(g))
	}
}

// TestEncoder_Reserves: an object open at the top level makes room for its
// canonical text (no longer than its input) and the checkpoints' margin,
// and for as many members as it can hold (one more than its commas, at
// most one for every 5 bytes); sorting reserves the object's text once.
func TestEncoder_Reserves(t *testing.T) {
	run := func(in string) *encoder {
		e := &encoder{parser: parser{data: []byte(in)}}
		e.run()
		return e
	}
	in := `{"c":1,"b":2,"a":3}`
	e := run(in)
	if want := `{"a":3,"b":2,"c":1}`; string(e.out) != want {
		t.Fatalf("out = %s, want %s", e.out, want)
	}
	if least := len(in) + 128; cap(e.out) < least {
		t.Errorf("cap(out) = %d, want at least %d", cap(e.out), least)
	}
	if cap(e.members) != 3 {
		t.Errorf("cap(members) = %d, want 3 (its members)", cap(e.members))
	}
	if want := len(`"c":1,"b":2,"a":3`); cap(e.scratch) != want {
		t.Errorf("cap(scratch) = %d, want %d (the object's text)", cap(e.scratch), want)
	}

	// Commas without members do not reserve more than the size allows.
	in = `{"a":1` + strings.Repeat(",", 100) + `}`
	if e := run(in); cap(e.members) != (len(in)-1)/5+1 {
		t.Errorf("%s: cap(members) = %d, want %d", in, cap(e.members), (len(in)-1)/5+1)
	}

}

// TestHash_ReusesRoom: the room made for sorting an object and for its
// members serves the objects after it: hashing 100 objects allocates no
// more than hashing one.
func TestHash_ReusesRoom(t *testing.T) {
	one := []byte(`[{"b":1,"a":2}]`)
	many := []byte("[" + strings.Repeat(`{"b":1,"a":2},`, 99) + `{"b":1,"a":2}]`)
	a1 := testing.AllocsPerRun(20, func() { Hash(one) })
	a100 := testing.AllocsPerRun(20, func() { Hash(many) })
	if a100 > a1 {
		t.Errorf("Hash allocates %v times for 100 objects, %v for one", a100, a1)
	}
}

// writeLog is a hash that records the length of each write.
type writeLog struct {
	hash.Hash
	writes []int
}

func (w *writeLog) Write(p []byte) (int, error) {
	w.writes = append(w.writes, len(p))
	return w.Hash.Write(p)
}

// TestEncoder_FlushesAtFlushAt: with a sink, the canonical text goes to it
// as soon as flushAt bytes of it wait and no object is open, in writes of
// at least flushAt bytes (the last one excepted), and nothing is lost.
func TestEncoder_FlushesAtFlushAt(t *testing.T) {
	// "[" and the quote, then a run that fills out to flushAt exactly.
	in := `["` + strings.Repeat("a", flushAt-2) + `","` + strings.Repeat("b", 3*flushAt) + `",` +
		`{"z":"` + strings.Repeat("c", 2*flushAt) + `","a":1},1]`
	sink := &writeLog{Hash: sha256.New()}
	e := encoder{parser: parser{data: []byte(in)}, sink: sink}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	sink.Write(e.out)
	want, err := Canonicalize([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if got, w := sink.Sum(nil), sha256.Sum256(want); !bytes.Equal(got, w[:]) {
		t.Fatalf("the sink hashed something else than the canonical form")
	}
	if len(sink.writes) < 3 || sink.writes[0] != flushAt {
		t.Fatalf("writes %v: want the first of exactly %d bytes, then more", sink.writes, flushAt)
	}
	total := 0
	for i, n := range sink.writes {
		total += n
		if i < len(sink.writes)-1 && n < flushAt {
			t.Errorf("write %d of %v is %d bytes, less than %d", i, sink.writes, n, flushAt)
		}
	}
	if total != len(want) {
		t.Errorf("%d bytes written, the canonical form has %d", total, len(want))
	}
}
