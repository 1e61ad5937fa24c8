package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// migrations upgrade an older layout in place, in the writer's first
// update, all or nothing: a failure leaves the file exactly as it was.
// Read-only opens never migrate; they refuse an older format.
var migrations = map[uint64]func(tx *bolt.Tx, upgrade func([]byte) ([]byte, error)) error{
	2: migrate2to3,
}

// migrate2to3 re-encodes every record (final and claimed) from format 2's
// JSON into format 3's binary form. The audit log and the state are the
// same in both.
func migrate2to3(tx *bolt.Tx, upgrade func([]byte) ([]byte, error)) error {
	if upgrade == nil {
		return errors.New("no record upgrade given (Options.UpgradeRecord)")
	}
	for _, name := range [][]byte{bucketExecutions, bucketExecuting} {
		b := tx.Bucket(name)
		type kv struct{ k, v []byte }
		var updates []kv
		err := b.ForEach(func(k, v []byte) error {
			data, err := upgrade(v)
			var de *DecodeError
			if errors.As(err, &de) {
				return fmt.Errorf("%w: record %q in %s is not format 2 JSON: %v", ErrCorrupt, k, name, de.Err)
			}
			if err != nil {
				return fmt.Errorf("record %q in %s: %w", k, name, err)
			}
			updates = append(updates, kv{append([]byte(nil), k...), data})
			return nil
		})
		if err != nil {
			return err
		}
		for _, u := range updates {
			if err := b.Put(u.k, u.v); err != nil {
				return err
			}
		}
	}
	return nil
}

// migrate upgrades the layout from version got to formatVersion, step by
// step, inside tx.
func migrate(tx *bolt.Tx, path string, got uint64, upgrade func([]byte) ([]byte, error)) error {
	for v := got; v < formatVersion; v++ {
		step, ok := migrations[v]
		if !ok {
			return fmt.Errorf("%w: %s: format version %d, this build supports %d and cannot upgrade it", ErrIncompatible, path, got, formatVersion)
		}
		if err := step(tx, upgrade); err != nil {
			return fmt.Errorf("txn: %s: upgrading format %d to %d: %w", path, v, v+1, err)
		}
	}
	return tx.Bucket(bucketMeta).Put(keyFormat, binary.BigEndian.AppendUint64(nil, formatVersion))
}
