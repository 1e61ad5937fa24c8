package txn

import (
	"context"

	bolt "go.etcd.io/bbolt"
)

// SetFailpoint installs a hook called at each commit step (see the Step
// constants); an error it returns is injected at that step.
func SetFailpoint(s *Store, hook func(step string) error) { s.hook = hook }

// DumpState returns every namespace's committed state, for byte-exact
// comparisons.
func DumpState(s *Store) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	if p, ok := s.be.(*pgStore); ok {
		rows, err := p.pool.Query(context.Background(), `SELECT namespace, key, value FROM toolgate_state`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var ns, k, v []byte
			if err := rows.Scan(&ns, &k, &v); err != nil {
				return nil, err
			}
			if out[string(ns)] == nil {
				out[string(ns)] = map[string]string{}
			}
			out[string(ns)][string(k)] = string(v)
		}
		return out, rows.Err()
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketState).ForEach(func(ns, _ []byte) error {
			m := map[string]string{}
			out[string(ns)] = m
			return tx.Bucket(bucketState).Bucket(ns).ForEach(func(k, v []byte) error {
				m[string(k)] = string(v)
				return nil
			})
		})
	})
	return out, err
}

// Claims returns the ids in the executing index.
func Claims(s *Store) ([]string, error) {
	var out []string
	if p, ok := s.be.(*pgStore); ok {
		rows, err := p.pool.Query(context.Background(), `SELECT id FROM toolgate_executions WHERE executing ORDER BY id`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var id []byte
			if err := rows.Scan(&id); err != nil {
				return nil, err
			}
			out = append(out, string(id))
		}
		return out, rows.Err()
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketExecuting).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}

// Batches returns how many bbolt updates the committer has run.
func Batches(s *Store) int64 { return s.batches.Load() }

// FreelistSynced reports whether the file at path stores its freelist.
func FreelistSynced(path string) (synced, ok bool) { return freelistSynced(path) }

// Queued returns how many writes wait for the group committer.
func Queued(s *Store) int {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if p, ok := s.be.(*pgStore); ok {
		return len(p.queue)
	}
	return len(s.queue)
}

var ParseRecord = parseRecord
