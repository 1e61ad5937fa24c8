package cli

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// 'intent show' and 'intent list' inspect: they read the database opened
// read-only, as 'executions' and 'show' do, and never create it, with the
// runtime's own reader (runtime.Reader).

// readIntents returns the intents of store in status ("" for all), oldest
// proposal first.
func readIntents(ctx context.Context, store *txn.Store, status string) ([]*tgruntime.Intent, error) {
	all, err := tgruntime.NewReader(store).Intents(ctx, tgruntime.IntentFilter{Status: status})
	if err != nil {
		return nil, internalErr(err)
	}
	return all, nil
}

// readIntent returns the intent id of store: a malformed or unknown id is
// an *tgruntime.IntentError.
func readIntent(ctx context.Context, store *txn.Store, id string) (*tgruntime.Intent, error) {
	it, err := tgruntime.NewReader(store).Intent(ctx, id)
	if err != nil && !errors.As(err, new(*tgruntime.IntentError)) {
		return nil, internalErr(err)
	}
	return it, err
}

// checkIntentID refuses an id that is not a lowercase UUID v4, as the
// runtime does (intent_malformed), before the database is opened.
func checkIntentID(id string) error {
	if !tgruntime.ValidIntentID(id) {
		return &tgruntime.IntentError{Code: "intent_malformed", IntentID: id, Reason: "the intent id is not a lowercase UUID v4"}
	}
	return nil
}

// checkIntentRef refuses an intent id and hash that the runtime would
// refuse as malformed, before the database is opened.
func checkIntentRef(id, hash string) error {
	if err := checkIntentID(id); err != nil {
		return err
	}
	if len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" {
		return &tgruntime.IntentError{Code: "intent_malformed", IntentID: id, Reason: "the hash is not 64 lowercase hex digits (SHA-256)"}
	}
	return nil
}

// intentDatabase refuses a command on intent id when there is no
// database, which therefore holds no intent: a usage error, and the
// database is not created. A file is missing; a Postgres database lacks
// toolgate's schema (a read-only open says so without creating it).
func (g *globals) intentDatabase(id string) error {
	path, err := g.dbPath()
	if err != nil {
		return usageErr("%v", err)
	}
	if txn.IsPostgresURL(path) {
		store, err := txn.Open(path, &txn.Options{ReadOnly: true, Timeout: g.lockTimeout()})
		if errors.Is(err, fs.ErrNotExist) {
			return noIntent(id, path)
		}
		if err == nil {
			store.Close()
		}
		return nil // any other problem is the open's to report
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return noIntent(id, path)
	}
	return nil // any other problem is the open's to report
}

func noIntent(id, path string) error {
	if txn.IsPostgresURL(path) {
		return usageErr("intent %s: not found: the database at %s holds no toolgate data yet (see --db)", id, txn.ShownPath(path))
	}
	return usageErr("intent %s: not found: there is no database at %s (see --db)", id, path)
}
