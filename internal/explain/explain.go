// Package explain explains a capability decision: whether a principal may
// run a tool under a policy, which grant meets each requirement, what is
// missing, and where the filesystem capabilities the tool's handles would
// get lead. `toolgate policy check` prints it; the web UI's intent page
// shows it.
package explain

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/rules"
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

	// AlsoRequired are, for a call explained without its input (see
	// Call), the capabilities an input could add: one per input
	// capability of the tool, required when the input gives its field.
	AlsoRequired []AlsoRequired `json:"alsoRequired,omitempty"`
	// RequiresApproval is set for a call that runs only as an approved
	// intent: its tool requires approval, or a Cedar policy asks a person
	// about its arguments. Whatever the grants, a plain call is denied.
	RequiresApproval bool `json:"requiresApproval,omitempty"`

	// Paths are, for a call explained with its input, where each
	// filesystem path the input gives leads (tools.PathCheck): the
	// cleaned absolute path, where its links lead, what is there, the
	// grant it lies inside or those it falls outside of.
	Paths []tools.PathCheck `json:"paths,omitempty"`

	// Cedar is the decision of the policy's Cedar policies over the
	// call's arguments (package rules): its effect (allow, deny,
	// approval), the ids of the policies that determined it, the approver
	// groups and the policy set's revision. Nil without Cedar policies,
	// and for a call explained without its input (they decide on it).
	Cedar *rules.Decision `json:"cedar,omitempty"`
	// CedarPolicySet is the revision of the policy's Cedar policies, when
	// it has any.
	CedarPolicySet string `json:"cedarPolicySet,omitempty"`

	// Requirements are Required with the grants (held, and the extra
	// ones) that meet each, in order.
	Requirements []Requirement `json:"-"`
}

// AlsoRequired is a capability a call requires when its input gives a
// field (tools.InputCapability), scoped by the field's value.
type AlsoRequired struct {
	Capability string `json:"capability"` // "filesystem.read:{cwd}"
	Field      string `json:"field"`
}

// Call explains the decision Execute makes at AUTHORIZED (rule 2) for a
// call of decl by principal with input (valid against the tool's input
// schema), under policy plus extra, relative paths of the input taken
// from workDir ("": the working directory). A nil input is none given:
// the capabilities an input could add are listed in AlsoRequired, not
// decided. message words an error for the user (runtime.Message).
func Call(policy *capability.Policy, principal string, decl tools.Declaration, input json.RawMessage, extra []capability.Capability, workDir string, now time.Time, message func(error) string) Decision {
	if policy == nil {
		policy, _ = capability.NewPolicy(nil)
	}
	if input == nil {
		v := Explain(policy, principal, decl, extra, now)
		for _, ic := range decl.InputCapabilities {
			v.AlsoRequired = append(v.AlsoRequired, AlsoRequired{Capability: ic.Name + ":{" + ic.ScopeFrom + "}", Field: ic.ScopeFrom})
		}
		v.RequiresApproval = decl.RequiresApproval
		if set := policy.Rules(); set != nil {
			v.CedarPolicySet = set.Revision()
		}
		return v
	}
	return CallFor(policy, tools.Caller{Principal: principal}, decl, input, extra, workDir, now, message)
}

// CallFor is [Call] with its input, for a caller whose OAuth token's
// scopes and claims the policy's Cedar policies see.
func CallFor(policy *capability.Policy, caller tools.Caller, decl tools.Declaration, input json.RawMessage, extra []capability.Capability, workDir string, now time.Time, message func(error) string) Decision {
	if policy == nil {
		policy, _ = capability.NewPolicy(nil)
	}
	// The runtime's decision (tools.Declaration.DecideFor), explained.
	td := decl.DecideFor(policy, caller, decl.Key(), input, extra, workDir, now)
	v := explained(policy, td.Decision, extra)
	v.RequiresApproval = td.NeedsApproval(&decl)
	v.Cedar = td.Rules
	if set := policy.Rules(); set != nil {
		v.CedarPolicySet = set.Revision()
	}
	v.Paths = td.Paths
	switch {
	case td.Err != nil:
		v.Reason = message(td.Err)
	case td.InputErr != nil:
		v.Reason = message(td.InputErr)
	}
	if v.Allowed {
		// The handles get what the call may reach, narrowed to the grants
		// that met its requirements, as Execute gives them.
		v.Effective, v.Places = capability.Strings(td.Reach), Places(td.Reach)
	}
	return v
}

// Explain decides whether principal may run decl under policy (nil: a
// policy that grants nothing) with extra grants added for the call, at
// now, and explains it.
func Explain(policy *capability.Policy, principal string, decl tools.Declaration, extra []capability.Capability, now time.Time) Decision {
	if policy == nil {
		policy, _ = capability.NewPolicy(nil)
	}
	return explained(policy, policy.Decide(principal, decl.Key(), decl.RequiredCapabilities, extra, now), extra)
}

// explained explains d, a decision of policy with extra grants.
func explained(policy *capability.Policy, d capability.Decision, extra []capability.Capability) Decision {
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
	grants := append(append([]capability.Capability{}, policy.Grants(d.Principal)...), capability.ResolveAll(extra)...)
	for _, r := range v.Required {
		req := Requirement{Capability: r}
		if c, err := capability.Parse(r); err == nil && policy.Err() == nil {
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
