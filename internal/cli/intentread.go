package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// 'intent show' and 'intent list' inspect: they read the database opened
// read-only, as 'executions' and 'show' do, and never create it.
// Runtime.Intent and Runtime.Intents would need an open runtime, which opens
// the database for writing. So the intents are read here from the state
// namespaces where the runtime stores them (runtime/intent.go: the proposal
// under its id, the decision and the execution under the same id, each
// refusal under id/seq), in the forms of the runtime's exported types.
// TestReadIntents_AgreesWithRuntime keeps the two readers in step.
const (
	nsIntents         = "toolgate.intents"
	nsIntentDecisions = "toolgate.intent.decisions"
	nsIntentExecuted  = "toolgate.intent.executed"
	nsIntentRefusals  = "toolgate.intent.refusals"
)

// readIntents returns the intents of store in status ("" for all), oldest
// proposal first, as Runtime.Intents does.
func readIntents(ctx context.Context, store *txn.Store, status string) ([]*tgruntime.Intent, error) {
	props, err := store.StateValues(ctx, nsIntents)
	if err != nil {
		return nil, internalErr(err)
	}
	var out []*tgruntime.Intent
	for _, b := range props {
		it, err := readIntentRecords(ctx, store, b)
		if err != nil {
			return nil, err
		}
		if status == "" || it.Status == status {
			out = append(out, it)
		}
	}
	slices.SortFunc(out, func(a, b *tgruntime.Intent) int {
		if c := a.ProposedAt.Compare(b.ProposedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// readIntent returns the intent id of store, as Runtime.Intent does: a
// malformed or unknown id is an *tgruntime.IntentError.
func readIntent(ctx context.Context, store *txn.Store, id string) (*tgruntime.Intent, error) {
	if err := checkIntentID(id); err != nil {
		return nil, err
	}
	b, ok, err := store.StateValue(ctx, nsIntents, id)
	if err != nil {
		return nil, internalErr(err)
	}
	if !ok {
		return nil, &tgruntime.IntentError{Code: "intent_not_found", IntentID: id, Reason: "no such intent"}
	}
	return readIntentRecords(ctx, store, b)
}

// readIntentRecords assembles an intent from its stored proposal and its
// decision, execution and refusals.
func readIntentRecords(ctx context.Context, store *txn.Store, proposal []byte) (*tgruntime.Intent, error) {
	it := new(tgruntime.Intent)
	if err := json.Unmarshal(proposal, it); err != nil {
		return nil, internalErr(fmt.Errorf("intent record is corrupt: %w", err))
	}
	it.Status = tgruntime.IntentPending
	if b, ok, err := store.StateValue(ctx, nsIntentDecisions, it.ID); err != nil {
		return nil, internalErr(err)
	} else if ok {
		it.Decision = new(tgruntime.IntentDecision)
		if err := json.Unmarshal(b, it.Decision); err != nil {
			return nil, internalErr(fmt.Errorf("intent decision is corrupt: %w", err))
		}
		it.Status = tgruntime.IntentRejected
		if it.Decision.Approved {
			it.Status = tgruntime.IntentApproved
		}
	}
	if b, ok, err := store.StateValue(ctx, nsIntentExecuted, it.ID); err != nil {
		return nil, internalErr(err)
	} else if ok {
		it.Execution = new(tgruntime.IntentExecution)
		if err := json.Unmarshal(b, it.Execution); err != nil {
			return nil, internalErr(fmt.Errorf("intent execution record is corrupt: %w", err))
		}
		it.Status = tgruntime.IntentExecuted
	}
	refusals, err := store.StateScan(ctx, nsIntentRefusals, it.ID+"/")
	if err != nil {
		return nil, internalErr(err)
	}
	slices.SortFunc(refusals, func(a, b txn.Entry) int { return strings.Compare(a.Key, b.Key) }) // id/<time>-<rand>
	for _, e := range refusals {
		var r tgruntime.IntentRefusal
		if json.Unmarshal(e.Value, &r) == nil { // as the runtime: a refusal is best effort
			it.Refusals = append(it.Refusals, r)
		}
	}
	return it, nil
}

// checkIntentID refuses an id that is not a lowercase UUID v4, as the
// runtime does (intent_malformed). The check mirrors internal/uuid.Valid,
// which the dependency policy keeps out of this package.
func checkIntentID(id string) error {
	valid := len(id) == 36 && id[14] == '4' && strings.IndexByte("89ab", id[19]) >= 0
	for i := 0; valid && i < len(id); i++ {
		switch c := id[i]; i {
		case 8, 13, 18, 23:
			valid = c == '-'
		default:
			valid = '0' <= c && c <= '9' || 'a' <= c && c <= 'f'
		}
	}
	if !valid {
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
// database is not created.
func (g *globals) intentDatabase(id string) error {
	path, err := g.dbPath()
	if err != nil {
		return usageErr("%v", err)
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return noIntent(id, path)
	}
	return nil // any other problem is the open's to report
}

func noIntent(id, path string) error {
	return usageErr("intent %s: not found: there is no database at %s (see --db)", id, path)
}
