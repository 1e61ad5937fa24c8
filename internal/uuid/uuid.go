// Package uuid makes random (version 4) and time-ordered (version 7) UUIDs
// in their canonical lowercase form, and checks the version 4 form.
package uuid

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// New returns a random UUID (RFC 9562 version 4), lowercase with hyphens.
func New() string {
	var b [16]byte
	rand.Read(b[:]) // never returns an error; it crashes the program on an unrecoverable RNG failure
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return format(b)
}

func format(b [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// Valid reports whether s is a version 4 UUID in canonical lowercase form.
func Valid(s string) bool {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' || s[14] != '4' {
		return false
	}
	if c := s[19]; c != '8' && c != '9' && c != 'a' && c != 'b' {
		return false
	}
	for i := 0; i < 36; i++ {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			continue
		}
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Ordered returns a UUID version 7 (RFC 9562): a millisecond timestamp, a
// 12-bit counter and 62 random bits. Successive calls in a process return
// strictly increasing values, so the strings sort in creation order and
// keys built from them are appended at the end of a B+tree.
func (g *Generator) Ordered() string {
	g.mu.Lock()
	ms := uint64(time.Now().UnixMilli())
	if ms > g.ms {
		g.ms, g.seq = ms, 0
	} else if g.seq++; g.seq > 0xfff { // more than 4096 in one millisecond: borrow the next one
		g.ms, g.seq = g.ms+1, 0
	}
	ms, seq := g.ms, g.seq
	g.mu.Unlock()

	var b [16]byte
	rand.Read(b[8:])
	b[0], b[1], b[2], b[3], b[4], b[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	b[6] = 0x70 | byte(seq>>8)
	b[7] = byte(seq)
	b[8] = b[8]&0x3f | 0x80
	return format(b)
}

// Generator hands out ordered UUIDs; its zero value is ready to use.
type Generator struct {
	mu  sync.Mutex
	ms  uint64
	seq uint64
}
