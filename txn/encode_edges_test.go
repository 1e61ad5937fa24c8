package txn

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestAppendTime_Edges: the years and zone offsets a record may hold are
// those time.Time.MarshalJSON accepts, edges included.
func TestAppendTime_Edges(t *testing.T) {
	cases := []struct {
		t  time.Time
		ok bool
	}{
		{time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), true},
		{time.Date(-1, 12, 31, 23, 59, 59, 0, time.UTC), false},
		{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{time.Date(2025, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600-60)), true},
		{time.Date(2025, 1, 1, 0, 0, 0, 0, time.FixedZone("", -24*3600+60)), true},
		{time.Date(2025, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600)), false},
		{time.Date(2025, 1, 1, 0, 0, 0, 0, time.FixedZone("", -24*3600)), false},
	}
	for _, c := range cases {
		_, jerr := c.t.MarshalJSON()
		b, err := appendRecord(nil, &Record{ExecutionID: "x", StartedAt: c.t})
		if (err == nil) != c.ok || (jerr == nil) != c.ok {
			t.Errorf("%v: appendRecord error %v, MarshalJSON error %v; want accepted %v", c.t, err, jerr, c.ok)
			continue
		}
		if !c.ok {
			continue
		}
		r, err := parseRecord(b)
		if err != nil || !r.StartedAt.Equal(c.t) {
			t.Errorf("%v read back as %v, %v", c.t, r.StartedAt, err)
		}
		if _, off := r.StartedAt.Zone(); err == nil && off != func() int { _, o := c.t.Zone(); return o }() {
			t.Errorf("%v read back with offset %d", c.t, off)
		}
	}
}

// TestAppendRecord_CompactsOutput: Output is stored as json.Compact writes
// it, whitespace inside strings and after escapes kept.
func TestAppendRecord_CompactsOutput(t *testing.T) {
	for _, out := range []string{
		"{ \"a\" : \"b \\\" c\\\\\" ,\n\t\"d\" : [ 1 ,\r\n2 ] , \"e\\\\\" : \" \\\\ \" }",
		`"a\"b"`, ` [ "\\\"" , " " ] `, `{"":" \" "}`,
	} {
		b, err := appendRecord(nil, &Record{ExecutionID: "x", Output: json.RawMessage(out)})
		if err != nil {
			t.Fatal(err)
		}
		r, err := parseRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		json.Compact(&want, []byte(out))
		if string(r.Output) != want.String() {
			t.Errorf("Output %q stored as %q, want %q", out, r.Output, want.String())
		}
	}
}

// TestParseRecord_MalformedLists: a count of strings or transitions the
// bytes left cannot hold, or a hex string shorter than the encoder writes,
// is malformed.
func TestParseRecord_MalformedLists(t *testing.T) {
	good, err := appendRecord(nil, &Record{ExecutionID: "x", Capabilities: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseRecord(good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"hex string of one byte", []byte{0x01, 1<<2 | strHex, 0xab}},
		{"uuid with a length", []byte{0x01, 1<<2 | strUUID}},
		{"unknown string kind", []byte{0x01, 3}},
	} {
		if _, err := parseRecord(tc.b); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	d := &recordDecoder{b: []byte{2, 0, 0}}
	if ss := d.strs("s"); d.err != nil || len(ss) != 2 || ss[0] != "" || ss[1] != "" {
		t.Errorf("two empty strings: %q, %v", ss, d.err)
	}
	d = &recordDecoder{b: []byte{3, 0, 0}}
	if ss := d.strs("s"); d.err == nil {
		t.Errorf("three strings in two bytes: %q, accepted", ss)
	}
}
