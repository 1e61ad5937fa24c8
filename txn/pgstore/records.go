package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/toolgate/toolgate/txn/driver"
)

// Writes: each a request of a group transaction (commit.go).

// Put stores a final record under a free id, with the writes of a Tx
// begun without a claim after checking its reads.
func (p *Store) Put(ctx context.Context, id string, reads driver.ReadSet, writes driver.Writes, data []byte, evs []driver.Event) error {
	return p.write(ctx, p.checkReads(reads), func(t *pgTx) error {
		if err := t.applyWrites(writes, p.failpoint); err != nil {
			return err
		}
		return t.insert(id, false, data, nil)
	}, evs)
}

// checkReads is the check of a write that ends a Tx: that what it read
// (nil: nothing) has not changed.
func (p *Store) checkReads(reads driver.ReadSet) func(*pgTx) error {
	return func(t *pgTx) error {
		if reads == nil {
			return nil
		}
		if err := p.failpoint(driver.StepCheckReads); err != nil {
			return err
		}
		return reads.Check(t)
	}
}

// Begin claims id for this node, under its lease, after guard.
func (p *Store) Begin(ctx context.Context, id string, data []byte, guard driver.Guard, evs []driver.Event) error {
	if p.readOnly {
		return ErrReadOnly
	}
	if err := p.lease.check(); err != nil {
		return err
	}
	// Live before it is stored: the sweep of this node's orphaned claims
	// (lease.go) never takes a claim whose Tx is in use.
	p.lease.hold(id)
	var writes driver.Writes
	err := p.writeReq(ctx, pgReq{claim: true, check: func(t *pgTx) error {
		writes = nil
		if guard == nil {
			return nil
		}
		var err error
		writes, err = guard(t)
		return err
	}, apply: func(t *pgTx) error {
		if err := p.failpoint(driver.StepClaim); err != nil {
			return err
		}
		if err := t.insert(id, true, data, p.lease.node); err != nil {
			return err
		}
		return t.applyWrites(writes, p.failpoint)
	}, evs: evs})
	if err != nil {
		p.lease.drop(id)
	}
	return err
}

// Commit checks the Tx's reads, applies its writes and replaces the claim
// by the final record.
func (p *Store) Commit(ctx context.Context, id string, reads driver.ReadSet, writes driver.Writes, data []byte, evs []driver.Event) error {
	err := p.write(ctx, p.checkReads(reads), func(t *pgTx) error {
		if err := t.applyWrites(writes, p.failpoint); err != nil {
			return err
		}
		if err := p.failpoint(driver.StepRecord); err != nil {
			return err
		}
		if err := t.finishClaim(id, data); err != nil {
			return p.lease.claimGone(err)
		}
		return nil
	}, evs)
	if err == nil || errors.Is(err, ErrNotFound) {
		p.lease.drop(id)
	}
	return err
}

// Rollback replaces the claim by the final record.
func (p *Store) Rollback(ctx context.Context, id string, data []byte, evs []driver.Event) error {
	// The last a Tx does with its claim: if this fails, the claim is an
	// orphan, which the sweep finishes once Postgres answers.
	defer p.lease.drop(id)
	return p.write(ctx, func(t *pgTx) error { return nil }, func(t *pgTx) error {
		if err := t.finishClaim(id, data); err != nil {
			return p.lease.claimGone(err)
		}
		return nil
	}, evs)
}

// SetClaim rewrites this node's claim of id with set.
func (p *Store) SetClaim(ctx context.Context, id string, set func([]byte) ([]byte, error)) error {
	if p.readOnly {
		return ErrReadOnly
	}
	return p.writeReq(ctx, pgReq{claim: true, check: func(*pgTx) error { return nil }, apply: func(t *pgTx) error {
		var data []byte
		err := t.tx.QueryRow(t.ctx, `SELECT data FROM toolgate_executions WHERE id = $1 AND executing AND node = $2 FOR UPDATE`,
			[]byte(id), p.lease.node).Scan(&data)
		if err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return &errPGAbort{fmt.Errorf("%w: execution %q is not executing on this node", ErrNotFound, id)}
			}
			return dbErr("read the claim of execution "+strconv.Quote(id), err)
		}
		out, err := set(data)
		if err != nil {
			return &errPGAbort{err}
		}
		return t.exec("store the claim of execution "+strconv.Quote(id),
			`UPDATE toolgate_executions SET data = $2 WHERE id = $1 AND executing`, []byte(id), out)
	}})
}

// UpdateState applies the writes fn returns.
func (p *Store) UpdateState(ctx context.Context, fn driver.Guard, evs []driver.Event) error {
	var writes driver.Writes
	return p.write(ctx, func(t *pgTx) error {
		var err error
		writes, err = fn(t)
		return err
	}, func(t *pgTx) error {
		return t.applyWrites(writes, p.failpoint)
	}, evs)
}

// Recover finishes this node's claims (its previous run's: nothing of this
// run is live yet when the runtime calls it), and those of nodes whose
// lease has expired or that are gone; finish is kept for the background
// sweep that does the same for nodes that die later.
func (p *Store) Recover(ctx context.Context, finish driver.Finish) ([]driver.Claim, error) {
	if p.readOnly {
		return nil, ErrReadOnly
	}
	p.lease.setFinish(finish)
	return p.sweep(ctx, finish, false)
}

// sweep finishes, with finish, in one transaction: the claims of nodes
// whose lease expired (their rows deleted in the same transaction, so that
// a late renewal finds its claims gone rather than reviving them), of
// nodes that are gone, and this node's own (all of them, or with
// orphansOnly those no Tx of this run holds).
func (p *Store) sweep(ctx context.Context, finish driver.Finish, orphansOnly bool) ([]driver.Claim, error) {
	var done []driver.Claim
	err := p.write(ctx, func(*pgTx) error { return nil }, func(t *pgTx) error {
		done = nil
		if err := t.exec("end expired leases", `DELETE FROM toolgate_nodes
			WHERE expires < clock_timestamp() AND NOT (node = $1 AND instance = $2)`, p.lease.node, p.lease.run()); err != nil {
			return err
		}
		live := [][]byte{}
		if orphansOnly {
			live = p.lease.live()
		}
		rows, err := t.tx.Query(t.ctx, `SELECT id, data FROM toolgate_executions e WHERE executing
			AND (node IS NULL
				OR (node = $1 AND NOT (id = ANY($2::bytea[])))
				OR NOT EXISTS (SELECT 1 FROM toolgate_nodes n WHERE n.node = e.node))
			ORDER BY id`, p.lease.node, live)
		if err != nil {
			return dbErr("read claims", err)
		}
		var found []driver.Claim
		for rows.Next() {
			var id, data []byte
			if err := rows.Scan(&id, &data); err != nil {
				rows.Close()
				return dbErr("read claims", err)
			}
			found = append(found, driver.Claim{ID: string(id), Data: data})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return dbErr("read claims", err)
		}
		if len(found) == 0 {
			return nil
		}
		final, evs, err := finish(found)
		if err != nil {
			return err
		}
		for _, c := range final {
			if err := t.finish(c.ID, c.Data); err != nil {
				return err
			}
		}
		t.evs = append(t.evs, evs...)
		done = final
		return nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return done, nil
}
