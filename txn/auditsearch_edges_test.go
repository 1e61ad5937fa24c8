package txn_test

import (
	"testing"

	"github.com/toolgate/toolgate/txn/storetest"
)

// TestStore_AuditSearch_WindowEdges pins what AuditSearch and GetWithAudit
// return at the edges of their window, on the store the suite runs on
// (bbolt, or Postgres with TOOLGATE_TEST_BACKEND): the conformance suite's
// check, which says what each edge is.
func TestStore_AuditSearch_WindowEdges(t *testing.T) {
	storetest.CheckAuditSearch(t, openStore(t))
}
