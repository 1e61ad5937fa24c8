package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// filesNamespace is the state namespace where the staged-file renames of
// committed attempts wait to be done. Tools never reach it: the state
// handle refuses every namespace under reservedPrefix, whatever the grants.
const (
	reservedPrefix = "toolgate."
	filesNamespace = reservedPrefix + "files"
	// pendingNamespace holds the staged files being written by attempts
	// in progress: after a crash, their files are removed on Open.
	pendingNamespace = reservedPrefix + "staging"
)

// fileIntent is a staged file to rename over its target once the attempt
// has committed. Staged and Target are relative to Root.
type fileIntent struct {
	Root   string `json:"root"`
	Staged string `json:"staged"`
	Target string `json:"target"`
}

// stager is an attempt's tools.Stager: each staged file becomes an intent
// in the attempt's write-set, so it commits (or not) with the rest.
type stager struct {
	ctx     context.Context
	store   *txn.Store
	tx      *txn.Tx
	mu      sync.Mutex
	intents []fileIntent
	keys    []string
	pending map[string]string // staged path (root + staged) -> its key in pendingNamespace
}

func (s *stager) Prepare(root, staged string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tx.Active() {
		return txn.ErrTxDone
	}
	if s.pending == nil {
		s.pending = make(map[string]string)
	}
	key := s.tx.ID() + "/" + strconv.Itoa(len(s.pending))
	b, err := json.Marshal(fileIntent{Root: root, Staged: staged})
	if err != nil {
		return err
	}
	if err := s.store.PutState(s.ctx, pendingNamespace, key, b); err != nil {
		return err
	}
	s.pending[filepath.Join(root, staged)] = key
	return nil
}

func (s *stager) Stage(root, staged, target string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := s.tx.ID() + "/" + strconv.Itoa(len(s.intents))
	b, err := json.Marshal(fileIntent{Root: root, Staged: staged, Target: target})
	if err != nil {
		return err
	}
	if err := s.tx.Put(filesNamespace, key, b); err != nil {
		return err
	}
	// Committed, the intent takes over from the pending record.
	if pk, ok := s.pending[filepath.Join(root, staged)]; ok {
		if err := s.tx.Delete(pendingNamespace, pk); err != nil {
			return err
		}
	}
	s.intents = append(s.intents, fileIntent{Root: root, Staged: staged, Target: target})
	s.keys = append(s.keys, key)
	return nil
}

// staged returns what was staged so far.
func (s *stager) staged() ([]fileIntent, []string) {
	if s == nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]fileIntent(nil), s.intents...), append([]string(nil), s.keys...)
}

// discard removes the staged files of an attempt that did not commit,
// then forgets them.
func (s *stager) discard() {
	if s == nil {
		return
	}
	s.mu.Lock()
	var keys []string
	var files []fileIntent
	for path, key := range s.pending {
		keys = append(keys, key)
		files = append(files, fileIntent{Root: filepath.Dir(path), Staged: filepath.Base(path)})
	}
	s.mu.Unlock()
	for _, f := range files {
		removeStaged(f)
	}
	if len(keys) > 0 {
		s.store.DeleteState(context.WithoutCancel(s.ctx), pendingNamespace, keys...) // if it fails, Open cleans up
	}
}

// removeStaged removes a staged file, refusing any name that is not one.
func removeStaged(in fileIntent) {
	if !strings.HasPrefix(filepath.Base(in.Staged), tools.StagePrefix) {
		return
	}
	if r, err := os.OpenRoot(in.Root); err == nil {
		r.Remove(in.Staged)
		r.Close()
	}
}

// apply renames each staged file over its target (the attempt committed),
// makes the renames durable, then forgets the intents. An intent whose
// rename fails stays in the store and is retried when the database is next
// opened.
func (r *Runtime) applyStaged(ctx context.Context, intents []fileIntent, keys []string) error {
	var done []string
	var errs []error
	for i, in := range intents {
		if err := finishIntent(in); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, keys[i])
	}
	if len(done) > 0 {
		if err := r.store.DeleteState(context.WithoutCancel(ctx), filesNamespace, done...); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// finishIntent does one committed rename, idempotently: a staged file that
// is gone was renamed already (a crash after the rename, before the intent
// was forgotten).
func finishIntent(in fileIntent) error {
	r, err := os.OpenRoot(in.Root)
	if err != nil {
		return fmt.Errorf("runtime: finishing the staged write of %s: %w", filepath.Join(in.Root, in.Target), err)
	}
	defer r.Close()
	if _, err := r.Lstat(in.Staged); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := r.Rename(in.Staged, in.Target); err != nil {
		return fmt.Errorf("runtime: finishing the staged write of %s: %w", filepath.Join(in.Root, in.Target), err)
	}
	dir, err := r.Open(filepath.Dir(in.Target))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync() // the rename is durable before the intent is forgotten
}

// recoverStaged finishes the renames of attempts that committed before a
// crash (or whose rename failed): the intent is in the committed state, so
// the attempt is COMPLETED and its files must show it.
func (r *Runtime) recoverStaged(ctx context.Context) error {
	vals, err := r.store.StateValues(ctx, filesNamespace)
	if err != nil {
		return err
	}
	var intents []fileIntent
	var keys []string
	for k, v := range vals {
		var in fileIntent
		if err := json.Unmarshal(v, &in); err != nil {
			return fmt.Errorf("runtime: staged-file intent %s is corrupt: %w", k, err)
		}
		intents, keys = append(intents, in), append(keys, k)
	}
	if err := r.applyStaged(ctx, intents, keys); err != nil {
		return err
	}
	// Files staged by attempts the crash interrupted: never committed, so
	// never to be seen.
	pending, err := r.store.StateValues(ctx, pendingNamespace)
	if err != nil || len(pending) == 0 {
		return err
	}
	keys = keys[:0]
	for k, v := range pending {
		var in fileIntent
		if json.Unmarshal(v, &in) == nil {
			removeStaged(in)
		}
		keys = append(keys, k)
	}
	return r.store.DeleteState(ctx, pendingNamespace, keys...)
}

// reserved reports a state namespace no tool may reach.
func reserved(namespace string) bool { return strings.HasPrefix(namespace, reservedPrefix) }

var _ tools.Stager = (*stager)(nil)
