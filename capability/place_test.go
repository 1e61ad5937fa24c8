package capability_test

import (
	"os"
	"path/filepath"
	"strings"
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

// PlaceOf is where a grant leads: its place when it was resolved
// elsewhere, else its scope.
func TestCapability_PlaceOf(t *testing.T) {
	for _, tc := range []struct {
		c    capability.Capability
		want string
	}{
		{capability.Capability{Name: "filesystem.read", Scope: "/srv/link", Place: "/srv/real"}, "/srv/real"},
		{capability.Capability{Name: "filesystem.read", Scope: "/srv/real"}, "/srv/real"},
		{capability.Capability{Name: "filesystem.read"}, ""},
	} {
		if got := tc.c.PlaceOf(); got != tc.want {
			t.Errorf("%+v.PlaceOf() = %q; want %q", tc.c, got, tc.want)
		}
	}
}

// Resolve follows the links of the part of a scope that exists and appends
// the rest, for up to 256 components that do not exist yet; a scope with
// more keeps no place (it is its own, and a link in it is then refused by
// the handles, never followed).
func TestResolve_BoundsTheMissingComponents(t *testing.T) {
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink("real", link); err != nil {
		t.Fatal(err)
	}
	missing := func(n int) string { return strings.Repeat("/m", n) }
	for _, tc := range []struct {
		n     int
		place string
	}{
		{1, filepath.Join(base, "real") + missing(1)},
		{256, filepath.Join(base, "real") + missing(256)},
		{257, ""},
	} {
		c := capability.Resolve(capability.Capability{Name: "filesystem.read", Scope: link + missing(tc.n)})
		if c.Place != tc.place {
			t.Errorf("%d missing components: place %q; want %q", tc.n, c.Place, tc.place)
		}
	}
}

// Effective gives a scoped requirement the place of the longest grant
// covering it (a link below a granted link leads elsewhere); of two grants
// of the same scope made at different times (the policy's, and a per-call
// grant made after the link moved), the policy's.
func TestDecision_EffectivePlaceOfTheLongestGrant(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{"real", "other", "third"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a := filepath.Join(base, "a")
	if err := os.Symlink("real", a); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../other", filepath.Join(base, "real", "data")); err != nil {
		t.Fatal(err)
	}
	p, err := capability.NewPolicy(map[string][]capability.Capability{"alice": {
		capability.MustParse("filesystem.read:" + a),
		capability.MustParse("filesystem.read:" + a + "/data"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	req := []capability.Capability{capability.MustParse("filesystem.read:" + a + "/data/x")}
	d := p.Decide("alice", "t", req, nil, time.Now())
	if eff := d.Effective(); len(eff) != 1 || eff[0].Place != filepath.Join(base, "other", "x") {
		t.Errorf("Effective() = %+v; want the place of the longer grant, %s", eff, filepath.Join(base, "other", "x"))
	}

	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("third", a); err != nil {
		t.Fatal(err)
	}
	req = []capability.Capability{capability.MustParse("filesystem.read:" + a + "/y")}
	d = p.Decide("alice", "t", req, []capability.Capability{capability.MustParse("filesystem.read:" + a)}, time.Now())
	if len(d.Granted) != 2 || d.Granted[1].Place != filepath.Join(base, "third") {
		t.Fatalf("Granted = %+v; want the policy's grant and the per-call one, leading to third", d.Granted)
	}
	if eff := d.Effective(); len(eff) != 1 || eff[0].Place != filepath.Join(base, "real", "y") {
		t.Errorf("Effective() = %+v; want the policy's place, %s", eff, filepath.Join(base, "real", "y"))
	}
}
