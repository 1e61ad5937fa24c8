package txn

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// randomRecord returns a record with awkward strings, times in several
// zones, and every optional part present or not. With validUTF8, every
// string is valid UTF-8.
func randomRecord(rng *rand.Rand, validUTF8 bool) *Record {
	pieces := []string{"", "a", "é", "\"", "\\", "\n", "\t", "\x00", "\x1f", "\u2028", "\u2029", "<&>", "😀", "/", "\u007f"}
	if !validUTF8 {
		pieces = append(pieces, "\xff", "\xc3")
	}
	// Ids and hashes have compact forms; their near misses must not.
	special := []string{"0190f3a2-7c4e-7b21-9d3e-5a6b7c8d9e0f", "ffffffff-ffff-ffff-ffff-ffffffffffff",
		"0190F3A2-7C4E-7B21-9D3E-5A6B7C8D9E0F", "0190f3a2-7c4e-7b21-9d3e-5a6b7c8d9e0", "0190f3a2x7c4e-7b21-9d3e-5a6b7c8d9e0f",
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "abcd", "ab", "abc", "ABCD", "00", "0000"}
	str := func() string {
		if rng.IntN(4) == 0 {
			return special[rng.IntN(len(special))]
		}
		s := ""
		for range rng.IntN(6) {
			s += pieces[rng.IntN(len(pieces))]
		}
		return s
	}
	tm := func() time.Time {
		if rng.IntN(4) == 0 {
			return time.Time{}
		}
		loc := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+1800), time.FixedZone("y", -7*3600), time.Local}[rng.IntN(4)]
		return time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(loc)
	}
	r := &Record{
		ExecutionID: str() + "id", CallID: str(), TraceID: str(), Attempt: rng.IntN(10), ToolID: str() + "t", ToolVersion: str(),
		Principal: str(), State: str() + "S", StartedAt: tm(), EndedAt: tm(),
		InputHash: str(), OutputHash: str(),
	}
	switch rng.IntN(3) {
	case 0: // nil
	case 1:
		r.Transitions = []Transition{}
	default:
		for range rng.IntN(4) + 1 {
			r.Transitions = append(r.Transitions, Transition{From: str(), To: str(), Event: str(), At: tm(), Reason: str()})
		}
	}
	switch rng.IntN(3) {
	case 0:
		r.Capabilities = []string{str(), str()}
	case 1:
		r.Capabilities = []string{}
	}
	if rng.IntN(2) == 0 {
		r.AuditEvents = []string{str(), str()}
	}
	if rng.IntN(2) == 0 {
		r.Output = json.RawMessage(`{ "a" : [1, 2.5, "x y\n"] , "b":null }`)
	}
	if rng.IntN(2) == 0 {
		r.Error = &ErrorInfo{Type: str(), Code: str(), Message: str(), Stack: str()}
	}
	if rng.IntN(2) == 0 {
		r.WriteSet = &WriteSetSummary{Puts: rng.IntN(5), Deletes: rng.IntN(5), Committed: rng.IntN(2) == 0}
		if rng.IntN(2) == 0 {
			r.WriteSet.Namespaces = []string{str(), str()}
		}
	}
	return r
}

// A stored record must read back as the value its JSON form (the json tags
// of Record, which is what toolgate show prints) reads back as: omitempty
// fields empty, output compacted, times with their zone offsets.
func TestRecordEncoding_MatchesJSONRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		r := randomRecord(rng, true)
		js, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var want Record
		if err := json.Unmarshal(js, &want); err != nil {
			t.Fatal(err)
		}
		data, err := appendRecord(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseRecord(data)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("record %d differs:\n got %+v\nwant %+v", i, *got, want)
		}
	}
}

// Strings are kept byte for byte, even when they are not valid UTF-8 (JSON
// would have replaced the bad bytes).
func TestRecordEncoding_KeepsBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 1000 {
		r := randomRecord(rng, false)
		data, err := appendRecord(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseRecord(data)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if got.ExecutionID != r.ExecutionID || got.CallID != r.CallID || got.Principal != r.Principal || got.State != r.State || got.InputHash != r.InputHash {
			t.Fatalf("record %d: strings changed: got %+v\nwant %+v", i, got, r)
		}
		for j := range r.Transitions {
			if got.Transitions[j].Reason != r.Transitions[j].Reason || !got.Transitions[j].At.Equal(r.Transitions[j].At) {
				t.Fatalf("record %d: transition %d changed", i, j)
			}
		}
	}
}

// A damaged record is an error, never a panic or a wrong record: every
// truncation, and arbitrary byte changes.
func TestRecordEncoding_Damaged(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		data, err := appendRecord(nil, randomRecord(rng, true))
		if err != nil {
			t.Fatal(err)
		}
		for n := range len(data) {
			if _, err := parseRecord(data[:n]); err == nil {
				t.Fatalf("truncated record (%d of %d bytes) accepted", n, len(data))
			}
		}
		if _, err := parseRecord(append(data, 0)); err == nil {
			t.Fatal("record with a trailing byte accepted")
		}
		for range 50 {
			d := bytes.Clone(data)
			d[rng.IntN(len(d))] = byte(rng.IntN(256))
			parseRecord(d) // may or may not fail; must not panic
		}
	}
	if _, err := parseRecord([]byte(`{"executionId":"x"}`)); err == nil {
		t.Error("a JSON record (format 2) accepted")
	}
}

func FuzzParseRecord(f *testing.F) {
	data, _ := appendRecord(nil, randomRecord(rand.New(rand.NewPCG(1, 2)), true))
	f.Add(data)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseRecord(b)
		if err != nil {
			return
		}
		again, err := appendRecord(nil, r)
		if err != nil {
			return // a time the encoder refuses; the decoder need not
		}
		if _, err := parseRecord(again); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
	})
}

func TestAppendRecord_Refuses(t *testing.T) {
	if _, err := appendRecord(nil, &Record{ExecutionID: "x", Output: json.RawMessage(`{`)}); err == nil {
		t.Error("invalid output accepted")
	}
	if _, err := appendRecord(nil, &Record{ExecutionID: "x", StartedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Error("year 10000 accepted")
	}
	// json.Unmarshal refuses a zone offset of 24h or more: never write one.
	if _, err := appendRecord(nil, &Record{ExecutionID: "x", StartedAt: time.Now().In(time.FixedZone("z", 25*3600))}); err == nil {
		t.Error("zone offset +25:00 accepted")
	}
}

// UUIDs and lowercase hex (ids, SHA-256 hashes) are stored as their bytes;
// anything else as is.
func TestAppendStr_CompactForms(t *testing.T) {
	for _, c := range []struct {
		s    string
		size int
	}{
		{"0190f3a2-7c4e-7b21-9d3e-5a6b7c8d9e0f", 17},
		{"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", 34},
		{"0190F3A2-7C4E-7B21-9D3E-5A6B7C8D9E0F", 38},
		{"abc", 4},
		{"", 1},
		{"0190f3a2-7c4e-7b21-9d3e-5a6b7c8d9e0g", 38}, // not hex at the end: raw
		{"g190f3a2-7c4e-7b21-9d3e-5a6b7c8d9e0f", 38}, // nor at the start
		{"0190f3a2-7c4e-7b21-9d3e_5a6b7c8d9e0f", 38}, // a hyphen missing
		{"0190f3a207c4e07b2109d3e05a6b7c8d9e0f", 19}, // 36 hex digits
		{"abcd", 3},
		{"abcde", 6},
		{"abcD", 5},
		{"ab\xffd", 5},
	} {
		b := appendStr(nil, c.s)
		if len(b) != c.size {
			t.Errorf("%q: %d bytes, want %d", c.s, len(b), c.size)
		}
		d := &recordDecoder{b: b}
		if got := d.str("s"); got != c.s || d.err != nil || len(d.b) != 0 {
			t.Errorf("%q read back as %q, %v", c.s, got, d.err)
		}
	}
}
