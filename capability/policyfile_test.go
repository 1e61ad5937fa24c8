package capability_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
)

// parseErr parses file as p.json (or unnamed, for name ""), refusing the
// grants that start with "bad." as a program's check would, and returns
// the error without its "capability: invalid policy: " prefix.
func parseErr(t *testing.T, name, file string) string {
	t.Helper()
	_, err := capability.ParsePolicyChecked(name, []byte(file), func(g string) error {
		if strings.HasPrefix(g, "bad.") {
			return errors.New("unknown capability")
		}
		return nil
	})
	if err == nil {
		t.Fatalf("%s: parsed; want an error", file)
	}
	if !errors.Is(err, capability.ErrPolicy) {
		t.Fatalf("%s: %v; want ErrPolicy", file, err)
	}
	msg, ok := strings.CutPrefix(err.Error(), "capability: invalid policy: ")
	if !ok {
		t.Fatalf("%s: %q does not start with the policy error", file, err)
	}
	return msg
}

// An error in a policy file names the line and column (1-based, counting
// bytes) of the first byte inside the quotes of the principal, approver,
// grant or key at fault, as it is written in the file, escapes and all; the
// principals are checked in the file's order and the first error reported.
func TestParsePolicy_ErrorPositionsNameTheStringAsWritten(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"a principal name",
			"{\"version\": 1,\n \"principals\": {\"ok\": [], \"a b\": []}}",
			`p.json:2:28: principal "a b" contains whitespace or control characters`},
		{"an escaped principal name, where it is written",
			"{\"version\": 1, \"principals\": {\n  \"a\\u0020b\": []}}",
			`p.json:2:4: principal "a b" contains whitespace or control characters`},
		{"an empty principal name",
			`{"version": 1, "principals": {"": []}}`,
			`p.json:1:32: empty principal name`},
		{"the second grant",
			"{\"version\": 1, \"principals\": {\n\"alice\": [\"state.read\",\n   \"bad.one\"]}}",
			`p.json:3:5: principal "alice": unknown capability`},
		{"the same grant twice, the second refused by Parse",
			`{"version": 1, "principals": {"alice": ["state.read", "state.read", "Bad"]}}`,
			`p.json:1:70: principal "alice": invalid capability "Bad": name must be dotted lowercase words such as filesystem.read`},
		{"a grant written with escapes",
			`{"version": 1, "principals": {"alice": ["bad.x:\/srv\u0026"]}}`,
			`p.json:1:42: principal "alice": unknown capability`},
		{"the first principal in the file, though the second sorts first and escapes differ",
			`{"version": 1, "principals": {"bob": ["bad.x"], "a<b": ["bad.x"]}}`,
			`p.json:1:40: principal "bob": unknown capability`},
		{"a principal named as a field",
			`{"version": 1, "principals": {"version": ["state.read", "bad.x"]}}`,
			`p.json:1:58: principal "version": unknown capability`},
		{"principals after approvalKeys naming the same",
			`{"version": 1, "approvalKeys": {"a b": ["k"]}, "principals": {"a b": []}}`,
			`p.json:1:64: principal "a b" contains whitespace or control characters`},
		{"columns count bytes",
			`{"version": 1, "principals": {"émile": [], "x": ["bad.x"]}}`,
			`p.json:1:52: principal "x": unknown capability`},
		{"a principal listed twice",
			"{\"version\": 1, \"principals\": {\n\"alice\": [],\n  \"alice\": []}}",
			`p.json:3:4: principal "alice" is listed twice`},
		{"a principal listed twice after one listed as null",
			`{"version": 1, "principals": {"alice": null, "bob": [], "alice": ["state.read"]}}`,
			`p.json:1:58: principal "alice" is listed twice`},
		{"an approver without a key",
			`{"version": 1, "principals": {}, "approvalKeys": {"alice": ["k"], "bob": []}}`,
			`p.json:1:68: approvalKeys: "bob" lists no key; remove it or list one`},
		{"an approver with too many keys",
			`{"version": 1, "principals": {}, "approvalKeys": {"alice": [` + strings.Repeat(`"k", `, 64) + `"k"]}}`,
			`p.json:1:52: approvalKeys: "alice" lists 65 keys; at most 64`},
		{"an approver's bad name",
			`{"version": 1, "principals": {}, "approvalKeys": {"b\tob": ["k"]}}`,
			`p.json:1:52: approvalKeys: approver "b\tob" contains whitespace or control characters`},
		{"an approver's second key",
			`{"version": 1, "principals": {}, "approvalKeys": {"alice": ["k", "a b"]}}`,
			`p.json:1:67: approvalKeys: "alice": "a b" is not a key (name+hash+key, as toolgate intent keygen prints it)`},
		{"an approver listed twice",
			`{"version": 1, "principals": {}, "approvalKeys": {"*": ["k"], "*": ["j"]}}`,
			`p.json:1:64: approver "*" is listed twice`},
		{"the first approver in the file",
			`{"version": 1, "principals": {}, "approvalKeys": {"zed": [], "ann": [], "kim": []}}`,
			`p.json:1:52: approvalKeys: "zed" lists no key; remove it or list one`},
		{"a syntax error",
			"{\"version\": 1,\n \"principals\": {\"a\": [\"x\",]}}",
			`p.json:2:27: invalid character ']' looking for beginning of value`},
		{"a value of the wrong type",
			"{\"version\": 1,\n \"principals\": {\"a\": [7]}}",
			`p.json:2:23: each capability in "principals" must be a string`},
		{"unnamed",
			"{\"version\": 1,\n \"principals\": {\"a\": [\"bad.x\"]}}",
			`line 2 column 24: principal "a": unknown capability`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "p.json"
			if tc.name == "unnamed" {
				name = ""
			}
			for range 20 { // the same error every time: never a map's order
				if got := parseErr(t, name, tc.file); got != tc.want {
					t.Fatalf("error %q\n              want %q", got, tc.want)
				}
			}
		})
	}
}

// encoding/json matches field names ignoring case and keeps the last of a
// member named twice, so a second "principals" (or "Principals") would
// silently replace the grants a reader sees in the first. A policy file
// names each field once, spelt exactly.
func TestParsePolicy_RefusesWhatJSONWouldAcceptSilently(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{`{"version": 1, "principals": {"alice": ["state.read:a"]}, "principals": {"alice": ["state.write:b"]}}`,
			`p.json:1:60: "principals" is listed twice`},
		{`{"version": 1, "principals": {"alice": ["state.read:a"]}, "Principals": {"alice": ["state.write:b"]}}`,
			`p.json:1:60: unknown field "Principals"; a policy has "version", "principals", "approvalKeys", "cedar" and "groups"`},
		{`{"Version": 1, "PRINCIPALS": {}}`,
			`p.json:1:3: unknown field "Version"; a policy has "version", "principals", "approvalKeys", "cedar" and "groups"`},
		{`{"version": 2, "principals": {}, "version": 1}`,
			`p.json:1:35: "version" is listed twice`},
		{`{"version": 1, "principals": null, "approvalKeys": {"a": ["k"]}, "approvalKeys": {"a": ["j"]}}`,
			`p.json:1:67: "approvalKeys" is listed twice`},
		{`{"version": 1, "roles": {}}`,
			`p.json:1:17: unknown field "roles"; a policy has "version", "principals", "approvalKeys", "cedar" and "groups"`},
		// The Cedar fields: groups without Cedar files, a group or member
		// that is not a name, an empty file name, each where it is written.
		{`{"version": 1, "groups": {"g": ["a"]}}`,
			`p.json:1:17: "groups" are for Cedar policies, and "cedar" names none`},
		{`{"version": 1, "cedar": ["r.cedar"], "groups": {"g": ["a", "b c"]}}`,
			`p.json:1:61: group "g": principal "b c" contains whitespace or control characters`},
		{`{"version": 1, "cedar": ["r.cedar", ""], "groups": {}}`,
			`p.json:1:38: an empty Cedar file name`},
		{`{"version": 1, "cedar": [], "groups": {"g": []}, "groups": {}}`,
			`p.json:1:51: "groups" is listed twice`},
	} {
		if got := parseErr(t, "p.json", tc.file); got != tc.want {
			t.Errorf("%s:\n error %q\n  want %q", tc.file, got, tc.want)
		}
	}
	// What the scan does not look into is decoded as it is.
	p, err := capability.ParsePolicy("p.json", []byte(`{"principals": {"alice": null, "bob": ["state.read"]}, "version": 1, "approvalKeys": null}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.Principals(), p.Grants("alice"), p.Grants("bob"), p.ApprovalKeys() == nil); got != "[alice bob] [] [state.read] true" {
		t.Errorf("principals, grants, no keys: %s", got)
	}
}

// A value of the wrong type is named by its field, in the policy's terms.
func TestParsePolicy_WrongTypes(t *testing.T) {
	for file, want := range map[string]string{
		`{"version": "1", "principals": {}}`: `p.json:1:15: "version" must be 1`,
		`{"version": 1.5, "principals": {}}`: `p.json:1:15: "version" must be 1`,
		`[]`:                                 `p.json:1:1: the policy must be an object`,
		`{"version": 1, "principals": []}`:   `p.json:1:30: "principals" must be an object`,
		`{"version": 1, "principals": {}, "approvalKeys": "k"}`: `p.json:1:52: "approvalKeys" must be an object`,
		`{"version": 1, "principals": {"a": {"b": []}}}`:        `p.json:1:36: each principal in "principals" must have a list of capability strings`,
	} {
		if got := parseErr(t, "p.json", file); got != want {
			t.Errorf("%s:\n error %q\n  want %q", file, got, want)
		}
	}
}

// The errors that have no place name the file, or "policy" for none.
func TestParsePolicy_ErrorsWithoutAPlaceNameTheFile(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"p.json", `{"version": 2, "principals": {}}`, `p.json: "version" must be 1, got 2`},
		{"", `{"version": 2, "principals": {}}`, `policy: "version" must be 1, got 2`},
		{"p.json", " \n", `p.json: empty; a policy is a JSON object such as {"version": 1, "principals": {}}`},
		{"", "", `policy: empty; a policy is a JSON object such as {"version": 1, "principals": {}}`},
	} {
		if got := parseErr(t, tc.name, tc.file); got != tc.want {
			t.Errorf("%q %q: error %q; want %q", tc.name, tc.file, got, tc.want)
		}
	}
}

// An approver lists 1 to 64 keys, each a word of at most 512 bytes; a key
// listed twice counts once, and the keys are kept sorted.
func TestWithApprovalKeys_Limits(t *testing.T) {
	g, err := capability.NewPolicy(nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := func(n int) []string {
		ks := make([]string, n)
		for i := range ks {
			ks[i] = fmt.Sprintf("k%02d", i)
		}
		return ks
	}
	for _, tc := range []struct {
		name string
		keys []string
		want string // "" for accepted
	}{
		{"64 keys", keys(64), ""},
		{"65 keys", keys(65), `approvalKeys: "alice" lists 65 keys; at most 64`},
		{"a key of 512 bytes", []string{strings.Repeat("k", 512)}, ""},
		{"a key of 513 bytes", []string{strings.Repeat("k", 513)}, `approvalKeys: "alice": "` + strings.Repeat("k", 513) + `" is not a key (name+hash+key, as toolgate intent keygen prints it)`},
		{"a control character", []string{"k\x7f"}, `approvalKeys: "alice": "k\x7f" is not a key (name+hash+key, as toolgate intent keygen prints it)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := g.WithApprovalKeys(map[string][]string{"alice": tc.keys})
			if tc.want == "" {
				if err != nil || len(p.ApprovalKeys()["alice"]) != len(tc.keys) {
					t.Fatalf("refused, or lost keys: %v", err)
				}
				return
			}
			if !errors.Is(err, capability.ErrPolicy) || err.Error() != "capability: invalid policy: "+tc.want {
				t.Fatalf("err = %v; want ErrPolicy saying %q", err, tc.want)
			}
		})
	}
	p, err := g.WithApprovalKeys(map[string][]string{"alice": {"k2", "k1", "k2"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.ApprovalKeys()); got != "map[alice:[k1 k2]]" {
		t.Errorf("ApprovalKeys() = %s; want each key once, sorted", got)
	}
	// Of several faulty approvers, the first in sorted order is named.
	for range 20 {
		_, err := g.WithApprovalKeys(map[string][]string{"zed": nil, "ann": nil, "kim": nil, "*": {"k"}})
		if err == nil || !strings.Contains(err.Error(), `"ann" lists no key`) {
			t.Fatalf("err = %v; want the first approver, ann", err)
		}
	}
}

// The revision is the SHA-256 of the canonical form of the grants, so it
// stays the same across versions for the same grants; approval keys count
// only when there are any (an empty list of approvers is none).
func TestPolicy_RevisionIsStable(t *testing.T) {
	sum := sha256.Sum256([]byte(`{"alice":["state.read:x"]}`))
	want := "sha256:" + hex.EncodeToString(sum[:])
	plain, err := capability.NewPolicy(map[string][]capability.Capability{"alice": {capability.MustParse("state.read:x")}})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Revision() != want {
		t.Errorf("Revision() = %s; want %s, the SHA-256 of {\"alice\":[\"state.read:x\"]}", plain.Revision(), want)
	}
	for _, src := range []string{
		`{"version": 1, "principals": {"alice": ["state.read:x"]}}`,
		`{"version": 1, "principals": {"alice": ["state.read:x"]}, "approvalKeys": {}}`,
		`{"version": 1, "principals": {"alice": ["state.read:x"]}, "approvalKeys": null}`,
	} {
		p, err := capability.ParsePolicy("p.json", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if p.Revision() != want || p.ApprovalKeys() != nil {
			t.Errorf("%s: revision %s, keys %v; want %s and none", src, p.Revision(), p.ApprovalKeys(), want)
		}
	}
	none, err := plain.WithApprovalKeys(map[string][]string{})
	if err != nil || none.Revision() != want || none.ApprovalKeys() != nil {
		t.Errorf("WithApprovalKeys(empty): %v, revision %s, keys %v; want %s and none", err, none.Revision(), none.ApprovalKeys(), want)
	}
	a, errA := plain.WithApprovalKeys(map[string][]string{"alice": {"k1"}})
	b, errB := plain.WithApprovalKeys(map[string][]string{"alice": {"k2"}})
	if errA != nil || errB != nil || a.Revision() == b.Revision() || a.Revision() == want {
		t.Errorf("other keys, same revision: %s, %s (%v, %v)", a.Revision(), b.Revision(), errA, errB)
	}
}

// NewPolicy takes each grant as Parse takes its String form: a Go value
// with an unclean absolute scope grants what the same policy file grants,
// under the same revision.
func TestNewPolicy_TakesGrantsAsParsed(t *testing.T) {
	p, err := capability.NewPolicy(map[string][]capability.Capability{"alice": {{Name: "filesystem.read", Scope: "/srv//data/"}}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := capability.ParsePolicy("p.json", []byte(`{"version": 1, "principals": {"alice": ["filesystem.read:/srv//data/"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := capability.Strings(p.Grants("alice")); len(got) != 1 || got[0] != "filesystem.read:/srv/data" {
		t.Errorf("Grants = %q; want filesystem.read:/srv/data", got)
	}
	if p.Revision() != f.Revision() {
		t.Errorf("revision %s; the file's %s", p.Revision(), f.Revision())
	}
	d := p.Decide("alice", "t", []capability.Capability{capability.MustParse("filesystem.read:/srv/data/x")}, nil, time.Now())
	if !d.Allowed() {
		t.Errorf("filesystem.read:/srv/data/x denied: %+v", d)
	}
	_, err = capability.NewPolicy(map[string][]capability.Capability{"alice": {{Name: "state.read", Scope: "a b"}}})
	if !errors.Is(err, capability.ErrPolicy) || err.Error() != `capability: invalid policy: principal "alice": invalid capability "state.read:a b": scope contains whitespace or control characters` {
		t.Errorf("err = %v", err)
	}
}
