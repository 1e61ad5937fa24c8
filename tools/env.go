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
	"syscall"

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
	// OnProcessStart, when set, is called once a process Run started is
	// running, with what names it for a later recovery, before Run waits
	// for it; the function it returns, if not nil, is called when the
	// process and its group have ended. The runtime records the process in
	// the execution's claim, so that after a crash the recovery kills what
	// is left of it (ReapProcess) before it records the attempt as
	// interrupted.
	OnProcessStart func(RunningProcess) (ended func())

	mu     sync.Mutex
	places map[string]*place
	closed bool
}

// FS returns the filesystem handle for capability name (such as
// "filesystem.read"): it opens only paths at or below a granted scope of
// that name, so neither ".." nor a symbolic link leads out of it.
//
// Each grant names a place: its scope, or the Place its symbolic links led
// to when the grant was made (capability.Resolve; a policy resolves its
// grants when it is built). The handle opens the place once per attempt,
// following no link in its path: a link found there (swapped in since the
// grant was made, or in a grant that was never resolved) is an
// *AccessError. Below a granted directory, paths are opened through an
// os.Root at it, which follows a link only while it stays inside; a granted
// file is opened by its name with O_NOFOLLOW, and read or written through
// that one descriptor, so a swap between a check and the open leads
// nowhere else.
func (e *Env) FS(name string) *FS { return &FS{env: e, capName: name} }

// Close releases the handles the attempt opened. Operations on them fail
// afterwards.
func (e *Env) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	var errs []error
	for _, p := range e.places {
		errs = append(errs, p.close())
	}
	e.places = nil
	return errors.Join(errs...)
}

// place returns the place at path, opened at its first use in the attempt.
func (e *Env) place(capName, path string) (*place, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.New("tools: environment closed: the attempt has ended")
	}
	if p, ok := e.places[path]; ok {
		return p, nil
	}
	p, err := openPlace(capName, path)
	if err != nil {
		return nil, err
	}
	if e.places == nil {
		e.places = make(map[string]*place)
	}
	e.places[path] = p
	return p, nil
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
	p, rel, err := f.resolve(name)
	if err != nil {
		return nil, err
	}
	file, err := p.openFile(f.capName, rel, os.O_RDONLY, 0)
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

// Stat describes name, following a symbolic link below a granted
// directory only while it stays inside; a granted file that is a link is
// an *AccessError.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	p, rel, err := f.resolve(name)
	if err != nil {
		return nil, err
	}
	fi, err := p.stat(f.capName, rel)
	return fi, f.translate(name, err)
}

// resolve finds the longest granted scope (or place) covering name, and
// returns its place, opened, and the path of name below it.
func (f *FS) resolve(name string) (*place, string, error) {
	abs, err := f.abs(name)
	if err != nil {
		return nil, "", err
	}
	var prefix, at string
	found := false
	consider := func(scope, place string) {
		if capability.ScopeCovers(scope, abs) && (!found || len(scope) > len(prefix)) {
			prefix, at, found = scope, place, true
		}
	}
	sep := string(filepath.Separator)
	for _, g := range f.env.Grants {
		if g.Name != f.capName {
			continue
		}
		if g.Scope == "" {
			consider(sep, sep)
			continue
		}
		s, err := f.abs(g.Scope)
		if err != nil {
			continue
		}
		if g.Place == "" {
			consider(s, s)
			continue
		}
		pl := filepath.Clean(g.Place)
		consider(s, pl)  // named as granted
		consider(pl, pl) // or by where it leads
	}
	if !found {
		return nil, "", &AccessError{Capability: f.capName + ":" + abs, Reason: "outside the granted scopes"}
	}
	p, err := f.env.place(f.capName, at)
	if err != nil {
		return nil, "", err
	}
	rel, err := filepath.Rel(prefix, abs)
	if err != nil {
		return nil, "", err
	}
	if p.file != "" && rel != "." {
		return nil, "", fmt.Errorf("tools: %s: %w (the grant names the file %s)", name, syscall.ENOTDIR, p.path)
	}
	return p, rel, nil
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
	if pe != nil && pe.Path == name {
		return fmt.Errorf("tools: %w", err) // it names the path
	}
	return fmt.Errorf("tools: %s: %w", name, err)
}
