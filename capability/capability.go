package capability

import (
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Capability is a capability name with an optional scope.
type Capability struct {
	Name  string // dotted lowercase name, e.g. "filesystem.read"
	Scope string // optional; "" means unscoped
	// Place is where a filesystem grant's scope led when the grant was made
	// (see [Resolve]), set only when its symbolic links lead elsewhere than
	// the scope as written; "" means the scope is its own place. Requests
	// are still named by the scope (or the place); the tools' handles open
	// the place, following no link in it. It is not part of String, so it
	// is not parsed, stored or compared by Covers.
	Place string
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)

// Parse parses "name" or "name:scope". Absolute path scopes are cleaned;
// scopes with ".." elements, whitespace or control characters are refused.
// Errors wrap ErrInvalid.
func Parse(s string) (Capability, error) {
	name, scope, hasScope := strings.Cut(s, ":")
	if !nameRE.MatchString(name) {
		return Capability{}, fmt.Errorf("%w %q: name must be dotted lowercase words such as filesystem.read", ErrInvalid, s)
	}
	if !hasScope {
		return Capability{Name: name}, nil
	}
	if scope == "" {
		return Capability{}, fmt.Errorf("%w %q: empty scope after ':'", ErrInvalid, s)
	}
	if strings.ContainsFunc(scope, spaceOrControl) {
		return Capability{}, fmt.Errorf("%w %q: scope contains whitespace or control characters", ErrInvalid, s)
	}
	if slices.Contains(strings.Split(scope, "/"), "..") {
		return Capability{}, fmt.Errorf("%w %q: scope must not contain '..'", ErrInvalid, s)
	}
	if strings.HasPrefix(scope, "/") {
		scope = path.Clean(scope)
	}
	return Capability{Name: name, Scope: scope}, nil
}

// ParseList parses each string; the first error is returned.
func ParseList(ss []string) ([]Capability, error) {
	out := make([]Capability, 0, len(ss))
	for _, s := range ss {
		c, err := Parse(s)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// MustParse is Parse for literals known to be valid; it panics otherwise.
func MustParse(s string) Capability {
	c, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return c
}

// String returns "name" or "name:scope".
func (c Capability) String() string {
	if c.Scope == "" {
		return c.Name
	}
	return c.Name + ":" + c.Scope
}

// MarshalText encodes c as its String form.
func (c Capability) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText parses the String form.
func (c *Capability) UnmarshalText(b []byte) error {
	p, err := Parse(string(b))
	if err != nil {
		return err
	}
	*c = p
	return nil
}

// Covers reports whether c, held as a grant, meets the requirement req.
func (c Capability) Covers(req Capability) bool {
	if c.Name != req.Name {
		return false
	}
	if c.Scope == "" || req.Scope == "" {
		return true
	}
	return ScopeCovers(c.Scope, req.Scope)
}

// coversFrom is Covers for a grant whose relative filesystem scope
// (filesystem.read:data) is taken from the directory base, as the tools'
// handles take it, when the requirement's scope is an absolute path.
func (c Capability) coversFrom(base string, req Capability) bool {
	if base != "" && c.IsFilesystem() && c.Scope != "" && !filepath.IsAbs(c.Scope) && filepath.IsAbs(req.Scope) {
		c.Scope = filepath.Join(base, c.Scope)
	}
	return c.Covers(req)
}

// ScopeCovers reports whether scope covers target: equal, or target lies
// below scope after a "/".
func ScopeCovers(scope, target string) bool {
	if scope == target {
		return true
	}
	if strings.HasSuffix(scope, "/") {
		return strings.HasPrefix(target, scope)
	}
	return strings.HasPrefix(target, scope+"/")
}

// Strings returns the String form of each capability.
func Strings(cs []Capability) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	return out
}

// Decision is the record of one authorization.
type Decision struct {
	ID             string // a random UUID, set by [Policy.Decide]
	Principal      string
	Tool           string
	Required       []Capability
	Granted        []Capability // the grants that met a requirement
	Missing        []Capability // requirements no grant met
	PolicyRevision string       // the [Policy.Revision] decided under, set by [Policy.Decide]
	Reason         string       // set when everything is denied regardless, e.g. the policy is unreadable
	At             time.Time
}

// Allowed reports whether nothing was missing and nothing denied
// everything.
func (d Decision) Allowed() bool { return len(d.Missing) == 0 && d.Reason == "" }

// Effective returns what a tool may reach once d allowed it: the
// requirements themselves, narrowed to the grants. A scoped requirement
// (filesystem.read:/srv/data) gives exactly its scope even when the grant
// is broader; an unscoped one (filesystem.read) gives the scopes of the
// grants that met it. So a tool reaches no more than it declared, and no
// more than the principal holds. A scoped requirement reaches the place of
// the longest grant covering it (see [Resolve]); of two covering grants of
// the same scope, made at different times and so perhaps leading to
// different places, the first in d.Granted: a policy's grant before one
// given for the decision alone.
func (d Decision) Effective() []Capability {
	var out []Capability
	add := func(c Capability) {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	for _, req := range d.Required {
		if req.Scope != "" {
			add(narrowed(req, d.Granted))
			continue
		}
		for _, g := range d.Granted {
			if g.Name == req.Name {
				add(g)
			}
		}
	}
	return out
}

// narrowed is req with the place of the longest grant covering it, the
// first of equally long ones.
func narrowed(req Capability, granted []Capability) Capability {
	var best *Capability
	for i, g := range granted {
		if g.Covers(req) && g.Scope != "" && (best == nil || len(g.Scope) > len(best.Scope)) {
			best = &granted[i]
		}
	}
	if best == nil {
		return req
	}
	return narrow(req, *best)
}

// Authorize decides whether grants meet every requirement. It denies by
// default: a requirement is met only by a grant that covers it.
func Authorize(principal, tool string, required, grants []Capability, at time.Time) Decision {
	return authorize("", principal, tool, required, grants, at)
}

// authorize is Authorize with the relative filesystem scopes of the grants
// taken from base (when it is not "").
func authorize(base, principal, tool string, required, grants []Capability, at time.Time) Decision {
	d := Decision{Principal: principal, Tool: tool, Required: slices.Clone(required), At: at}
	for _, req := range required {
		met := false
		for _, g := range grants {
			if g.coversFrom(base, req) {
				met = true
				if !slices.Contains(d.Granted, g) {
					d.Granted = append(d.Granted, g)
				}
			}
		}
		if !met {
			d.Missing = append(d.Missing, req)
		}
	}
	return d
}

// Scopes returns the scopes of the grants named name; ok is false when no
// grant of that name exists, and all is true when one of them is unscoped.
func Scopes(grants []Capability, name string) (scopes []string, all bool) {
	for _, g := range grants {
		if g.Name != name {
			continue
		}
		if g.Scope == "" {
			all = true
			continue
		}
		scopes = append(scopes, g.Scope)
	}
	return scopes, all
}
