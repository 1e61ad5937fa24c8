package runtime

import "github.com/toolgate/toolgate/txn"

// StoreOf exposes the store to tests that must break it under a running
// runtime.
func StoreOf(r *Runtime) *txn.Store { return r.store }

// SkipStagedApply makes r stop after an attempt's commit without renaming
// its staged files, as a crash there would.
func SkipStagedApply(r *Runtime) { r.skipStagedApply = true }
