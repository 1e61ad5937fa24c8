package audit

import "errors"

// ErrNotCanonicalizable is wrapped by every error [Canonicalize] and [Hash]
// return: the input is not exactly one JSON value that RFC 8785 can encode
// (a syntax error, trailing data, invalid UTF-8, a lone surrogate, a
// duplicate object key, a number outside the IEEE-754 double range, or
// nesting deeper than [MaxDepth]). [Event.Hash] wraps it too when an event
// holds a value that would not hash faithfully.
var ErrNotCanonicalizable = errors.New("audit: not canonicalizable")
