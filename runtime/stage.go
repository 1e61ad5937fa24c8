package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

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
	// Dev and Ino identify the directory Root named when the file was
	// staged in it: a rename is done only in that very directory, never
	// in whatever a link swapped in at Root later leads to. Zero in
	// intents stored by older versions.
	Dev uint64 `json:"dev,omitempty"`
	Ino uint64 `json:"ino,omitempty"`
}

// rootIdentity opens root (a directory) and returns its device and inode
// numbers, after checking that the staged file is in it: the directory a
// tool staged a file in, not one swapped in for it since.
func rootIdentity(root, staged string) (dev, ino uint64, err error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return 0, 0, err
	}
	defer r.Close()
	if fi, err := r.Lstat(staged); err != nil || !fi.Mode().IsRegular() {
		return 0, 0, fmt.Errorf("runtime: the staged file %s is not in %s: the directory changed while the tool ran", staged, root)
	}
	fi, err := r.Stat(".")
	if err != nil {
		return 0, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, errors.New("runtime: no inode numbers on this system")
	}
	return uint64(st.Dev), uint64(st.Ino), nil
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
	pending map[fileIntent]string // a staged file (Root, Staged) -> its key in pendingNamespace
	// discarded is set by discard: a tool still running after its attempt
	// ended (abandoned at the deadline) can stage nothing more.
	discarded bool
}

func (s *stager) Prepare(root, staged string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.discarded || !s.tx.Active() {
		return txn.ErrTxDone
	}
	if s.pending == nil {
		s.pending = make(map[fileIntent]string)
	}
	key := s.tx.ID() + "/" + strconv.Itoa(len(s.pending))
	b, err := json.Marshal(fileIntent{Root: root, Staged: staged})
	if err != nil {
		return err
	}
	if err := s.store.PutState(s.ctx, pendingNamespace, key, b); err != nil {
		return err
	}
	s.pending[fileIntent{Root: root, Staged: staged}] = key
	return nil
}

func (s *stager) Stage(root, staged, target string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.discarded {
		return txn.ErrTxDone
	}
	key := s.tx.ID() + "/" + strconv.Itoa(len(s.intents))
	in := fileIntent{Root: root, Staged: staged, Target: target}
	var err error
	if in.Dev, in.Ino, err = rootIdentity(root, staged); err != nil {
		return err
	}
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	if err := s.tx.Put(filesNamespace, key, b); err != nil {
		return err
	}
	// Committed, the intent takes over from the pending record.
	if pk, ok := s.pending[fileIntent{Root: root, Staged: staged}]; ok {
		if err := s.tx.Delete(pendingNamespace, pk); err != nil {
			return err
		}
	}
	s.intents = append(s.intents, in)
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
	s.discarded = true
	var keys []string
	var files []fileIntent
	for f, key := range s.pending {
		keys = append(keys, key)
		files = append(files, f) // the root as granted: never re-derived from a path that a symlink could redirect
	}
	s.pending = nil
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
	failed := map[string][]byte{}
	for i, in := range intents {
		if err := finishIntent(in); err != nil {
			// Parked, not retried: a later write to the same file must not
			// be overwritten by this one on the next Open. The staged file
			// stays for the operator; toolgate doctor lists it.
			errs = append(errs, err)
			failed[keys[i]], _ = json.Marshal(parked{Intent: in, Error: Message(err), At: r.opts.Now().UTC()})
			continue
		}
		done = append(done, keys[i])
	}
	if len(done) == 0 && len(failed) == 0 {
		return nil
	}
	err := r.store.UpdateState(context.WithoutCancel(ctx), func(v *txn.StateView) error {
		for _, k := range done {
			if err := v.Delete(filesNamespace, k); err != nil {
				return err
			}
		}
		for k, b := range failed {
			if err := v.Delete(filesNamespace, k); err != nil {
				return err
			}
			if err := v.Put(FailedWritesNamespace, k, b); err != nil {
				return err
			}
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}

// parked is a committed file write whose rename could not be done.
type parked struct {
	Intent fileIntent `json:"intent"`
	Error  string     `json:"error"`
	At     time.Time  `json:"at"`
}

// ParkedWrites returns why each committed file write of an execution could
// not be made visible (the attempt is COMPLETED, its writes parked: see
// [FailedWritesNamespace]), or nil: what a replay of the call, or a caller
// reading its record, must be told as well as the caller that made it.
func (r *Runtime) ParkedWrites(ctx context.Context, executionID string) ([]string, error) {
	return parkedWrites(ctx, r.store, executionID)
}

func parkedWrites(ctx context.Context, store *txn.Store, executionID string) ([]string, error) {
	es, err := store.StateScan(ctx, FailedWritesNamespace, executionID+"/")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range es {
		var p parked
		if err := json.Unmarshal(e.Value, &p); err != nil {
			out = append(out, "a parked write whose record is corrupt: "+Message(err))
			continue
		}
		out = append(out, p.Error)
	}
	return out, nil
}

// FailedWritesNamespace holds the committed file writes whose rename could
// not be done (the directory is gone, a directory now sits at the target):
// each with its staged file, the error and the time. They are never applied
// by themselves; `toolgate doctor` lists them.
const FailedWritesNamespace = reservedPrefix + "files.failed"

// intentOrder sorts intent keys ("<execution id>/<n>") by execution id
// (time-ordered UUIDv7), then by n as a number: the order of the writes.
func intentOrder(a, b string) int {
	ea, na, _ := strings.Cut(a, "/")
	eb, nb, _ := strings.Cut(b, "/")
	if c := strings.Compare(ea, eb); c != 0 {
		return c
	}
	ia, _ := strconv.Atoi(na)
	ib, _ := strconv.Atoi(nb)
	return ia - ib
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
	if in.Ino != 0 {
		fi, err := r.Stat(".")
		if err != nil {
			return fmt.Errorf("runtime: finishing the staged write of %s: %w", filepath.Join(in.Root, in.Target), err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || uint64(st.Dev) != in.Dev || uint64(st.Ino) != in.Ino {
			return fmt.Errorf("runtime: finishing the staged write of %s: %s is no longer the directory the file was staged in (replaced or swapped for a link); the write is parked, not done",
				filepath.Join(in.Root, in.Target), in.Root)
		}
	}
	if _, err := r.Lstat(in.Staged); errors.Is(err, fs.ErrNotExist) {
		return nil // renamed already, before a crash
	}
	if err := r.Rename(in.Staged, in.Target); err != nil {
		// The cause alone: the rename's error names the staged file, which
		// the caller never chose (the parked write's record keeps it).
		var le *os.LinkError
		if errors.As(err, &le) {
			err = le.Err
		}
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
	keys := slices.SortedFunc(maps.Keys(vals), intentOrder) // in the order they were written
	intents := make([]fileIntent, len(keys))
	for i, k := range keys {
		if err := json.Unmarshal(vals[k], &intents[i]); err != nil {
			return fmt.Errorf("runtime: staged-file intent %s is corrupt: %w", k, err)
		}
	}
	// A rename that cannot be done is parked (see applyStaged), not a reason
	// to refuse to open: only an error of the store itself is.
	if err := r.applyStaged(ctx, intents, keys); err != nil && r.store.Err() != nil {
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
		// Recover has finished every claim this node may finish: one still
		// EXECUTING is another live node's (a shared Postgres), staging now.
		if id, _, ok := strings.Cut(k, "/"); ok {
			if rec, err := r.store.Get(ctx, id); err == nil && rec.State == "EXECUTING" {
				continue
			}
		}
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
