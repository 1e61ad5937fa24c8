package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// AuditSearch calls fn with the groups holding needle whose events'
// timestamps meet [from, to] (by the time index), in seq order, until fn
// returns false.
func (p *Store) AuditSearch(ctx context.Context, needle []byte, from, to int64, fn func(seq uint64, group []byte) (bool, error)) error {
	if err := p.ready(ctx); err != nil {
		return err
	}
	return p.search(ctx, p.pool, needle, from, to, fn)
}

// search is AuditSearch on q, the pool or a read transaction.
func (p *Store) search(ctx context.Context, q pgQuerier, needle []byte, from, to int64, fn func(seq uint64, group []byte) (bool, error)) error {
	rows, err := q.Query(ctx, `SELECT seq, entries FROM toolgate_audit
		WHERE int8range(min_ts, max_ts, '[]') && int8range($1, $2, '[]')
		AND position($3::bytea IN entries) > 0
		ORDER BY seq`, clampTS(from), clampTS(max(to, from)), needle)
	if err != nil {
		return p.readErr(ctx, err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var v []byte
		if err := rows.Scan(&seq, &v); err != nil {
			return p.readErr(ctx, err)
		}
		more, err := fn(uint64(seq), v)
		if err != nil || !more {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return p.readErr(ctx, err)
	}
	return nil
}

// GetWithAudit reads a record and searches for its events in one
// read-only REPEATABLE READ transaction: the record and its events of one
// snapshot.
func (p *Store) GetWithAudit(ctx context.Context, id string, window func(data []byte) ([]byte, int64, int64, error), fn func(seq uint64, group []byte) (bool, error)) ([]byte, error) {
	if err := p.ready(ctx); err != nil {
		return nil, err
	}
	tx, err := p.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, p.readErr(ctx, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var data []byte
	err = tx.QueryRow(ctx, `SELECT data FROM toolgate_executions WHERE id = $1`, []byte(id)).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: execution %q", ErrNotFound, id)
	}
	if err != nil {
		return nil, p.readErr(ctx, err)
	}
	needle, from, to, err := window(data)
	if err != nil {
		return nil, err
	}
	return data, p.search(ctx, tx, needle, from, to, fn)
}

// clampTS keeps a timestamp (Unix ms) within ±2^62, so that an inclusive
// int8range over it never overflows; real timestamps are far inside.
func clampTS(ts int64) int64 { return min(max(ts, -1<<62), 1<<62) }

func tsSpan(lo, hi int64) (int64, int64) { return clampTS(lo), clampTS(hi) }
