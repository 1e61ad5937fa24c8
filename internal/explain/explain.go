// Package explain explains a capability decision: whether a principal may
// run a tool under a policy, which grant meets each requirement, what is
// missing, and where the filesystem capabilities the tool's handles would
// get lead. `toolgate policy check` prints it; the web UI's intent page
// shows it.
package explain

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
)

// Place is where a filesystem capability the handles would expose leads,
// resolved now (see capability.Resolve).
type Place struct {
	Capability string `json:"capability"` // as granted, e.g. "filesystem.read:/srv/link"
	Place      string `json:"place"`      // the absolute, link-free path the handle opens
	Kind       string `json:"kind"`       // what is there now: directory, file, missing, symlink (refused), other
}

// Requirement is one capability the tool requires and the grants that
// meet it (none: missing).
type Requirement struct {
	Capability string
	MetBy      []string
}

// Decision is an explained decision. Its JSON form is what `toolgate
// policy check --json` prints.
type Decision struct {
	Allowed        bool      `json:"allowed"`
	DecisionID     string    `json:"decisionId"`
	Principal      string    `json:"principal"`
	Tool           string    `json:"tool"`
	Required       []string  `json:"required"`
	Granted        []string  `json:"granted"`
	Missing        []string  `json:"missing"`
	Effective      []string  `json:"effective"`
	Places         []Place   `json:"places"`
	PolicyRevision string    `json:"policyRevision"`
	Reason         string    `json:"reason,omitempty"`
	At             time.Time `json:"at"`

	// Requirements are Required with the grants (held, and the extra
	// ones) that meet each, in order.
	Requirements []Requirement `json:"-"`
}

// Explain decides whether principal may run decl under policy (nil: a
// policy that grants nothing) with extra grants added for the call, at
// now, and explains it.
func Explain(policy *capability.Policy, principal string, decl tools.Declaration, extra []capability.Capability, now time.Time) Decision {
	if policy == nil {
		policy, _ = capability.NewPolicy(nil)
	}
	d := policy.Decide(principal, decl.Key(), decl.RequiredCapabilities, extra, now)
	v := Decision{
		Allowed: d.Allowed(), DecisionID: d.ID, Principal: d.Principal, Tool: d.Tool,
		Required: capability.Strings(d.Required), Granted: capability.Strings(d.Granted),
		Missing: capability.Strings(d.Missing), PolicyRevision: d.PolicyRevision, Reason: d.Reason, At: d.At,
		Effective: []string{}, Places: []Place{},
	}
	if d.Allowed() {
		v.Effective = capability.Strings(d.Effective())
		v.Places = Places(d.Effective())
	}
	grants := append(append([]capability.Capability{}, policy.Grants(principal)...), extra...)
	for _, r := range v.Required {
		req := Requirement{Capability: r}
		if c, err := capability.Parse(r); err == nil && v.Reason == "" {
			for _, gr := range grants {
				if gr.Covers(c) {
					req.MetBy = append(req.MetBy, gr.String())
				}
			}
		}
		v.Requirements = append(v.Requirements, req)
	}
	return v
}

// Places describes the places of the filesystem capabilities in cs.
func Places(cs []capability.Capability) []Place {
	out := []Place{}
	for _, c := range cs {
		if !c.IsFilesystem() {
			continue
		}
		p := c.PlaceOf()
		if p == "" {
			p = "/" // an unscoped grant: anything, from the root
		}
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		kind := "other"
		switch fi, err := os.Lstat(p); {
		case errors.Is(err, fs.ErrNotExist):
			kind = "missing"
		case err != nil:
			kind = "unreadable: " + err.Error()
		case fi.Mode()&fs.ModeSymlink != 0:
			kind = "symlink (refused: it changed since it was resolved)"
		case fi.IsDir():
			kind = "directory"
		case fi.Mode().IsRegular():
			kind = "file"
		}
		out = append(out, Place{Capability: c.String(), Place: p, Kind: kind})
	}
	return out
}
