// Package uuid makes random (version 4) UUIDs in their canonical lowercase
// form, and checks that form.
package uuid

import (
	"crypto/rand"
	"encoding/hex"
)

// New returns a random UUID (RFC 9562 version 4), lowercase with hyphens.
func New() string {
	var b [16]byte
	rand.Read(b[:]) // never returns an error; it crashes the program on an unrecoverable RNG failure
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
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
