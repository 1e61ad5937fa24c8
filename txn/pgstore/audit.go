package pgstore

import "context"

// AuditRaw calls fn with the groups and then the head, as stored, in one
// statement: one snapshot.
func (p *Store) AuditRaw(ctx context.Context, fn func(key, value []byte) error) error {
	if err := p.ready(ctx); err != nil {
		return err
	}
	// One statement: one snapshot of the groups and the head.
	rows, err := p.pool.Query(ctx, `SELECT k, v FROM (
			SELECT 0 AS o, int8send(seq) AS k, entries AS v FROM toolgate_audit
			UNION ALL
			SELECT 1, '\xff'::bytea, int8send(seq) || hash FROM toolgate_audit_head WHERE seq > 0
		) AS log ORDER BY o, k`)
	if err != nil {
		return p.readErr(ctx, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			return p.readErr(ctx, err)
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return p.readErr(ctx, err)
	}
	return nil
}

// AuditHead returns the seq of the last entry, as the head records it.
func (p *Store) AuditHead(ctx context.Context) (uint64, error) {
	if err := p.ready(ctx); err != nil {
		return 0, err
	}
	var seq int64
	err := p.pool.QueryRow(ctx, `SELECT seq FROM toolgate_audit_head WHERE id = 1`).Scan(&seq)
	if err != nil {
		return 0, p.readErr(ctx, err)
	}
	return uint64(seq), nil
}

// AuditGroups calls fn with the groups from the one holding from on.
func (p *Store) AuditGroups(ctx context.Context, from uint64, fn func(seq uint64, group []byte) (bool, error)) error {
	if err := p.ready(ctx); err != nil {
		return err
	}
	rows, err := p.pool.Query(ctx, `SELECT seq, entries FROM toolgate_audit
		WHERE seq >= coalesce((SELECT max(seq) FROM toolgate_audit WHERE seq <= $1), 0)
		ORDER BY seq`, int64(min(from, 1<<63-1)))
	if err != nil {
		return p.readErr(ctx, err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var group []byte
		if err := rows.Scan(&seq, &group); err != nil {
			return p.readErr(ctx, err)
		}
		more, err := fn(uint64(seq), group)
		if err != nil || !more {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return p.readErr(ctx, err)
	}
	return nil
}
