package txn

import (
	"context"
	"fmt"

	"github.com/toolgate/toolgate/txn/boltstore"
	"github.com/toolgate/toolgate/txn/driver"
)

// SetFailpoint installs a hook called at each commit step (see the Step
// constants); an error it returns is injected at that step.
func SetFailpoint(s *Store, hook func(step string) error) {
	if hook == nil {
		s.hook.Store(nil)
		return
	}
	s.hook.Store(&hook)
}

// inspector is what both backends show of themselves to tests.
type inspector interface {
	DumpState(context.Context) (map[string]map[string]string, error)
	Claims(context.Context) ([]string, error)
	Batches() int64
	Queued() int
}

func inspect(s *Store) inspector {
	in, ok := s.be.(inspector)
	if !ok {
		panic(fmt.Sprintf("backend %T has no inspection", s.be))
	}
	return in
}

// DumpState returns every namespace's committed state, for byte-exact
// comparisons.
func DumpState(s *Store) (map[string]map[string]string, error) {
	return inspect(s).DumpState(context.Background())
}

// Claims returns the ids in the executing index.
func Claims(s *Store) ([]string, error) { return inspect(s).Claims(context.Background()) }

// Batches returns how many updates the committer has run.
func Batches(s *Store) int64 { return inspect(s).Batches() }

// Queued returns how many writes wait for the group committer.
func Queued(s *Store) int { return inspect(s).Queued() }

// FreelistSynced reports whether the file at path stores its freelist.
func FreelistSynced(path string) (synced, ok bool) { return boltstore.FreelistSynced(path) }

// Backend returns the backend under s.
func BackendOf(s *Store) driver.Backend { return s.be }

// FinishClaims is the recovery policy, for a backend's own sweep.
func FinishClaims(finish func(*Record) ([]AuditEvent, error)) driver.Finish {
	return finishClaims(finish)
}

// DecodeClaims decodes the final records of a recovery.
var DecodeClaims = decodeClaims

var ParseRecord = parseRecord
