package boltstore

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// The journal never copies a full buffer whole: bbolt points into the
// bytes of earlier groups until the checkpoint, so when a change does not
// fit, only the group's entry so far moves, to a buffer with room for it
// to double; the buffer it leaves is never written again. Every change is
// written in place, after the room its reserve made, and a group that
// grows moves a number of times logarithmic in its size.
func TestJournal_MovesOnlyTheGroupAndDoubles(t *testing.T) {
	defer func(c int) { journalChunk = c }(journalChunk)
	journalChunk = 256
	rng := rand.New(rand.NewPCG(3, 4))
	var j journal
	var left, held [][]byte // every buffer given up, and a copy of the bytes it held then
	for group := range 300 {
		size, moves := 0, 0
		n := 1 + rng.IntN(40)
		if group%50 == 0 {
			n = 2000 // a group far larger than a buffer
		}
		for range n {
			ns := bytes.Repeat([]byte{'n'}, rng.IntN(20))
			key := bytes.Repeat([]byte{'k'}, 1+rng.IntN(60))
			val := bytes.Repeat([]byte{'v'}, rng.IntN(300))
			before, start := j.buf, j.start
			k, v := j.log(walPut, walState, ns, key, val)
			if !bytes.Equal(k, key) || !bytes.Equal(v, val) {
				t.Fatalf("group %d: the change logged as %q=%q", group, k, v)
			}
			grew := len(j.buf) - (len(before) - start) - j.start
			size += grew
			if cap(before) > 0 && &before[:1][0] != &j.buf[:1][0] {
				moves++
				left, held = append(left, before), append(held, bytes.Clone(before))
				if j.start != 0 || len(j.buf) != size {
					t.Fatalf("group %d: the buffer moved with %d bytes before the group's %d (start %d): earlier groups were copied", group, len(j.buf)-size, size, j.start)
				}
				if cap(j.buf) < 2*size {
					t.Fatalf("group %d: moved to a buffer of %d bytes for an entry of %d: no room to double", group, cap(j.buf), size)
				}
			}
		}
		if limit := 2 + bitsLen(size/journalChunk); moves > limit {
			t.Fatalf("group %d of %d bytes moved %d times; at most %d", group, size, moves, limit)
		}
		j.entry()
	}
	for i, b := range left {
		if !bytes.Equal(b, held[i]) {
			t.Fatalf("buffer %d was written after it was given up", i)
		}
	}
	if len(left) < 20 {
		t.Fatalf("only %d buffers given up: the test did not exercise moving", len(left))
	}
}

func bitsLen(n int) int {
	b := 0
	for ; n > 0; n >>= 1 {
		b++
	}
	return b
}
