package tools

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/rules"
)

// Decision is RFC-0001 rule 2's decision for one call, as
// [Declaration.Decide] makes it: the capability decision on what the input
// requires, what the tool's handles then reach, and where each filesystem
// path of the input leads.
type Decision struct {
	capability.Decision
	// Reach is what the call's handles get once it is allowed: what it
	// may reach (see [Declaration.RequiredFor]), narrowed to the grants
	// that met its requirements.
	Reach []capability.Capability
	// Paths are the input's filesystem paths (one per filesystem input
	// capability whose field the input gives), in declaration order.
	Paths []PathCheck
	// Err is the *AccessError of a path that the tool's handle would
	// refuse (it leads out of the grant that covers it: by a symbolic
	// link, or through a granted place that is a link now). The decision
	// is then denied, with Reason saying so.
	Err error
	// InputErr says why the input names no scope of an input capability
	// (see [Declaration.RequiredFor]); the decision is then denied, with
	// Reason saying so.
	InputErr error
	// Rules is the decision of the policy's Cedar policies over the call's
	// arguments (capability.Policy.Rules), nil when it has none. A Deny
	// denies the call, with Reason saying which policies forbid it; an
	// Approval leaves it allowed only as an approved intent (see
	// [Decision.NeedsApproval]).
	Rules *rules.Decision
}

// NeedsApproval reports whether the call runs only as an approved intent:
// its tool requires approval, or a Cedar policy asks for a person.
func (d Decision) NeedsApproval(decl *Declaration) bool {
	return decl.RequiresApproval || (d.Rules != nil && d.Rules.Effect == rules.Approval)
}

// Caller is who makes a call, as the policies over its arguments see it:
// the principal, and its OAuth token's scopes and grant claims, if any.
type Caller struct {
	Principal string
	Scopes    []string
	Claims    map[string][]string
}

// PathCheck is where a filesystem path given in a call's input leads, as
// the tool's handle reaches it.
type PathCheck struct {
	Capability string `json:"capability"` // the capability's name, such as filesystem.read
	Field      string `json:"field"`      // the input field, such as path or cwd
	Path       string `json:"path"`       // absolute and cleaned (".." resolved), as the decision names it
	// Leads is where Path leads, its symbolic links followed now (those
	// of a part that does not exist yet as far as it exists).
	Leads string `json:"leads"`
	// Kind is what is there now: file, directory, missing, symlink,
	// other, or unreachable with the reason.
	Kind string `json:"kind"`
	// DirMissing is set when the directory that would hold Path does not
	// exist either (a write there fails).
	DirMissing bool `json:"dirMissing,omitempty"`
	// Grant is the grant Path lies inside, the one its handle opens it
	// from ("" when none covers it).
	Grant string `json:"grant,omitempty"`
	// Outside are, when Path lies inside no grant of its capability or
	// leads out of the one it lies inside, the grants of that capability
	// the principal holds: the places it falls outside of.
	Outside []string `json:"outside,omitempty"`
	// Refused says why the handle would refuse Path ("" when it would
	// not).
	Refused string `json:"refused,omitempty"`
}

// Decide makes rule 2's decision for a call of d with input (valid against
// the input schema) by principal under policy plus extra (grants for this
// call only), relative paths taken from workDir ("": the process's working
// directory), at the time at; tool names the tool in the decision. It is
// the one decision: the runtime makes it before a call executes, and
// `toolgate policy check --input`, the web UI's intent page and the MCP
// server's checks explain it.
//
// The capability decision is on what the input requires
// ([Declaration.RequiredFor]): a filesystem path given in the input must
// lie, cleaned and made absolute, inside a grant. Then each such path is
// looked up as the tool's handle will look it up ([Env.FS]), below the
// place of the longest grant covering it, following symbolic links only
// while they stay inside: a path that leads out of it is denied here, with
// Err, before anything runs. A path that does not exist is no denial (the
// tool fails on it as it would); its PathCheck says "missing".
func (d *Declaration) Decide(policy *capability.Policy, principal, tool string, input json.RawMessage, extra []capability.Capability, workDir string, at time.Time) Decision {
	return d.DecideFor(policy, Caller{Principal: principal}, tool, input, extra, workDir, at)
}

// DecideFor is [Declaration.Decide] for a caller whose OAuth token's
// scopes and claims the policy's Cedar policies see. It is the one
// decision: Decide is it for a caller without a token.
//
// With Cedar policies (capability.Policy.Rules), the call is also a Cedar
// request (package rules) on the validated input: a call they forbid is
// denied even though its capabilities are granted (Reason names the
// policies), and one they ask a person about is allowed only as an
// approved intent (Rules.Effect is rules.Approval). They never grant.
func (d *Declaration) DecideFor(policy *capability.Policy, caller Caller, tool string, input json.RawMessage, extra []capability.Capability, workDir string, at time.Time) Decision {
	if policy == nil {
		policy, _ = capability.NewPolicy(nil)
	}
	principal := caller.Principal
	required, reach, rerr := d.RequiredFor(input, workDir)
	out := Decision{Decision: policy.DecideIn(workDir, principal, tool, required, extra, at)}
	if set := policy.Rules(); set != nil && policy.Err() == nil && rerr == nil {
		rd := set.Decide(rules.Request{Principal: principal, Scopes: caller.Scopes, Claims: caller.Claims, Tool: d.ID, Version: d.Version, Input: input})
		out.Rules = &rd
		if rd.Effect == rules.Deny && out.Allowed() {
			out.Reason = rd.Reason + " (Cedar policy set " + rd.Revision + ")"
		}
	}
	if rerr != nil {
		out.InputErr = rerr
		if out.Reason == "" {
			out.Reason = rerr.Error()
		}
		return out
	}
	out.Reach = capability.Decision{Required: reach, Granted: out.Granted}.Effective()
	if policy.Err() != nil {
		return out
	}
	paths := d.inputPaths(input, workDir)
	if len(paths) == 0 {
		return out
	}
	held := slices.Concat(policy.Grants(principal), capability.ResolveAll(extra))
	for _, pc := range paths {
		var outside []string
		for _, g := range held {
			if g.Name == pc.Capability {
				outside = append(outside, g.String())
			}
		}
		missing := slices.Contains(out.Missing, capability.Capability{Name: pc.Capability, Scope: pc.Path})
		if g, ok := (&Env{Grants: held, WorkDir: workDir}).FS(pc.Capability).covering(pc.Path); ok && !missing {
			pc.Grant = g.String() // the grant it lies inside, allowed or not
		}
		if out.Allowed() && out.Err == nil {
			pc.check(out.Reach, workDir)
			if pc.Refused != "" {
				out.Err = &AccessError{Capability: pc.Capability + ":" + pc.Path, Reason: pc.Refused}
				out.Reason = pc.Capability + ":" + pc.Path + " " + pc.Refused
			}
		}
		if pc.Grant == "" || pc.Refused != "" {
			pc.Outside = outside
		}
		out.Paths = append(out.Paths, pc)
	}
	return out
}

// pathCapability is the input capability of a built-in file tool: its
// path, decided before the call runs (see [Declaration.Decide]).
func pathCapability(name string) []InputCapability {
	return []InputCapability{{Name: name, ScopeFrom: "path"}}
}

// inputPaths are the filesystem paths input gives for d's input
// capabilities, made absolute and described (where they lead, what is
// there), not yet checked against grants.
func (d *Declaration) inputPaths(input json.RawMessage, workDir string) []PathCheck {
	if !slices.ContainsFunc(d.InputCapabilities, func(ic InputCapability) bool { return strings.HasPrefix(ic.Name, "filesystem.") }) {
		return nil
	}
	var in map[string]json.RawMessage
	if json.Unmarshal(input, &in) != nil {
		return nil
	}
	var out []PathCheck
	for _, ic := range d.InputCapabilities {
		var v string
		if !strings.HasPrefix(ic.Name, "filesystem.") || json.Unmarshal(in[ic.ScopeFrom], &v) != nil || v == "" {
			continue
		}
		abs, err := absPath(v, workDir)
		if err != nil {
			continue
		}
		pc := PathCheck{Capability: ic.Name, Field: ic.ScopeFrom, Path: abs, Leads: leadsTo(abs)}
		pc.Kind, pc.DirMissing = kindOf(pc.Leads)
		out = append(out, pc)
	}
	return out
}

// check looks pc's path up as a handle of its capability with grants
// would, setting Grant, and Refused when the handle would refuse it.
func (pc *PathCheck) check(grants []capability.Capability, workDir string) {
	env := &Env{Grants: grants, WorkDir: workDir}
	defer env.Close()
	f := env.FS(pc.Capability)
	if g, ok := f.covering(pc.Path); ok {
		pc.Grant = g.String()
	}
	_, err := f.Stat(pc.Path)
	var ae *AccessError
	switch {
	case errors.As(err, &ae):
		pc.Refused = ae.Reason
		switch {
		case pc.Grant == "":
			pc.Refused = "is outside the granted places"
		case strings.HasPrefix(ae.Reason, "path escapes") && f.inside(pc.Leads):
			pc.Refused = "passes through a symbolic link to an absolute path, which a handle never follows (a link below a grant is followed only while it stays inside, by a relative path)"
		case strings.HasPrefix(ae.Reason, "path escapes"):
			pc.Refused = "leads to " + pc.Leads + ", out of " + pc.Grant + " (by a symbolic link)"
		}
	case err != nil && !errors.Is(err, fs.ErrNotExist) && pc.Kind != "missing":
		pc.Kind = "unreachable: " + strings.TrimPrefix(err.Error(), "tools: ")
	}
}

// covering is the grant f's handle opens path from: the one with the
// longest scope (or place) covering it, as resolve chooses it.
func (f *FS) covering(path string) (capability.Capability, bool) {
	abs, err := f.abs(path)
	if err != nil {
		return capability.Capability{}, false
	}
	var best capability.Capability
	n, found := -1, false
	for _, g := range f.env.Grants {
		if g.Name != f.capName {
			continue
		}
		for _, s := range []string{g.Scope, g.Place} {
			if g.Scope == "" {
				s = string(filepath.Separator)
			} else if s == "" {
				continue
			} else if s, err = f.abs(s); err != nil {
				continue
			}
			if capability.ScopeCovers(s, abs) && len(s) > n {
				best, n, found = g, len(s), true
			}
		}
	}
	return best, found
}

// inside reports whether the absolute path p lies inside the place of the
// grant f's handle would open it from.
func (f *FS) inside(p string) bool {
	g, ok := f.covering(p)
	return ok && capability.ScopeCovers(filepath.Clean(g.PlaceOf()), p)
}

// leadsTo is where the absolute path p leads now: its symbolic links
// followed, a dangling one included, as far as its parts exist; the rest
// appended as written.
func leadsTo(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	parts := strings.Split(strings.Trim(p, "/"), "/")
	cur := "/"
	for links := 0; len(parts) > 0; {
		next := filepath.Join(cur, parts[0])
		fi, err := os.Lstat(next)
		if err != nil {
			return filepath.Join(append([]string{cur}, parts...)...)
		}
		parts = parts[1:]
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		target, err := os.Readlink(next)
		if links++; err != nil || links > 40 {
			return filepath.Join(append([]string{next}, parts...)...)
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(cur, target)
		}
		parts = append(strings.Split(strings.Trim(filepath.Clean(target), "/"), "/"), parts...)
		cur = "/"
	}
	return cur
}

// kindOf says what is at p now, and whether the directory that would hold
// p is missing too.
func kindOf(p string) (kind string, dirMissing bool) {
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		_, derr := os.Stat(filepath.Dir(p))
		return "missing", errors.Is(derr, fs.ErrNotExist)
	case err != nil:
		return "unreachable: " + err.Error(), false
	case fi.Mode()&fs.ModeSymlink != 0:
		return "symlink", false
	case fi.IsDir():
		return "directory", false
	case fi.Mode().IsRegular():
		return "file", false
	}
	return "other", false
}
