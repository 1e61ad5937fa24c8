package audit_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/toolgate/toolgate/audit"
)

// FuzzCanonicalize checks that Canonicalize never panics and that whatever
// it accepts is valid JSON whose canonical form is valid JSON, a fixed
// point, and the same value as the input when both are decoded with
// encoding/json (numbers as float64), hashed alike by Hash.
// FuzzCanonicalize_MatchesTree compares it with the tree encoder.
func FuzzCanonicalize(f *testing.F) {
	for _, tc := range allGoodCases() {
		f.Add([]byte(tc.in))
	}
	for _, s := range []string{
		`{"a":1,"a":2}`, `"\ud800"`, `1e400`, `[1,]`, "\"\xff\"", `{} {}`, `NaN`,
		`[-0, 1e21, 1e-7, 0.000001, 123456789012345680000, 5e-324]`,
		`{"\u0000":"\u001f","/":"\/","\u2028":"<>&"}`,
		`{"b":{"y":[1,{"d":0,"c":1}],"x":"\u0022"},"a":[]}`, `{"b":1,"a":2,"\u0062":3}`, `{"\n":1,"\u000a":2}`,
		`{"\ud83d\ude00":1,"\ufb33":2,"z\u0000":3,"z":4}`, `[{"b":1,"a":2},{"a":1,"a":2}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := audit.Canonicalize(in)
		if err != nil {
			if out != nil {
				t.Fatalf("output %q returned with error %v", out, err)
			}
			return
		}
		if !json.Valid(in) {
			t.Fatalf("accepted invalid JSON %q", in)
		}
		if !json.Valid(out) {
			t.Fatalf("Canonicalize(%q) = %q, not valid JSON", in, out)
		}
		again, err := audit.Canonicalize(out)
		if err != nil {
			t.Fatalf("re-canonicalizing %q: %v", out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point: %q -> %q -> %q", in, out, again)
		}
		var vin, vout any
		if err := json.Unmarshal(in, &vin); err != nil {
			t.Fatalf("json.Unmarshal(%q): %v", in, err)
		}
		if err := json.Unmarshal(out, &vout); err != nil {
			t.Fatalf("json.Unmarshal(%q): %v", out, err)
		}
		if !reflect.DeepEqual(vin, vout) {
			t.Fatalf("value changed: %q (%#v) -> %q (%#v)", in, vin, out, vout)
		}
		hin, err := audit.Hash(in)
		if err != nil {
			t.Fatalf("Hash(%q): %v", in, err)
		}
		hout, err := audit.Hash(out)
		if err != nil || hin != hout {
			t.Fatalf("Hash(%q) = %s, Hash(%q) = %s (%v)", in, hin, out, hout, err)
		}
	})
}
