package txn_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails a suite that passed when goroutines are left once every
// test has ended (goleak retries for a while, so goroutines that are
// ending are not counted): a store that does not stop its committer, its
// lease renewal or its connections on Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
