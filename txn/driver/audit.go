package driver

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
)

// AuditHeadKey is the key under which AuditRaw passes the head of the
// audit log: the 8-byte big-endian seq and the 32-byte hash of the last
// entry.
const AuditHeadKey = "\xff"

// AuditGroupSize is about the size of the group AppendAuditGroup encodes.
func AuditGroupSize(events []Event) int {
	size := 2
	for _, ev := range events {
		size += len(ev.Data) + len(`{"seq":,"prevHash":"","hash":"","event":},`) + 20 + 2*64
	}
	return size
}

// AppendAuditGroup appends to dst the group of events linked after the
// entry seq whose hash is link: the JSON form of the entries (seq,
// prevHash, hash, event), written by hand, as every backend stores it; it
// returns it with the last seq and hash. Each entry's hash is
// SHA-256(previous hash || SHA-256(event)), the first one's previous hash
// being 32 zero bytes. It runs inside the serialized commit: each event
// was checked and hashed before its write was queued.
func AppendAuditGroup(dst []byte, seq uint64, link [32]byte, events []Event) ([]byte, uint64, [32]byte) {
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
		copy(buf[32:], ev.Sum[:])
		link = sha256.Sum256(buf[:])
		value = append(value, `","hash":"`...)
		value = hex.AppendEncode(value, link[:])
		value = append(value, `","event":`...)
		value = append(value, ev.Data...)
		value = append(value, '}')
	}
	return append(value, ']'), seq, link
}

// ParseAuditHead reads a stored head (the 8-byte big-endian seq and the
// 32-byte hash of the last entry).
func ParseAuditHead(head []byte) (seq uint64, link [32]byte, err error) {
	if len(head) != 40 {
		return 0, link, fmt.Errorf("%w: audit head is %d bytes", ErrCorrupt, len(head))
	}
	copy(link[:], head[8:])
	return binary.BigEndian.Uint64(head), link, nil
}

// CheckAuditTail makes sure the next group, under seq+1, goes after every
// stored one, where last is the first seq of the last stored group (0:
// none) and hasHead says whether a head is stored: a head that was
// deleted, or set back, must not make the store write over entries (and
// so erase the evidence that the log was tampered with). It refuses such a
// log with ErrCorrupt.
func CheckAuditTail(hasHead bool, seq, last uint64) error {
	switch {
	case last == 0:
		return nil
	case !hasHead:
		return fmt.Errorf("%w: the audit log holds entries but its head is missing; it was tampered with (toolgate audit verify)", ErrCorrupt)
	case last > seq:
		return fmt.Errorf("%w: the audit log's head records %d entries but a group starts at entry %d; it was tampered with (toolgate audit verify)", ErrCorrupt, seq, last)
	}
	return nil
}

// Timestamps returns the least and the greatest "timestamp" of the events
// in a stored group, read from its bytes without decoding them: the
// pattern cannot occur inside a JSON string, whose quotes are escaped. A
// group without one (damaged) gives the widest range, so that it never
// ends or narrows a search.
func Timestamps(group []byte) (min, max int64) {
	const key = `"timestamp":`
	min, max = 1<<63-1, -1<<63
	found := false
	for {
		i := bytes.Index(group, []byte(key))
		if i < 0 {
			break
		}
		group = group[i+len(key):]
		j := 0
		for j < len(group) && (group[j] == '-' || group[j] >= '0' && group[j] <= '9') {
			j++
		}
		ts, err := strconv.ParseInt(string(group[:j]), 10, 64)
		if err != nil {
			return -1 << 63, 1<<63 - 1
		}
		found = true
		if ts < min {
			min = ts
		}
		if ts > max {
			max = ts
		}
	}
	if !found {
		return -1 << 63, 1<<63 - 1
	}
	return min, max
}
