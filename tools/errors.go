package tools

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrToolNotFound is returned by Lookup for an id no tool has.
	ErrToolNotFound = errors.New("tools: tool not found")
	// ErrVersionNotFound is returned by Lookup for a known id without the requested version.
	ErrVersionNotFound = errors.New("tools: tool version not found")
	// ErrDuplicate is returned by Register for an id and version already registered.
	ErrDuplicate = errors.New("tools: tool already registered")
	// ErrFrozen is returned by Register once the registry is frozen.
	ErrFrozen = errors.New("tools: registry is frozen (read-only)")
	// ErrNotFrozen is returned by Lookup before the registry is frozen: a
	// registry that can still change must not be used to run anything.
	ErrNotFrozen = errors.New("tools: registry must be frozen (read-only) before use")
	// ErrInvalidDeclaration is wrapped by every *DeclarationError and *SchemaError.
	ErrInvalidDeclaration = errors.New("tools: invalid declaration")
	// ErrInvalidValue is wrapped by every *ValueError.
	ErrInvalidValue = errors.New("tools: value does not match schema")
	// ErrAccessDenied is wrapped by every *AccessError.
	ErrAccessDenied = errors.New("tools: access denied")
	// ErrLimit is wrapped by every *LimitError.
	ErrLimit = errors.New("tools: resource limit exceeded")
)

// DeclarationError reports a declaration field that breaks RFC-0001 4.1.
type DeclarationError struct {
	Tool   string // id@version as declared
	Field  string // e.g. "version"
	Reason string
}

func (e *DeclarationError) Error() string {
	return fmt.Sprintf("tools: declaration of %s: %s: %s", e.Tool, e.Field, e.Reason)
}

func (e *DeclarationError) Unwrap() error { return ErrInvalidDeclaration }

// SchemaError reports a schema that does not compile or breaks RFC-0001 6.3.
type SchemaError struct {
	Tool    string // id@version
	Schema  string // "inputSchema" or "outputSchema"
	Pointer string // JSON pointer (RFC 6901) into the schema, "" for the whole document
	Reason  string
}

func (e *SchemaError) Error() string {
	ptr := e.Pointer
	if ptr == "" {
		ptr = "(root)"
	}
	return fmt.Sprintf("tools: %s of %s at %s: %s", e.Schema, e.Tool, ptr, e.Reason)
}

func (e *SchemaError) Unwrap() error { return ErrInvalidDeclaration }

// Problem is one reason a value failed its schema.
type Problem struct {
	Location string `json:"location"` // JSON pointer into the value, "" for the value itself
	Message  string `json:"message"`
}

// ValueError reports an input or output that is not valid JSON or does not
// match its schema.
type ValueError struct {
	Which     string    // "input" or "output"
	Malformed bool      // not JSON at all (or not one JSON value)
	Problems  []Problem // at least one
}

func (e *ValueError) Error() string {
	var b strings.Builder
	if e.Malformed {
		fmt.Fprintf(&b, "tools: %s is not valid JSON", e.Which)
	} else {
		fmt.Fprintf(&b, "tools: %s does not match schema", e.Which)
	}
	for i, p := range e.Problems {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		if p.Location != "" {
			b.WriteString(p.Location + ": ")
		}
		b.WriteString(p.Message)
	}
	return b.String()
}

func (e *ValueError) Unwrap() error { return ErrInvalidValue }

// AccessError reports a handle refusing something outside the grants.
type AccessError struct {
	Capability string // what would have been needed, e.g. "filesystem.read:/etc/passwd"
	Reason     string
}

func (e *AccessError) Error() string {
	return fmt.Sprintf("tools: access denied: %s (%s)", e.Capability, e.Reason)
}

func (e *AccessError) Unwrap() error { return ErrAccessDenied }

// LimitError reports a declared resource limit that was reached.
type LimitError struct {
	Limit  string // low-cardinality name: "file_size_limit", "output_limit", "memory_limit"
	Max    int64  // bytes
	Got    int64  // bytes; -1 when not measured (a process stopped at the limit)
	Detail string // how the limit was found to be hit, when there is more to say
}

func (e *LimitError) Error() string {
	s := fmt.Sprintf("tools: %s exceeded: %d bytes, more than the limit of %d bytes", e.Limit, e.Got, e.Max)
	if e.Got < 0 {
		s = fmt.Sprintf("tools: %s exceeded (limit %d bytes)", e.Limit, e.Max)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *LimitError) Unwrap() error { return ErrLimit }

// ErrUnavailable is wrapped by every *UnavailableError.
var ErrUnavailable = errors.New("tools: resource unavailable")

// UnavailableError reports that something a tool depends on could not be
// reached, or went away during the attempt: an upstream MCP server that
// did not start, or died mid-call. The runtime classifies it as a
// transient ResourceError, so an idempotent tool's attempt is retried
// (RFC-0001 7.3) and any other's is not.
type UnavailableError struct {
	Resource string // low-cardinality name, e.g. "mcp_upstream"
	Detail   string // what was unavailable, in the user's terms
	Err      error  // the cause, when there is one
}

func (e *UnavailableError) Error() string {
	s := "tools: " + e.Detail
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrUnavailable and the cause.
func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }
