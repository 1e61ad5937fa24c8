package audit_test

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/audit"
)

func fullEvent() audit.Event {
	d := int64(42)
	return audit.Event{
		Seq:          7,
		PrevHash:     strings.Repeat("ab", 32),
		EventID:      "evt-1",
		Timestamp:    1767225600123,
		ToolID:       "fs.read",
		ToolVersion:  "1.2.0",
		ExecutionID:  "exec-1",
		CallID:       "call-1",
		Attempt:      2,
		State:        "FAILED",
		UserID:       "alice",
		Capabilities: []string{"filesystem.read:/srv/data"},
		Duration:     &d,
		Error:        &audit.ErrorDetails{Type: "ValidationError", Code: "schema", Message: "path: required"},
		InputHash:    strings.Repeat("01", 32),
		OutputHash:   strings.Repeat("02", 32),
	}
}

func decodeObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return m
}

func TestEventJSONFieldNames(t *testing.T) {
	e := fullEvent()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	m := decodeObject(t, b)
	want := []string{"attempt", "callId", "capabilities", "duration", "error", "eventId", "executionId",
		"inputHash", "outputHash", "prevHash", "seq", "state", "timestamp", "toolId", "toolVersion", "userId"}
	if got := slices.Sorted(maps.Keys(m)); !slices.Equal(got, want) {
		t.Errorf("fields %v, want %v", got, want)
	}
	errObj, _ := m["error"].(map[string]any)
	if got := slices.Sorted(maps.Keys(errObj)); !slices.Equal(got, []string{"code", "message", "type"}) {
		t.Errorf("error fields %v", got)
	}
	if m["timestamp"] != float64(1767225600123) || m["duration"] != float64(42) || m["seq"] != float64(7) {
		t.Errorf("numbers: timestamp %v duration %v seq %v", m["timestamp"], m["duration"], m["seq"])
	}

	// Pointer and value encode alike.
	pb, err := json.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	if string(pb) != string(b) {
		t.Errorf("*Event encodes as %s, Event as %s", pb, b)
	}
}

func TestEventJSONOmitsOptional(t *testing.T) {
	e := audit.Event{EventID: "evt-1", State: "DECLARED", InputHash: "x"}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	m := decodeObject(t, b)
	// seq and prevHash are set only when the event itself carries its place
	// in a chain; the store's log keeps them in the entry around the event.
	for _, k := range []string{"seq", "prevHash", "userId", "duration", "error", "outputHash"} {
		if _, ok := m[k]; ok {
			t.Errorf("optional field %s present in %s", k, b)
		}
	}
	for _, k := range []string{"eventId", "timestamp", "toolId", "toolVersion",
		"executionId", "callId", "attempt", "state", "capabilities", "inputHash"} {
		if _, ok := m[k]; !ok {
			t.Errorf("required field %s missing from %s", k, b)
		}
	}
	if caps, ok := m["capabilities"].([]any); !ok || len(caps) != 0 {
		t.Errorf("nil capabilities encode as %v, want []", m["capabilities"])
	}
	// A zero duration that was measured is kept.
	zero := int64(0)
	e.Duration = &zero
	b, _ = json.Marshal(e)
	if _, ok := decodeObject(t, b)["duration"]; !ok {
		t.Errorf("measured zero duration dropped: %s", b)
	}
}

func TestEventHashRoundTrip(t *testing.T) {
	e := fullEvent()
	h, err := e.Hash()
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
		t.Fatalf("hash %q is not lowercase hex SHA-256", h)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	// The hash of the stored bytes is the event's hash.
	if hb, err := audit.Hash(b); err != nil || hb != h {
		t.Errorf("Hash(json) = %s (%v), Event.Hash = %s", hb, err, h)
	}
	// Decoding and re-hashing gives the same value.
	var back audit.Event
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if hb, err := back.Hash(); err != nil || hb != h {
		t.Errorf("round-tripped hash %s (%v), want %s", hb, err, h)
	}
	// Nil and empty capabilities hash alike.
	a, c := audit.Event{EventID: "x"}, audit.Event{EventID: "x", Capabilities: []string{}}
	ha, _ := a.Hash()
	hc, _ := c.Hash()
	if ha != hc {
		t.Errorf("nil capabilities hash %s, empty %s", ha, hc)
	}
}

func TestEventHashCoversEveryField(t *testing.T) {
	base := fullEvent()
	h0, err := base.Hash()
	if err != nil {
		t.Fatal(err)
	}
	edits := map[string]func(e *audit.Event){
		"seq":          func(e *audit.Event) { e.Seq++ },
		"prevHash":     func(e *audit.Event) { e.PrevHash = "" },
		"eventId":      func(e *audit.Event) { e.EventID = "evt-2" },
		"timestamp":    func(e *audit.Event) { e.Timestamp++ },
		"toolId":       func(e *audit.Event) { e.ToolID = "fs.write" },
		"toolVersion":  func(e *audit.Event) { e.ToolVersion = "1.2.1" },
		"executionId":  func(e *audit.Event) { e.ExecutionID = "exec-2" },
		"callId":       func(e *audit.Event) { e.CallID = "call-2" },
		"attempt":      func(e *audit.Event) { e.Attempt++ },
		"state":        func(e *audit.Event) { e.State = "DENIED" },
		"userId":       func(e *audit.Event) { e.UserID = "" },
		"capabilities": func(e *audit.Event) { e.Capabilities = append(e.Capabilities, "x") },
		"duration":     func(e *audit.Event) { e.Duration = nil },
		"error":        func(e *audit.Event) { e.Error = nil },
		"error.code": func(e *audit.Event) {
			e.Error = &audit.ErrorDetails{Type: "ValidationError", Message: "path: required"}
		},
		"inputHash":  func(e *audit.Event) { e.InputHash = "" },
		"outputHash": func(e *audit.Event) { e.OutputHash = "" },
	}
	for name, edit := range edits {
		e := fullEvent()
		edit(&e)
		h, err := e.Hash()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if h == h0 {
			t.Errorf("changing %s does not change the hash", name)
		}
	}
	if h, _ := base.Hash(); h != h0 {
		t.Errorf("hash not deterministic: %s then %s", h0, h)
	}
}

func TestEventHashRefuses(t *testing.T) {
	cases := map[string]func(e *audit.Event){
		"invalid UTF-8 in toolId":       func(e *audit.Event) { e.ToolID = "fs\xff" },
		"invalid UTF-8 in capability":   func(e *audit.Event) { e.Capabilities = []string{"\xc3"} },
		"invalid UTF-8 in error":        func(e *audit.Event) { e.Error.Message = "bad \xed\xa0\x80" },
		"seq beyond 2^53":               func(e *audit.Event) { e.Seq = 1<<53 + 1 },
		"timestamp beyond 2^53":         func(e *audit.Event) { e.Timestamp = 1<<53 + 1 },
		"negative timestamp below 2^53": func(e *audit.Event) { e.Timestamp = -(1<<53 + 1) },
		"duration beyond 2^53":          func(e *audit.Event) { d := int64(1 << 60); e.Duration = &d },
	}
	for name, edit := range cases {
		e := fullEvent()
		edit(&e)
		if h, err := e.Hash(); !errors.Is(err, audit.ErrNotCanonicalizable) {
			t.Errorf("%s: Hash = %q, %v; want ErrNotCanonicalizable", name, h, err)
		}
	}
	// ±2^53 itself is a float64 exactly, and so still hashed.
	edge := map[string]func(e *audit.Event){
		"seq 2^53":        func(e *audit.Event) { e.Seq = 1 << 53 },
		"timestamp 2^53":  func(e *audit.Event) { e.Timestamp = 1 << 53 },
		"timestamp -2^53": func(e *audit.Event) { e.Timestamp = -(1 << 53) },
		"duration -2^53":  func(e *audit.Event) { d := int64(-(1 << 53)); e.Duration = &d },
	}
	for name, edit := range edge {
		e := fullEvent()
		edit(&e)
		if _, err := e.Hash(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
