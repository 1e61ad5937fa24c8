package txn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	bolt "go.etcd.io/bbolt"
)

// SetProcesses stores ps as the running processes of the execution, in its
// claim: recovery, after a crash, kills those still alive before it
// records the attempt as interrupted (Record.Processes). The runtime calls
// it when a tool starts a process and again when the process has ended.
// It fails with ErrTxDone once the Tx has ended, and with ErrNotFound if
// the claim is gone (swept by another node).
func (t *Tx) SetProcesses(ctx context.Context, ps []Process) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return ErrTxDone
	}
	ps = slices.Clone(ps)
	set := func(data []byte) ([]byte, error) {
		rec, err := decodeRecord(t.id, data)
		if err != nil {
			return nil, err
		}
		rec.Processes = ps
		return encodeRecord(rec)
	}
	var err error
	if p, ok := t.store.be.(*pgStore); ok {
		err = p.setClaim(ctx, t.id, set)
	} else {
		id := []byte(t.id)
		err = t.store.write(ctx, func(tx *bolt.Tx) error { return claimPresent(tx, id) }, func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketExecuting)
			data, err := set(b.Get(id))
			if err != nil {
				return err
			}
			return b.Put(id, data)
		})
	}
	if err != nil {
		return fmt.Errorf("txn: record the processes of execution %q: %w", t.id, err)
	}
	return nil
}

// setClaim rewrites this node's claim of id with set.
func (p *pgStore) setClaim(ctx context.Context, id string, set func([]byte) ([]byte, error)) error {
	return p.writeReq(ctx, &pgReq{claim: true, check: func(*pgTx) error { return nil }, apply: func(t *pgTx) error {
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
