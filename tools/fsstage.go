package tools

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// StagePrefix begins the name of every staged file: a hidden file next to
// its target, renamed over the target when the attempt commits.
const StagePrefix = ".toolgate-stage-"

// maxNameBytes is the longest directory entry name (NAME_MAX on Linux).
const maxNameBytes = 255

// Stager makes file writes part of the attempt's state transaction. The
// runtime implements it; an Env without one refuses staged writes.
type Stager interface {
	// Prepare durably records that staged (relative to root) is about to
	// be created, so that if the process dies before the attempt ends, the
	// file is removed when the database is next opened.
	Prepare(root, staged string) error
	// Stage records that, when the attempt commits, the file staged at
	// staged replaces target, both relative to the directory root. The
	// record is committed with the attempt's state, and the rename is
	// done after the commit (or, after a crash, when the database is next
	// opened). If the attempt does not commit, staged is removed.
	Stage(root, staged, target string) error
}

// WriteStaged writes data to name as part of the attempt's transaction
// (a filesystem.write handle): the data goes to a staged file next to name
// now, and replaces name only when the attempt commits, so a failed or
// rolled back attempt leaves the files exactly as they were. Writes past
// MaxFileSize are refused (*LimitError) and stage nothing. created reports
// that name did not exist when staged.
func (f *FS) WriteStaged(name string, data []byte, perm fs.FileMode) (created bool, err error) {
	if f.capName != "filesystem.write" {
		return false, &AccessError{Capability: "filesystem.write:" + name, Reason: "writing needs a filesystem.write handle"}
	}
	if f.env.Stager == nil {
		return false, errors.New("tools: staged writes need an Env with a Stager (the runtime provides one)")
	}
	if max := f.env.Limits.MaxFileSize; max > 0 && int64(len(data)) > max {
		return false, &LimitError{Limit: "file_size_limit", Max: max, Got: int64(len(data))}
	}
	p, rel, err := f.resolve(name)
	if err != nil {
		return false, err
	}
	// The staged file is created next to the target with O_EXCL (never
	// through a link), and renamed over the target's name at the commit:
	// a rename replaces a link swapped in there, it does not follow it.
	r, rel := p.within(rel)
	if rel == "." || strings.HasPrefix(filepath.Base(rel), StagePrefix) {
		return false, fmt.Errorf("tools: %s: not a file name that can be written", name)
	}
	switch fi, err := r.Lstat(rel); {
	case err == nil && fi.IsDir():
		return false, fmt.Errorf("tools: %s is a directory", name)
	case err == nil && !fi.Mode().IsRegular():
		return false, fmt.Errorf("tools: %s is not a regular file; only regular files are replaced", name)
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		created = true
	default:
		return false, f.translate(name, err)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	// The target's name is kept in the staged one, to tell what it is,
	// while that fits a directory entry (255 bytes): a target name near the
	// longest one a directory allows is staged under the prefix and the
	// random part alone.
	stagedName := StagePrefix + hex.EncodeToString(rnd[:])
	if base := filepath.Base(rel); len(stagedName)+1+len(base) <= maxNameBytes {
		stagedName += "-" + base
	}
	staged := filepath.Join(filepath.Dir(rel), stagedName)
	// Errors name the target as the tool gave it (name), never the staged
	// file, whose name the user never chose (asTarget).
	if err := f.env.Stager.Prepare(r.Name(), staged); err != nil {
		return false, asTarget(err, staged, name)
	}
	file, err := r.OpenFile(staged, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return false, f.translate(name, asTarget(err, staged, name))
	}
	_, werr := file.Write(data)
	serr := file.Sync() // the data is durable before the commit that makes it visible
	cerr := file.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		r.Remove(staged)
		return false, f.translate(name, asTarget(err, staged, name))
	}
	if err := f.env.Stager.Stage(r.Name(), staged, rel); err != nil {
		r.Remove(staged)
		return false, asTarget(err, staged, name)
	}
	return created, nil
}

// asTarget is err, an error of the staged file staged (relative to its
// root), told of name, the target as the tool gave it: a file error of the
// staged file is the same error of name (the first, when err joins
// several), and any other error's text says name where it said staged.
// errors.Is and errors.As see what they saw in err.
func asTarget(err error, staged, name string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && strings.HasPrefix(filepath.Base(pe.Path), StagePrefix) {
		return &fs.PathError{Op: pe.Op, Path: name, Err: pe.Err}
	}
	if strings.Contains(err.Error(), staged) {
		return &stagedError{err: err, staged: staged, name: name}
	}
	return err
}

// stagedError is an error whose text names a staged file, said of its
// target.
type stagedError struct {
	err          error
	staged, name string
}

func (e *stagedError) Error() string { return strings.ReplaceAll(e.err.Error(), e.staged, e.name) }
func (e *stagedError) Unwrap() error { return e.err }
