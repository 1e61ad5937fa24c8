package cli

import (
	"testing"

	"github.com/toolgate/toolgate/internal/testchild"
)

// TestMain removes the test child program when the tests end.
func TestMain(m *testing.M) { testchild.Main(m) }
