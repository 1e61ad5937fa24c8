package tools

import (
	"encoding/json"
	"fmt"
	"regexp"
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
	ResourceLimits       ResourceLimits          `json:"resourceLimits"`
	Deterministic        bool                    `json:"deterministic"`
	Idempotent           bool                    `json:"idempotent"`
	// RequiresApproval means the tool runs only as an approved intent (a
	// human approved this exact invocation); any other call is DENIED.
	RequiresApproval bool `json:"requiresApproval,omitempty"`
}

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
	return nil
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
	return d
}
