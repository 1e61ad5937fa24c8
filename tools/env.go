package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/toolgate/toolgate/capability"
)

// State is the tool-visible key-value state, reached only through the
// attempt's state transaction: reads see the attempt's own writes, writes
// become visible to others only when the transaction commits, and a rollback
// discards them.
type State interface {
	Get(namespace, key string) (value []byte, found bool, err error)
	Put(namespace, key string, value []byte) error
	Delete(namespace, key string) error
	// Scan returns the entries whose keys start with prefix, in key order,
	// at most limit of them (limit <= 0: all).
	Scan(namespace, prefix string, limit int) ([]KV, error)
}

// KV is one key and value of tool-visible state.
type KV struct {
	Key   string
	Value []byte
}

// Env is what one attempt of a tool may touch. The runtime builds it from
// the grants of the attempt and closes it when the attempt ends; a tool must
// not keep it past Execute.
type Env struct {
	ExecutionID string                  // this attempt
	CallID      string                  // the invocation all attempts share
	Attempt     int                     // 1 for the first attempt
	Principal   string                  // who asked
	Grants      []capability.Capability // what the principal holds
	Limits      ResourceLimits          // the effective limits of this attempt
	State       State                   // the attempt's state transaction; nil outside the runtime
	WorkDir     string                  // relative paths are resolved against it; "" means the process's
	SearchPath  string                  // where Run looks up bare command names; "" means DefaultSearchPath
	// Stager, when set, makes FS.WriteStaged part of the attempt's state
	// transaction (the runtime sets it).
	Stager Stager
	// OnProcess, when set, is called with the result of every process Run
	// started (the runtime records their resource usage as metrics).
	OnProcess func(*ProcessResult)

	mu     sync.Mutex
	roots  map[string]*os.Root
	closed bool
}

// FS returns the filesystem handle for capability name (such as
// "filesystem.read"): it opens only paths at or below a granted scope of that
// name, through os.Root, so neither ".." nor a symbolic link leads out of it.
func (e *Env) FS(name string) *FS { return &FS{env: e, capName: name} }

// Close releases the handles the attempt opened. Operations on them fail
// afterwards.
func (e *Env) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	var errs []error
	for _, r := range e.roots {
		errs = append(errs, r.Close())
	}
	e.roots = nil
	return errors.Join(errs...)
}

func (e *Env) root(dir string) (*os.Root, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.New("tools: environment closed: the attempt has ended")
	}
	if r, ok := e.roots[dir]; ok {
		return r, nil
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	if e.roots == nil {
		e.roots = make(map[string]*os.Root)
	}
	e.roots[dir] = r
	return r, nil
}

// FS is a filesystem handle confined to the scopes granted for one
// capability name.
type FS struct {
	env     *Env
	capName string
}

// Open opens name for reading. A path outside every granted scope is an
// *AccessError.
func (f *FS) Open(name string) (*os.File, error) {
	r, rel, err := f.resolve(name)
	if err != nil {
		return nil, err
	}
	file, err := r.Open(rel)
	return file, f.translate(name, err)
}

// ReadDir lists the directory name, sorted by file name, as os.ReadDir
// does, within the granted scopes.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	file, err := f.Open(name)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	es, err := file.ReadDir(-1)
	if err != nil {
		return nil, f.translate(name, err)
	}
	slices.SortFunc(es, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return es, nil
}

// Stat describes name without following a final symbolic link out of the root.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	r, rel, err := f.resolve(name)
	if err != nil {
		return nil, err
	}
	fi, err := r.Stat(rel)
	return fi, f.translate(name, err)
}

// resolve finds the longest granted scope covering name and returns its
// root and the path relative to it.
func (f *FS) resolve(name string) (*os.Root, string, error) {
	abs, err := f.abs(name)
	if err != nil {
		return nil, "", err
	}
	scopes, all := capability.Scopes(f.env.Grants, f.capName)
	if all {
		scopes = append(scopes, string(filepath.Separator))
	}
	best := ""
	for _, s := range scopes {
		s, err := f.abs(s)
		if err != nil {
			continue
		}
		if capability.ScopeCovers(s, abs) && len(s) > len(best) {
			best = s
		}
	}
	if best == "" {
		return nil, "", &AccessError{Capability: f.capName + ":" + abs, Reason: "outside the granted scopes"}
	}
	r, err := f.env.root(best)
	if err != nil {
		if fi, serr := os.Stat(best); serr == nil && !fi.IsDir() && best == abs {
			return f.resolveFile(best)
		}
		return nil, "", err
	}
	rel, err := filepath.Rel(best, abs)
	if err != nil {
		return nil, "", err
	}
	return r, rel, nil
}

// resolveFile resolves a scope that names a file, which grants that file
// alone: it is reached through a root at its directory, and refused if it
// is a symbolic link, which would lead elsewhere.
func (f *FS) resolveFile(file string) (*os.Root, string, error) {
	r, err := f.env.root(filepath.Dir(file))
	if err != nil {
		return nil, "", err
	}
	rel := filepath.Base(file)
	fi, err := r.Lstat(rel)
	if err != nil {
		return nil, "", f.translate(file, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, "", &AccessError{Capability: f.capName + ":" + file, Reason: "the granted file is a symbolic link"}
	}
	return r, rel, nil
}

func (f *FS) abs(p string) (string, error) {
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	base := f.env.WorkDir
	if base == "" {
		var err error
		if base, err = os.Getwd(); err != nil {
			return "", err
		}
	}
	return filepath.Join(base, p), nil
}

// translate turns os.Root's refusal of an escaping path into an AccessError.
func (f *FS) translate(name string, err error) error {
	if err == nil {
		return nil
	}
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Err.Error() == "path escapes from parent" {
		return &AccessError{Capability: f.capName + ":" + name, Reason: "path escapes the granted root (symbolic link or ..)"}
	}
	return fmt.Errorf("tools: %s: %w", name, err)
}
