package tools

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/semver"

	"github.com/toolgate/toolgate/capability"
)

// Declaration is a tool's declaration, RFC-0001 4.1. Its JSON form uses the
// RFC's field names.
type Declaration struct {
	ID                   string                  `json:"id"`
	Version              string                  `json:"version"` // semantic version, e.g. "1.0.0"
	Name                 string                  `json:"name"`
	Description          string                  `json:"description"`
	InputSchema          json.RawMessage         `json:"inputSchema"`
	OutputSchema         json.RawMessage         `json:"outputSchema"`
	RequiredCapabilities []capability.Capability `json:"requiredCapabilities"`
	// InputCapabilities are required by some calls only, with a scope taken
	// from the validated input: see [InputCapability]. A call requires
	// RequiredCapabilities and those of InputCapabilities whose field its
	// input gives ([Declaration.RequiredFor]).
	InputCapabilities []InputCapability `json:"inputCapabilities,omitempty"`
	ResourceLimits    ResourceLimits    `json:"resourceLimits"`
	Deterministic     bool              `json:"deterministic"`
	Idempotent        bool              `json:"idempotent"`
	// RequiresApproval means the tool runs only as an approved intent (a
	// human approved this exact invocation); any other call is DENIED.
	RequiresApproval bool `json:"requiresApproval,omitempty"`
}

// InputCapability is a capability that a call requires only when its input
// gives a field, scoped by that field's value: "filesystem.read with the
// scope of the input's cwd, when cwd is given". It is written
// "filesystem.read:{cwd}" (its String form, and the form registry files
// use).
//
// ScopeFrom names a top-level property of the input schema of type string.
// When the validated input has that property with a non-empty value, the
// call requires Name scoped by the value; otherwise it does not require
// it. A filesystem capability's value is a path: a relative one is taken
// from the runtime's working directory, and the path is cleaned, so the
// scope required is the absolute path the tool's handles will reach. Any
// other capability's value is its scope as given, and must be one that
// [capability.Parse] accepts (a value it refuses denies the call).
//
// The runtime decides on these in RFC-0001 5.1 rule 2 (AUTHORIZED, after
// VALIDATED): the input's scope must be covered by a grant, or the call is
// DENIED naming it, and the decision records exactly what that input
// required. At execution, the tool's handles reach the grants that met an
// input capability (confined by them as for an unscoped requirement), so a
// symbolic link below a grant is followed while it stays inside.
type InputCapability struct {
	Name      string `json:"name"`      // a capability name, such as filesystem.read
	ScopeFrom string `json:"scopeFrom"` // the input property whose value is the scope, such as cwd
}

// String returns "name:{field}".
func (c InputCapability) String() string { return c.Name + ":{" + c.ScopeFrom + "}" }

// ResourceLimits are a tool's execution constraints. Zero means "not
// limited" for every field but MaxExecutionTime, which every tool must set.
// In JSON, maxExecutionTime is in milliseconds and sizes in bytes, as in the
// RFC's appendix A.
type ResourceLimits struct {
	MaxExecutionTime time.Duration
	MaxMemory        int64 // bytes; enforced for process tools (see the runtime's documentation for in-process tools)
	MaxFileSize      int64 // bytes; enforced by the filesystem handle, and RLIMIT_FSIZE for processes
	MaxOutputBytes   int64 // bytes of encoded output
	// MaxConcurrent is how many attempts of this tool may execute at once,
	// within the runtime's global limit; 0 means only the global limit.
	// It is the tool's own constraint, so an invocation cannot change it.
	MaxConcurrent int
}

type limitsJSON struct {
	MaxExecutionTime int64 `json:"maxExecutionTime"`
	MaxMemory        int64 `json:"maxMemory,omitempty"`
	MaxFileSize      int64 `json:"maxFileSize,omitempty"`
	MaxOutputBytes   int64 `json:"maxOutputBytes,omitempty"`
	MaxConcurrent    int   `json:"maxConcurrent,omitempty"`
}

// MarshalJSON encodes the limits with maxExecutionTime in milliseconds.
func (l ResourceLimits) MarshalJSON() ([]byte, error) {
	return json.Marshal(limitsJSON{l.MaxExecutionTime.Milliseconds(), l.MaxMemory, l.MaxFileSize, l.MaxOutputBytes, l.MaxConcurrent})
}

// UnmarshalJSON decodes the form MarshalJSON writes.
func (l *ResourceLimits) UnmarshalJSON(b []byte) error {
	var j limitsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*l = ResourceLimits{time.Duration(j.MaxExecutionTime) * time.Millisecond, j.MaxMemory, j.MaxFileSize, j.MaxOutputBytes, j.MaxConcurrent}
	return nil
}

// Key returns "id@version".
func (d *Declaration) Key() string { return d.ID + "@" + d.Version }

var idRE = regexp.MustCompile(`^[a-z][a-z0-9]*([._-][a-z0-9]+)*$`)

// Validate checks every field but the schemas (which Register compiles and
// lints). It returns a *DeclarationError.
func (d *Declaration) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &DeclarationError{Tool: d.Key(), Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case !idRE.MatchString(d.ID):
		return bad("id", "%q must be lowercase words joined by '.', '_' or '-', such as file.read", d.ID)
	case !IsSemver(d.Version):
		return bad("version", "%q is not a semantic version such as 1.0.0", d.Version)
	case strings.TrimSpace(d.Name) == "":
		return bad("name", "must not be empty")
	case strings.TrimSpace(d.Description) == "":
		return bad("description", "must not be empty")
	case len(d.InputSchema) == 0:
		return bad("inputSchema", "missing")
	case len(d.OutputSchema) == 0:
		return bad("outputSchema", "missing")
	case d.ResourceLimits.MaxExecutionTime <= 0:
		return bad("resourceLimits.maxExecutionTime", "must be set and positive (every tool runs under a deadline)")
	case d.ResourceLimits.MaxMemory < 0:
		return bad("resourceLimits.maxMemory", "must not be negative (0 means not limited)")
	case d.ResourceLimits.MaxFileSize < 0:
		return bad("resourceLimits.maxFileSize", "must not be negative (0 means not limited)")
	case d.ResourceLimits.MaxOutputBytes < 0:
		return bad("resourceLimits.maxOutputBytes", "must not be negative (0 means not limited)")
	case d.ResourceLimits.MaxConcurrent < 0:
		return bad("resourceLimits.maxConcurrent", "must not be negative (0 means only the runtime's limit)")
	}
	for i, c := range d.RequiredCapabilities {
		if _, err := capability.Parse(c.String()); err != nil {
			return bad(fmt.Sprintf("requiredCapabilities[%d]", i), "%v", err)
		}
	}
	for i, c := range d.InputCapabilities {
		field := fmt.Sprintf("inputCapabilities[%d]", i)
		if p, err := capability.Parse(c.Name); err != nil || p.Scope != "" {
			return bad(field+".name", "%q must be a capability name without a scope, such as filesystem.read", c.Name)
		}
		if c.ScopeFrom == "" {
			return bad(field+".scopeFrom", "must name the input property whose value is the scope, such as cwd")
		}
		if slices.Contains(d.InputCapabilities[:i], c) {
			return bad(field, "%s is listed twice", c)
		}
	}
	return nil
}

// checkInputCapabilities checks that each input capability's ScopeFrom is
// a string property of the input schema (Register calls it once the schema
// compiled).
func (d *Declaration) checkInputCapabilities() error {
	if len(d.InputCapabilities) == 0 {
		return nil
	}
	var doc struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(d.InputSchema, &doc); err != nil {
		return &DeclarationError{Tool: d.Key(), Field: "inputSchema", Reason: err.Error()}
	}
	for i, c := range d.InputCapabilities {
		if p, ok := doc.Properties[c.ScopeFrom]; !ok || p.Type != "string" {
			return &DeclarationError{Tool: d.Key(), Field: fmt.Sprintf("inputCapabilities[%d].scopeFrom", i),
				Reason: fmt.Sprintf("%q is not a property of type string in the input schema's top-level properties", c.ScopeFrom)}
		}
	}
	return nil
}

// RequiredFor returns what a call with input requires: the
// RequiredCapabilities, then each of the InputCapabilities whose field
// the input gives, scoped by its value (see [InputCapability]), without
// duplicates. input must already be valid against the input schema.
// workDir is what a relative path is taken from ("" means the process's
// working directory), as the runtime's handles take it.
//
// reach is what the call's handles may reach once the requirements are
// met (see capability.Decision.Effective): the RequiredCapabilities as
// declared, and the name alone of each input capability the input gives,
// so that the handles are confined by the grants that met it.
//
// An error means the input's value cannot name a scope of its capability
// (the runtime denies the call, saying so).
func (d *Declaration) RequiredFor(input json.RawMessage, workDir string) (required, reach []capability.Capability, err error) {
	required = slices.Clone(d.RequiredCapabilities)
	reach = slices.Clone(d.RequiredCapabilities)
	if len(d.InputCapabilities) == 0 {
		return required, reach, nil
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(input, &in); err != nil {
		return required, reach, fmt.Errorf("the input is not a JSON object: %w", err)
	}
	for _, ic := range d.InputCapabilities {
		raw, ok := in[ic.ScopeFrom]
		if !ok {
			continue
		}
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return required, reach, fmt.Errorf("input field %q must be a string to name the scope of %s", ic.ScopeFrom, ic.Name)
		}
		if v == "" {
			continue
		}
		c := capability.Capability{Name: ic.Name, Scope: v}
		if c.IsFilesystem() {
			if c.Scope, err = absPath(v, workDir); err != nil {
				return required, reach, err
			}
		} else if _, err := capability.Parse(c.String()); err != nil {
			return required, reach, fmt.Errorf("input field %q cannot be a scope of %s: %s", ic.ScopeFrom, ic.Name,
				strings.TrimPrefix(err.Error(), "capability: "))
		}
		if !slices.Contains(required, c) {
			required = append(required, c)
		}
		if name := (capability.Capability{Name: ic.Name}); !slices.Contains(reach, name) {
			reach = append(reach, name)
		}
	}
	return required, reach, nil
}

// MayRequire returns every capability a call of the tool may require: the
// RequiredCapabilities, and the name alone of each input capability. It is
// what a listing derives hints from (a tool that may write is not read-only).
func (d *Declaration) MayRequire() []capability.Capability {
	out := slices.Clone(d.RequiredCapabilities)
	for _, ic := range d.InputCapabilities {
		if c := (capability.Capability{Name: ic.Name}); !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// ReadOnly reports whether every capability a call of the tool may
// require (MayRequire) is a read: filesystem.read or state.read. Such a
// tool's handles can change nothing outside its own state transaction, so
// a crash while it runs leaves no effect to account for. MCP's
// readOnlyHint says this, and the runtime then stores no claim before the
// call runs unless it carries an idempotency key or an approved intent
// (see runtime.Runtime.Execute). A tool that acts on the world by other
// means than its handles (a Go tool calling a service) must declare a
// capability for it, or it is taken for read-only.
func (d *Declaration) ReadOnly() bool {
	for _, c := range d.MayRequire() {
		if c.Name != "filesystem.read" && c.Name != "state.read" {
			return false
		}
	}
	return true
}

// absPath is p made absolute against workDir (or the process's working
// directory when workDir is "") and cleaned, as the filesystem handles make
// it.
func absPath(p, workDir string) (string, error) {
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	if workDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("cannot resolve the relative path %q: %w", p, err)
		}
		workDir = wd
	}
	return filepath.Join(workDir, p), nil
}

// IsSemver reports whether v is a full semantic version (MAJOR.MINOR.PATCH
// with optional pre-release and build metadata), without a "v" prefix.
func IsSemver(v string) bool {
	if v == "" || v[0] == 'v' {
		return false
	}
	sv := "v" + v
	if !semver.IsValid(sv) {
		return false
	}
	// semver.IsValid accepts the shorthands v1 and v1.2; require all three parts.
	return strings.TrimSuffix(sv, semver.Build(sv)) == semver.Canonical(sv)
}

// compareVersions orders two valid semantic versions.
func compareVersions(a, b string) int { return semver.Compare("v"+a, "v"+b) }

func (d Declaration) clone() Declaration {
	d.InputSchema = append(json.RawMessage(nil), d.InputSchema...)
	d.OutputSchema = append(json.RawMessage(nil), d.OutputSchema...)
	d.RequiredCapabilities = append([]capability.Capability(nil), d.RequiredCapabilities...)
	d.InputCapabilities = append([]InputCapability(nil), d.InputCapabilities...)
	return d
}
