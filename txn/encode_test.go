package txn

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// appendRecord must produce what json.Marshal produces, so stored records
// read back identically whichever wrote them: compared byte for byte over
// random records with awkward strings.
func TestAppendRecord_MatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pieces := []string{"", "a", "é", "\"", "\\", "\n", "\t", "\x00", "\x1f", "\u2028", "\u2029", "\xff", "<&>", "😀", "/", "\u007f"}
	str := func() string {
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
		loc := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+1800), time.Local}[rng.IntN(3)]
		return time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(loc)
	}
	for i := range 2000 {
		r := &Record{
			ExecutionID: str() + "id", CallID: str(), TraceID: str(), Attempt: rng.IntN(10), ToolID: str() + "t", ToolVersion: str(),
			Principal: str(), State: str() + "S", StartedAt: tm(), EndedAt: tm(),
			InputHash: str(), OutputHash: str(),
		}
		for range rng.IntN(4) {
			r.Transitions = append(r.Transitions, Transition{From: str(), To: str(), Event: str(), At: tm(), Reason: str()})
		}
		if rng.IntN(2) == 0 {
			r.Capabilities = []string{str(), str()}
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
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendRecord(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			// encoding/json also escapes <, > and &; that is the only
			// difference allowed, and it must not change the decoded value.
			var a, b Record
			if err := json.Unmarshal(got, &a); err != nil {
				t.Fatalf("record %d: appendRecord wrote invalid JSON: %v\n%s", i, err, got)
			}
			json.Unmarshal(want, &b)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("record %d differs:\n got %s\nwant %s", i, got, want)
			}
		}
	}
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
