package txn

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestRecordEncoding_TokenAndProcesses: a record with a Token or Processes
// (the tag 0x02 form, whose fields follow EndedAt) reads back as written,
// and every proper prefix of it, and it with a byte more, is refused: a
// record cut inside its last process, where only varints and strings are
// left to read, is not taken for one whose last fields are empty.
func TestRecordEncoding_TokenAndProcesses(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	base := func() *Record {
		return &Record{ExecutionID: "0190f3a2-7c4e-7b21-9d3e-5a6b7c8d9e0f", ToolID: "t", State: "EXECUTING", Attempt: 1, StartedAt: at}
	}
	tok := &TokenRef{Issuer: "https://issuer", Subject: "sub", SHA256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}
	procs := []Process{
		{Pid: 4242, StartTime: 123456789, Session: -3, BootID: "boot", Host: "h", Cgroup: "/cg", Command: "sleep"},
		{Pid: 7, StartTime: 1, BootID: "boot"}, // its last fields empty
	}
	withToken := base()
	withToken.Token = tok
	withProcs := base()
	withProcs.Processes = procs
	both := base()
	both.Token, both.Processes = tok, procs[1:]
	for name, r := range map[string]*Record{"token": withToken, "processes": withProcs, "both": both} {
		data, err := appendRecord(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		if data[0] != recordTagMore {
			t.Errorf("%s: tag %#x, want %#x", name, data[0], recordTagMore)
		}
		got, err := parseRecord(data)
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("%s: read back as %+v, %v; want %+v", name, got, err, r)
		}
		for n := range len(data) {
			if r, err := parseRecord(data[:n]); err == nil {
				t.Fatalf("%s: cut to %d of %d bytes, accepted as %+v", name, n, len(data), r)
			}
		}
		if _, err := parseRecord(append(data, 0)); err == nil {
			t.Fatalf("%s: a byte more accepted", name)
		}
	}
	plain, err := appendRecord(nil, base())
	if err != nil || plain[0] != recordTag {
		t.Fatalf("a record without either: tag %#x, %v; want %#x", plain[0], err, recordTag)
	}
}

// TestParseRecord_HugeCounts: a count of transitions or processes that the
// bytes left cannot hold, up to the largest uvarint, is a malformed record,
// never an allocation of that size (or a panic).
func TestParseRecord_HugeCounts(t *testing.T) {
	head := appendStr([]byte{recordTagMore}, "x") // ExecutionID
	for range 2 {
		head = appendStr(head, "") // CallID, TraceID
	}
	head = binary.AppendVarint(head, 1) // Attempt
	for range 4 {
		head = appendStr(head, "s") // ToolID, ToolVersion, Principal, State
	}
	for _, n := range []uint64{math.MaxUint64, math.MaxUint64 - 1, 1 << 40} {
		data := binary.AppendUvarint(bytes.Clone(head), n)
		if _, err := parseRecord(append(data, make([]byte, 64)...)); err == nil || !strings.Contains(err.Error(), "transitions") {
			t.Errorf("%d transitions: %v; want a malformed record", n, err)
		}
	}
	r := &Record{ExecutionID: "x", ToolID: "t", State: "S", Token: &TokenRef{}}
	data, err := appendRecord(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	// The record ends with the processes' flag (0): say 1, then a count.
	data = data[:len(data)-1]
	for _, n := range []uint64{math.MaxUint64, 1 << 40, 0} {
		d := binary.AppendUvarint(append(bytes.Clone(data), 1), n)
		if _, err := parseRecord(append(d, make([]byte, 8)...)); err == nil || !strings.Contains(err.Error(), "processes") {
			t.Errorf("%d processes: %v; want a malformed record", n, err)
		}
	}
}

// TestParseRecord_CutNamesTheField: a record cut short is malformed, and
// the error names the field the bytes ran out in: inside the attempt's
// varint, or right after a count of no transitions (the capabilities that
// follow are what is missing, not a transition).
func TestParseRecord_CutNamesTheField(t *testing.T) {
	head := appendStr([]byte{recordTagMore}, "x") // ExecutionID
	for range 2 {
		head = appendStr(head, "") // CallID, TraceID
	}
	attempt := binary.AppendVarint(nil, 300) // two bytes
	withAttempt := append(bytes.Clone(head), attempt...)
	for range 4 {
		withAttempt = appendStr(withAttempt, "s") // ToolID, ToolVersion, Principal, State
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"before the attempt", head, "malformed attempt"},
		{"inside the attempt", append(bytes.Clone(head), attempt[0]), "malformed attempt"},
		{"after no transitions", binary.AppendUvarint(bytes.Clone(withAttempt), 1), "malformed capabilities"},
	} {
		if _, err := parseRecord(tc.b); err == nil || err.Error() != tc.want {
			t.Errorf("cut %s: %v; want %q", tc.name, err, tc.want)
		}
	}
}
