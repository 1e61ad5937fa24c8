package capability_test

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
)

const keyA = "alice+5c3e1a9b+AXt0c2V0aGlzaXNub3RhcmVhbGtleWJ1dGl0c2hhcGVkb2s="

// approvalKeys: parsed, copied out, counted in the revision only when
// present (a policy without them keeps its revision); refused when an
// approver lists no key, a key is not one word, an approver is named
// twice or is not a principal name.
func TestPolicy_ApprovalKeys(t *testing.T) {
	plain := `{"version": 1, "principals": {"alice": ["state.read:x"]}}`
	withKeys := `{"version": 1, "principals": {"alice": ["state.read:x"]}, "approvalKeys": {"alice": ["` + keyA + `"], "*": ["srv+0f2d4b6a+ATq8"]}}`
	p, err := capability.ParsePolicy("p.json", []byte(plain))
	if err != nil {
		t.Fatal(err)
	}
	if p.ApprovalKeys() != nil {
		t.Errorf("no approvalKeys: ApprovalKeys() = %v", p.ApprovalKeys())
	}
	g, _ := capability.NewPolicy(map[string][]capability.Capability{"alice": {capability.MustParse("state.read:x")}})
	if p.Revision() != g.Revision() {
		t.Errorf("a policy without keys changed revision: %s vs %s", p.Revision(), g.Revision())
	}
	k, err := capability.ParsePolicy("p.json", []byte(withKeys))
	if err != nil {
		t.Fatal(err)
	}
	keys := k.ApprovalKeys()
	if len(keys) != 2 || keys["alice"][0] != keyA || keys["*"][0] != "srv+0f2d4b6a+ATq8" {
		t.Errorf("ApprovalKeys() = %v", keys)
	}
	keys["alice"][0] = "changed"
	if k.ApprovalKeys()["alice"][0] != keyA {
		t.Error("ApprovalKeys() shares its slices with the caller")
	}
	if k.Revision() == p.Revision() {
		t.Error("approval keys do not change the revision")
	}
	if d := k.Decide("alice", "t", []capability.Capability{capability.MustParse("state.read:x")}, nil, time.Now()); !d.Allowed() {
		t.Errorf("grants lost with keys: %+v", d)
	}
	w, err := g.WithApprovalKeys(map[string][]string{"alice": {keyA}, "*": {"srv+0f2d4b6a+ATq8"}})
	if err != nil || w.Revision() != k.Revision() {
		t.Errorf("WithApprovalKeys: revision %s, %v; the file's %s", w.Revision(), err, k.Revision())
	}
	for name, tc := range map[string]struct{ file, want string }{
		"no key":                     {`{"version":1,"principals":{},"approvalKeys":{"alice":[]}}`, `"alice" lists no key`},
		"not a word":                 {`{"version":1,"principals":{},"approvalKeys":{"alice":["a b"]}}`, `is not a key`},
		"empty key":                  {`{"version":1,"principals":{},"approvalKeys":{"alice":[""]}}`, `is not a key`},
		"twice":                      {`{"version":1,"principals":{},"approvalKeys":{"alice":["k"],"alice":["j"]}}`, `"alice" is listed twice`},
		"bad name":                   {`{"version":1,"principals":{},"approvalKeys":{"al ice":["k"]}}`, `whitespace`},
		"not a list":                 {`{"version":1,"principals":{},"approvalKeys":{"alice":"k"}}`, `each approver in "approvalKeys" must have a list of keys`},
		"not strings":                {`{"version":1,"principals":{},"approvalKeys":{"alice":[1]}}`, `each key in "approvalKeys" must be a string`},
		"a capability not a string":  {`{"version":1,"principals":{"a":[7]}}`, `each capability in "principals" must be a string`},
		"a principal without a list": {`{"version":1,"principals":{"a":"x"}}`, `each principal in "principals" must have a list of capability strings`},
	} {
		_, err := capability.ParsePolicy("p.json", []byte(tc.file))
		if err == nil || !errors.Is(err, capability.ErrPolicy) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "p.json:") {
			t.Errorf("%s: %v, want an ErrPolicy naming the place and saying %q", name, err, tc.want)
		}
	}
}

// A policy file that cannot be read keeps its cause for errors.Is (and
// for the words the CLI puts it in).
func TestLoadPolicy_KeepsTheCause(t *testing.T) {
	p, err := capability.LoadPolicy(filepath.Join(t.TempDir(), "missing.json"))
	if !errors.Is(err, capability.ErrPolicy) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadPolicy of a missing file: %v; want ErrPolicy and fs.ErrNotExist", err)
	}
	if p == nil || p.Decide("a", "t", nil, nil, time.Now()).Reason == "" {
		t.Error("a policy that failed to load does not deny, saying why")
	}
}
