package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/toolgate/toolgate/txn/driver"
)

// Reads: of records and state, each one statement on a pooled connection
// (one snapshot).

// Get returns the stored record of id, final or claim, or nil.
func (p *Store) Get(ctx context.Context, id string) ([]byte, error) {
	if err := p.ready(ctx); err != nil {
		return nil, err
	}
	var data []byte
	err := p.pool.QueryRow(ctx, `SELECT data FROM toolgate_executions WHERE id = $1`, []byte(id)).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, p.readErr(ctx, err)
	}
	return data, nil
}

// readErr is a read's error in the user's terms.
func (p *Store) readErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if p.closed.Load() {
		return ErrClosed
	}
	var abort *errPGAbort
	if errors.As(err, &abort) {
		return abort.err
	}
	return fmt.Errorf("txn: %s: %v", p.path, pgMessage(err))
}

// Walk calls fn with the records past after, in id order.
func (p *Store) Walk(ctx context.Context, after string, fn func(id string, data []byte) bool) error {
	return p.walkQuery(ctx, `SELECT id, data FROM toolgate_executions WHERE id > $1 ORDER BY id`, []byte(after), fn)
}

// WalkBack is Walk in reverse, from before (all when empty).
func (p *Store) WalkBack(ctx context.Context, before string, fn func(id string, data []byte) bool) error {
	if before == "" {
		return p.walkQuery(ctx, `SELECT id, data FROM toolgate_executions ORDER BY id DESC`, nil, fn)
	}
	return p.walkQuery(ctx, `SELECT id, data FROM toolgate_executions WHERE id < $1 ORDER BY id DESC`, []byte(before), fn)
}

// walkQuery calls fn with each row (id, data) of query until it returns
// false; rows are read as they come.
func (p *Store) walkQuery(ctx context.Context, query string, arg []byte, fn func(id string, data []byte) bool) error {
	if err := p.ready(ctx); err != nil {
		return err
	}
	var args []any
	if arg != nil {
		args = append(args, arg)
	}
	rows, err := p.pool.Query(ctx, query, args...)
	if err != nil {
		return p.readErr(ctx, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, data []byte
		if err := rows.Scan(&id, &data); err != nil {
			return p.readErr(ctx, err)
		}
		if !fn(string(id), data) {
			return nil
		}
	}
	if err := rows.Err(); err != nil {
		return p.readErr(ctx, err)
	}
	return nil
}

// StateValue reads a committed value.
func (p *Store) StateValue(ctx context.Context, namespace, key string) ([]byte, bool, error) {
	if err := p.ready(ctx); err != nil {
		return nil, false, err
	}
	v, found, err := pgStateValue(ctx, p.pool, namespace, key)
	if err != nil {
		return nil, false, p.readErr(ctx, err)
	}
	return v, found, nil
}

// StatePage returns up to n entries of namespace past after.
func (p *Store) StatePage(ctx context.Context, namespace, after string, n int) ([]driver.Entry, error) {
	if err := p.ready(ctx); err != nil {
		return nil, err
	}
	if n < 1 { // the contract asks for at least 1
		return nil, nil
	}
	rows, err := p.pool.Query(ctx, `SELECT key, value FROM toolgate_state
		WHERE namespace = $1 AND key > $2 ORDER BY key LIMIT $3`, []byte(namespace), []byte(after), int64(n))
	if err != nil {
		return nil, p.readErr(ctx, err)
	}
	es, err := collectEntries(rows)
	if err != nil {
		return nil, p.readErr(ctx, err)
	}
	return es, nil
}

// StateScan returns the committed entries under prefix, in key order.
func (p *Store) StateScan(ctx context.Context, namespace, prefix string) ([]driver.Entry, error) {
	if err := p.ready(ctx); err != nil {
		return nil, err
	}
	es, err := pgStateScan(ctx, p.pool, namespace, prefix, 0)
	if err != nil {
		return nil, p.readErr(ctx, err)
	}
	return es, nil
}

type pgQuerier interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

func pgStateValue(ctx context.Context, q pgQuerier, namespace, key string) ([]byte, bool, error) {
	var v []byte
	err := q.QueryRow(ctx, `SELECT value FROM toolgate_state WHERE namespace = $1 AND key = $2`, []byte(namespace), []byte(key)).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, dbErr("read state", err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}

// prefixEnd returns the least key greater than every key starting with
// prefix, or nil if there is none.
func prefixEnd(prefix string) []byte {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// pgStateScan returns the entries under prefix in key order, at most n
// (n <= 0: all).
func pgStateScan(ctx context.Context, q pgQuerier, namespace, prefix string, n int) ([]driver.Entry, error) {
	limit := int64(n)
	if n <= 0 {
		limit = -1
	}
	rows, err := q.Query(ctx, `SELECT key, value FROM toolgate_state
		WHERE namespace = $1 AND key >= $2 AND ($3::bytea IS NULL OR key < $3)
		ORDER BY key LIMIT CASE WHEN $4 < 0 THEN NULL ELSE $4 END`,
		[]byte(namespace), []byte(prefix), prefixEnd(prefix), limit)
	if err != nil {
		return nil, dbErr("scan state", err)
	}
	return collectEntries(rows)
}

func collectEntries(rows pgx.Rows) ([]driver.Entry, error) {
	defer rows.Close()
	var out []driver.Entry
	for rows.Next() {
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			return nil, dbErr("read state", err)
		}
		if v == nil {
			v = []byte{}
		}
		out = append(out, driver.Entry{Key: string(k), Value: v})
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("read state", err)
	}
	return out, nil
}
