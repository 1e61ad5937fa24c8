package capability

import (
	"path/filepath"
	"strings"
)

// IsFilesystem reports whether c is a filesystem capability
// (filesystem.read, filesystem.write, ...), whose scope is a path.
func (c Capability) IsFilesystem() bool { return strings.HasPrefix(c.Name, "filesystem.") }

// Resolve returns c with its place resolved: for a filesystem grant whose
// scope is an absolute path, every symbolic link in the scope is followed
// now, once, and Place is set to where the path leads when that differs
// from the scope. Where the path does not exist yet, the part that exists
// is resolved and the rest appended as written, for up to 256 components
// that do not exist; a scope with more is left without a place (so a link
// in it is refused by the handles, not followed). Any other capability, a
// relative scope and a grant already resolved are returned as they are.
//
// A grant names a place, and this is when the place is fixed: a [Policy]
// resolves its grants when it is built, and [Policy.Decide] the grants
// given for one decision. The handles of the tools package then reach the
// place by that link-free path and follow no link in it, so a link swapped
// in later, for the granted file or directory or any directory above it,
// is refused rather than followed.
func Resolve(c Capability) Capability {
	if !c.IsFilesystem() || c.Place != "" || !filepath.IsAbs(c.Scope) {
		return c
	}
	scope := filepath.Clean(c.Scope)
	if p := resolvePath(scope, 0); p != scope {
		c.Place = p
	}
	return c
}

// ResolveAll is [Resolve] of each capability, in a new slice.
func ResolveAll(cs []Capability) []Capability {
	if cs == nil {
		return nil
	}
	out := make([]Capability, len(cs))
	for i, c := range cs {
		out[i] = Resolve(c)
	}
	return out
}

// PlaceOf returns where a filesystem grant leads: its Place when it was
// resolved elsewhere, else its scope.
func (c Capability) PlaceOf() string {
	if c.Place != "" {
		return c.Place
	}
	return c.Scope
}

// resolvePath follows the symbolic links of the absolute path p; where p
// does not exist, it resolves its longest existing parent and appends the
// rest. depth bounds the recursion (one level per missing component).
func resolvePath(p string, depth int) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	dir := filepath.Dir(p)
	if dir == p || depth > 255 {
		return p
	}
	return filepath.Join(resolvePath(dir, depth+1), filepath.Base(p))
}

// narrow returns req, a scoped requirement covered by the grant g, with
// the place it reaches below g's place: the part of req's scope below g's
// scope, appended to g's place.
func narrow(req, g Capability) Capability {
	if g.Place == "" || req.Scope == g.Scope {
		req.Place = g.Place
		return req
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(req.Scope, g.Scope), "/")
	req.Place = filepath.Join(g.Place, rest)
	return req
}
