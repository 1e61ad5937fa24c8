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
		if err := checkGrant(v, known); err != nil {
			return nil, err
		}
		name, scope, scoped := strings.Cut(v, ":")
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

// checkGrant refuses a grant that would mean nothing: a name no tool
// requires (not in known), with the known name it is likely a typo of, and
// '*' anywhere. It is the one check of a grant, for --allow and for the
// grants of a policy file alike.
func checkGrant(v string, known []string) error {
	name, _, _ := strings.Cut(v, ":")
	if strings.Contains(v, "*") {
		return fmt.Errorf("%q: '*' is not a wildcard: a capability without a scope (%s) covers everything, a scope names a path or a command", v, name)
	}
	if known != nil && !slices.Contains(known, name) {
		if near := nearest(name, known); near != "" {
			return fmt.Errorf("unknown capability %q; did you mean %s? known: %s", name, near, strings.Join(known, ", "))
		}
		return fmt.Errorf("unknown capability %q; known: %s", name, strings.Join(known, ", "))
	}
	return nil
}

// nearest is the name of known closest to name by edit distance, when it
// is close enough to be a typo of it (at most a third of its letters
// differ); "" otherwise.
func nearest(name string, known []string) string {
	best, bestD := "", len(name)/3+1
	for _, k := range known {
		if d := editDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Damerau-Levenshtein distance (optimal string
// alignment) between a and b, in bytes: a swap of two neighbours counts
// one.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
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
