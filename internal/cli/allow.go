package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
)

// runtimeCapabilities are the capabilities the runtime itself checks, on
// top of what the tools require.
var runtimeCapabilities = []string{"idempotency.bypass"}

// parseAllow is the one parser of --allow values (run, policy check, mcp).
// A mistake is refused rather than turned into a grant that means nothing:
//   - a name no tool requires (filesystem.raed): the error lists the known
//     names, those the tools of regs (default: the built-in tools) require
//     and idempotency.bypass;
//   - '*' anywhere: a capability without a scope already covers
//     everything, and '*' would be a literal path or command;
//   - a scope starting with '~' is expanded to the home directory (~ and
//     ~/...); ~user is refused.
//
// Relative filesystem scopes become absolute, so that "filesystem.read:."
// means the current directory.
func parseAllow(vals []string, regs ...*tools.Registry) ([]capability.Capability, error) {
	known, err := knownCapabilities(regs)
	if err != nil {
		return nil, err
	}
	out := make([]capability.Capability, 0, len(vals))
	for _, v := range vals {
		name, scope, scoped := strings.Cut(v, ":")
		if strings.Contains(v, "*") {
			return nil, fmt.Errorf("%q: '*' is not a wildcard: a capability without a scope (%s) covers everything, a scope names a path or a command", v, name)
		}
		if !slices.Contains(known, name) {
			return nil, fmt.Errorf("unknown capability %q; known: %s", name, strings.Join(known, ", "))
		}
		if scoped && strings.HasPrefix(scope, "~") {
			rest, ok := strings.CutPrefix(scope, "~")
			if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
				return nil, fmt.Errorf("%q: only ~ and ~/... are expanded (to your home directory); write the path of another user's directory", v)
			}
			home, err := os.UserHomeDir()
			if err != nil {
				return nil, fmt.Errorf("%q: cannot expand ~: %v", v, err)
			}
			scope = home + rest
			v = name + ":" + scope
		}
		if scoped && strings.HasPrefix(name, "filesystem.") && scope != "" && !filepath.IsAbs(scope) {
			abs, err := filepath.Abs(scope)
			if err != nil {
				return nil, err
			}
			v = name + ":" + abs
		}
		c, err := capability.Parse(v)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// knownCapabilities are the capability names a grant can mean something
// for: those the tools of regs (default: the built-in tools) require, and
// the runtime's own, sorted.
func knownCapabilities(regs []*tools.Registry) ([]string, error) {
	if len(regs) == 0 {
		reg, err := builtinRegistry()
		if err != nil {
			return nil, err
		}
		regs = []*tools.Registry{reg}
	}
	known := slices.Clone(runtimeCapabilities)
	for _, reg := range regs {
		if len(reg.MCPServers()) > 0 {
			// Known even when no tool of the servers was accepted: the
			// grant is right, what the tools were left out for is the
			// registry's warning.
			known = append(known, "mcp.call")
		}
		for _, e := range reg.Entries() {
			d := e.Declaration()
			for _, c := range d.MayRequire() {
				known = append(known, c.Name)
			}
		}
	}
	slices.Sort(known)
	return slices.Compact(known), nil
}

// warnBroadGrants says on w which grants cover everything of their kind: an
// unscoped filesystem grant reaches every file the user can, an unscoped
// process.exec runs any program.
func warnBroadGrants(w io.Writer, grants []capability.Capability) {
	for _, c := range grants {
		if c.Scope != "" {
			continue
		}
		switch {
		case c.IsFilesystem():
			fmt.Fprintf(w, "toolgate: warning: --allow %s has no scope: it covers every file this user can reach; scope it to a directory (%s:.)\n", c.Name, c.Name)
		case c.Name == "process.exec":
			fmt.Fprintf(w, "toolgate: warning: --allow %s has no scope: it lets the call run any program; scope it to a command (%s:git)\n", c.Name, c.Name)
		}
	}
}
