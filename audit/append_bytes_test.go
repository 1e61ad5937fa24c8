package audit_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/audit"
)

// TestEvent_AppendJSON_Bytes holds AppendJSON to the bytes json.Marshal
// writes, but for the escapes AppendJSON leaves out: <, >, &, U+2028/9 and
// the U+FFFD that replaces an invalid byte are written as they are, and
// nothing else (a space, a character outside ASCII) is escaped by either.
func TestEvent_AppendJSON_Bytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	pieces := []string{"", "a", " ", "a b", "!", "~", "\x7f", "é", "\"", "\\", "/", "\n", "\b", "\f", "\r", "\t",
		"\x00", "\x1f", "\x0b", "\u2028", "\u2029", "\xff", "<&>", "😀"}
	str := func() string {
		s := ""
		for range rng.IntN(6) {
			s += pieces[rng.IntN(len(pieces))]
		}
		return s
	}
	unescape := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&", `\u2028`, "\u2028", `\u2029`, "\u2029", `\ufffd`, "\ufffd")
	for i := range 500 {
		e := audit.Event{EventID: str(), Timestamp: rng.Int64N(1 << 50), ToolID: str(), ToolVersion: str(),
			ExecutionID: str(), CallID: str(), Attempt: rng.IntN(9), State: str(), InputHash: str(),
			Capabilities: []string{str(), str()}}
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		want = []byte(unescape.Replace(string(want)))
		if got := e.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("event %d:\n got %q\nwant %q", i, got, want)
		}
	}
}
