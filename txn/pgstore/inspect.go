package pgstore

import "context"

// Inspection, for tests and tools that look under the contract.

// Claims returns the ids of the claims, in id order.
func (p *Store) Claims(ctx context.Context) ([]string, error) {
	rows, err := p.pool.Query(ctx, `SELECT id FROM toolgate_executions WHERE executing ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id []byte
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, string(id))
	}
	return out, rows.Err()
}

// DumpState returns every namespace's committed state.
func (p *Store) DumpState(ctx context.Context) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	rows, err := p.pool.Query(ctx, `SELECT namespace, key, value FROM toolgate_state`)
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

// Batches returns how many group transactions the committer has run.
func (p *Store) Batches() int64 { return p.batches.Load() }

// Queued returns how many writes wait for the group committer.
func (p *Store) Queued() int { return p.w.Queued() }
