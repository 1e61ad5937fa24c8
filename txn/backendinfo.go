package txn

import (
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Backend describes the database behind the store, for toolgate doctor:
// "bbolt file, format 3", or "Postgres 16.4, schema 2, 2 nodes with a
// live lease".
func (s *Store) Backend(ctx context.Context) (string, error) {
	if err := s.ready(ctx); err != nil {
		return "", err
	}
	p, ok := s.be.(*pgStore)
	if !ok {
		var format uint64
		err := s.db.View(func(tx *bolt.Tx) error {
			if v := tx.Bucket(bucketMeta).Get(keyFormat); len(v) == 8 {
				format = binary.BigEndian.Uint64(v)
			}
			return nil
		})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("bbolt file, format %d", format), nil
	}
	var version string
	var schema, nodes int64
	err := p.pool.QueryRow(ctx, `SELECT current_setting('server_version'),
		(SELECT value FROM toolgate_meta WHERE key = 'schema'),
		(SELECT count(*) FROM toolgate_nodes WHERE expires > clock_timestamp())`).Scan(&version, &schema, &nodes)
	if err != nil {
		return "", p.readErr(ctx, err)
	}
	plural := "s"
	if nodes == 1 {
		plural = ""
	}
	return fmt.Sprintf("Postgres %s, schema %d, %d node%s with a live lease", version, schema, nodes, plural), nil
}
