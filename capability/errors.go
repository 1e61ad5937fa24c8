package capability

import "errors"

// ErrInvalid is wrapped by every parse error.
var ErrInvalid = errors.New("capability: invalid capability")
