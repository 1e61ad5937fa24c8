package tools

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/mod/semver"
)

// Registry holds tools keyed by id and version. Tools are registered while
// the program starts; then the registry is frozen and becomes read-only,
// and only then can tools be looked up. A Registry is a value: there is no
// package-level registry.
type Registry struct {
	mu     sync.Mutex
	frozen atomic.Bool
	tools  map[string][]*Entry // by id, versions ascending
	large  *largeGate          // shared by the entries; made by the first Register
	// servers are the upstream MCP servers the registry file declares.
	servers []MCPServer
}

// MCPServers returns the upstream MCP servers the registry file declares
// (mcp_servers), whether or not any of their tools was registered.
func (r *Registry) MCPServers() []MCPServer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.servers)
}

// largeValue is the size from which a value the fast path cannot prove
// valid is decoded in full only under the registry's largeGate: decoding
// builds a tree of 20 to 80 times the value's size, so many large invalid
// values at once would hold many times their size in memory.
const largeValue = 64 << 10

// largeSlots is how many values over largeValue are decoded in full at
// once, per registry; the others wait their turn.
const largeSlots = 2

// largeGate bounds the full decodes of large values.
type largeGate struct {
	slots        chan struct{}
	active, peak atomic.Int32 // for tests: decodes in progress, and the most at once
}

func (g *largeGate) enter() {
	g.slots <- struct{}{}
	n := g.active.Add(1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
}

func (g *largeGate) leave() {
	g.active.Add(-1)
	<-g.slots
}

// NewRegistry returns an empty, unfrozen registry. The zero Registry is
// ready to use too.
func NewRegistry() *Registry { return &Registry{} }

// Entry is a registered tool with its compiled schemas.
type Entry struct {
	decl   Declaration
	tool   Tool
	input  *compiled
	output *compiled
	large  *largeGate
	// warnings are what RFC-0001 6.3 finds in an upstream tool's schemas
	// (see UpstreamSchemas), one line each.
	warnings []string
}

// Warnings returns what RFC-0001 6.3 finds in the schemas of a tool that
// implements UpstreamSchemas (without strict schemas), one line each
// ("inputSchema /properties/path/description: missing; ..."); none for
// another tool.
func (e *Entry) Warnings() []string { return slices.Clone(e.warnings) }

// Declaration returns a copy of the declaration taken at registration.
func (e *Entry) Declaration() Declaration { return e.decl.clone() }

// Tool returns the registered tool.
func (e *Entry) Tool() Tool { return e.tool }

// ValidateInput checks raw against the input schema. It returns a
// *ValueError when raw is not one JSON value or does not match.
//
// A value over 64 KiB that the fast path cannot prove valid is decoded in
// full (a tree of 20 to 80 times its size) only two at a time per
// registry: concurrent large invalid inputs wait their turn rather than
// hold many times their size in memory at once.
func (e *Entry) ValidateInput(raw []byte) error {
	return e.validate(e.input, "input", raw)
}

// ValidateOutput checks raw against the output schema, as ValidateInput.
func (e *Entry) ValidateOutput(raw []byte) error {
	return e.validate(e.output, "output", raw)
}

func (e *Entry) validate(s *compiled, which string, raw []byte) error {
	if s.fastValid(raw) {
		return nil
	}
	if len(raw) > largeValue && e.large != nil {
		e.large.enter()
		defer e.large.leave()
	}
	_, err := validateFull(s, which, raw)
	return err
}

// Register validates t's declaration, lints and compiles both schemas, and
// adds t. The schemas of a tool that implements UpstreamSchemas are
// compiled in the dialect they declare, and the lint's findings are kept
// as its entry's Warnings unless it asks for strict schemas. It returns a *DeclarationError or *SchemaError (both wrapping
// ErrInvalidDeclaration), ErrDuplicate, or ErrFrozen; on error nothing is
// added.
func (r *Registry) Register(t Tool) error {
	if t == nil {
		return &DeclarationError{Tool: "<nil>", Field: "tool", Reason: "nil Tool"}
	}
	decl := t.Declaration().clone()
	if err := decl.Validate(); err != nil {
		return err
	}
	var in, out *compiled
	var warnings []string
	if u, ok := t.(UpstreamSchemas); ok {
		strict := u.StrictSchemas()
		var win, wout []string
		var err error
		if in, win, err = compileUpstream(decl.Key(), "inputSchema", decl.InputSchema, strict); err != nil {
			return err
		}
		if out, wout, err = compileUpstream(decl.Key(), "outputSchema", decl.OutputSchema, strict); err != nil {
			return err
		}
		warnings = append(win, wout...)
	} else {
		var err error
		if in, err = compileSchema(decl.Key(), "inputSchema", decl.InputSchema); err != nil {
			return err
		}
		if out, err = compileSchema(decl.Key(), "outputSchema", decl.OutputSchema); err != nil {
			return err
		}
	}
	if err := decl.checkInputCapabilities(); err != nil {
		return err
	}
	if tc, ok := t.(typeChecker); ok {
		if err := tc.checkTypes(); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.frozen.Load() {
		return fmt.Errorf("%w: cannot register %s", ErrFrozen, decl.Key())
	}
	versions := r.tools[decl.ID]
	for _, e := range versions {
		if compareVersions(e.decl.Version, decl.Version) == 0 { // 1.0.0 and 1.0.0+build are one version
			return fmt.Errorf("%w: %s (registered as %s)", ErrDuplicate, decl.Key(), e.decl.Version)
		}
	}
	if r.tools == nil {
		r.tools = make(map[string][]*Entry)
	}
	if r.large == nil {
		r.large = &largeGate{slots: make(chan struct{}, largeSlots)}
	}
	versions = append(versions, &Entry{decl: decl, tool: t, input: in, output: out, large: r.large, warnings: warnings})
	slices.SortFunc(versions, func(a, b *Entry) int { return compareVersions(a.decl.Version, b.decl.Version) })
	r.tools[decl.ID] = versions
	return nil
}

// Freeze makes the registry read-only. It is idempotent.
func (r *Registry) Freeze() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frozen.Store(true)
}

// Frozen reports whether Freeze has been called.
func (r *Registry) Frozen() bool { return r.frozen.Load() }

// has reports whether any version of id is registered; the registry may
// not be frozen yet.
func (r *Registry) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.tools[id]) > 0
}

// Lookup returns the tool id at version, or when version is "" at its
// highest release version (a pre-release only if it has nothing else). It
// returns ErrNotFrozen, or an error wrapping
// ErrToolNotFound or ErrVersionNotFound.
func (r *Registry) Lookup(id, version string) (*Entry, error) {
	if !r.frozen.Load() {
		return nil, ErrNotFrozen
	}
	versions := r.tools[id]
	if len(versions) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrToolNotFound, id)
	}
	if version == "" {
		for i := len(versions) - 1; i >= 0; i-- {
			if semver.Prerelease("v"+versions[i].decl.Version) == "" {
				return versions[i], nil
			}
		}
		return versions[len(versions)-1], nil
	}
	for _, e := range versions {
		if e.decl.Version == version {
			return e, nil
		}
	}
	have := make([]string, len(versions))
	for i, e := range versions {
		have[i] = e.decl.Version
	}
	return nil, fmt.Errorf("%w: %s@%s (registered: %s)", ErrVersionNotFound, id, version, strings.Join(have, ", "))
}

// Entries returns every registered tool, by id then version.
func (r *Registry) Entries() []*Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.tools))
	for id := range r.tools {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []*Entry
	for _, id := range ids {
		out = append(out, r.tools[id]...)
	}
	return out
}

// MarshalJSON encodes the declaration (for listings and `toolgate describe`).
func (e *Entry) MarshalJSON() ([]byte, error) { return json.Marshal(e.decl) }
