package capability_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
)

// A filesystem grant names a place: its symbolic links are followed once,
// when the grant is made (a policy built, a per-call grant decided), and the
// place travels with the grant to the tool's handles; the scope as written
// stays what the grant is shown and matched by.
func TestResolve_GrantNamesAPlace(t *testing.T) {
	base := t.TempDir()
	real, other := filepath.Join(base, "real"), filepath.Join(base, "other")
	for _, d := range []string{real, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink("real", link); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, scope, place string
	}{
		{"a link", link, real},
		{"through a link", filepath.Join(link, "sub", "f.txt"), filepath.Join(real, "sub", "f.txt")},
		{"no link", real, ""},
		{"missing, no link", filepath.Join(base, "nope", "x"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := capability.Resolve(capability.Capability{Name: "filesystem.read", Scope: tt.scope})
			if c.Place != tt.place || c.Scope != tt.scope {
				t.Fatalf("Resolve(%s) = %+v; want place %q", tt.scope, c, tt.place)
			}
			if c.String() != "filesystem.read:"+tt.scope {
				t.Errorf("String() = %q: the grant is shown as written", c.String())
			}
		})
	}
	for _, c := range []capability.Capability{
		{Name: "process.exec", Scope: link},                  // not a filesystem grant
		{Name: "filesystem.read", Scope: "link"},             // relative: resolved against the runtime's WorkDir, not here
		{Name: "filesystem.read", Scope: link, Place: other}, // made already
	} {
		if got := capability.Resolve(c); got != c {
			t.Errorf("Resolve(%+v) = %+v; want it unchanged", c, got)
		}
	}

	// Made once: a policy keeps the place its link led to when it was built.
	p, err := capability.NewPolicy(map[string][]capability.Capability{"alice": {capability.MustParse("filesystem.read:" + link)}})
	if err != nil {
		t.Fatal(err)
	}
	rev := p.Revision()
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("other", link); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	d := p.Decide("alice", "t", []capability.Capability{capability.MustParse("filesystem.read")}, nil, at)
	if eff := d.Effective(); len(eff) != 1 || eff[0].Place != real {
		t.Errorf("Effective() = %+v; want the place resolved when the policy was built, %s", eff, real)
	}
	// A scoped requirement below the grant reaches below its place.
	d = p.Decide("alice", "t", []capability.Capability{capability.MustParse("filesystem.read:" + link + "/x")}, nil, at)
	if eff := d.Effective(); len(eff) != 1 || eff[0].Place != filepath.Join(real, "x") {
		t.Errorf("scoped requirement: Effective() = %+v; want place %s", eff, filepath.Join(real, "x"))
	}
	// A grant given for one decision is made, and resolved, then.
	d = p.Decide("bob", "t", []capability.Capability{capability.MustParse("filesystem.read")},
		[]capability.Capability{capability.MustParse("filesystem.read:" + link)}, at)
	if eff := d.Effective(); !d.Allowed() || len(eff) != 1 || eff[0].Place != other {
		t.Errorf("per-call grant: Effective() = %+v; want the place it leads to now, %s", eff, other)
	}
	// The same file naming another place is another revision.
	again, err := capability.NewPolicy(map[string][]capability.Capability{"alice": {capability.MustParse("filesystem.read:" + link)}})
	if err != nil {
		t.Fatal(err)
	}
	if again.Revision() == rev {
		t.Error("a policy whose grant now leads elsewhere kept its revision")
	}
}
