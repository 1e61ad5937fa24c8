package tools

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"sync"
)

// writeFlags are the open flags that need a write grant.
const writeFlags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREATE | os.O_TRUNC

// OpenFile opens name with flag and perm, as os.OpenFile does, confined to
// the granted scopes like Open. Opening for writing needs a handle for
// "filesystem.write" (env.FS("filesystem.write")); any other handle refuses
// with an *AccessError. Writes through the returned *File stop at the
// attempt's MaxFileSize: the bytes that fit are written and the write
// returns a *LimitError ("file_size_limit").
func (f *FS) OpenFile(name string, flag int, perm fs.FileMode) (*File, error) {
	if flag&writeFlags != 0 && f.capName != "filesystem.write" {
		return nil, &AccessError{Capability: "filesystem.write:" + name,
			Reason: "opening for writing needs a filesystem.write handle; this one is " + f.capName}
	}
	p, rel, err := f.resolve(name)
	if err != nil {
		return nil, err
	}
	file, err := p.openFile(f.capName, rel, flag, perm)
	if err != nil {
		return nil, f.translate(name, err)
	}
	return &File{f: file, max: f.env.Limits.MaxFileSize, appendMode: flag&os.O_APPEND != 0}, nil
}

// Create creates or truncates name for writing (a filesystem.write handle).
func (f *FS) Create(name string) (*File, error) {
	return f.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

// WriteFile writes data to name, creating or truncating it, as os.WriteFile
// does, within the grants and MaxFileSize.
func (f *FS) WriteFile(name string, data []byte, perm fs.FileMode) error {
	file, err := f.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = file.Write(data)
	return errors.Join(err, file.Close())
}

// Remove removes the file or empty directory name (a filesystem.write
// handle).
func (f *FS) Remove(name string) error {
	if f.capName != "filesystem.write" {
		return &AccessError{Capability: "filesystem.write:" + name, Reason: "removing needs a filesystem.write handle"}
	}
	p, rel, err := f.resolve(name)
	if err != nil {
		return err
	}
	r, rel := p.within(rel) // unlinkat: a link is removed, never followed
	return f.translate(name, r.Remove(rel))
}

// Mkdir creates the directory name (a filesystem.write handle).
func (f *FS) Mkdir(name string, perm fs.FileMode) error {
	if f.capName != "filesystem.write" {
		return &AccessError{Capability: "filesystem.write:" + name, Reason: "creating a directory needs a filesystem.write handle"}
	}
	p, rel, err := f.resolve(name)
	if err != nil {
		return err
	}
	r, rel := p.within(rel)
	return f.translate(name, r.Mkdir(rel, perm))
}

// File is a file opened through an FS handle. Its writes are held to the
// attempt's MaxFileSize (0: no limit): the file never grows past it.
type File struct {
	mu         sync.Mutex
	f          *os.File
	max        int64
	appendMode bool
}

// Name returns the name the file was opened with.
func (f *File) Name() string { return f.f.Name() }

// Read reads from the file.
func (f *File) Read(p []byte) (int, error) { return f.f.Read(p) }

// ReadAt reads from the file at off.
func (f *File) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }

// Seek sets the offset of the next Read or Write.
func (f *File) Seek(offset int64, whence int) (int64, error) { return f.f.Seek(offset, whence) }

// Stat describes the file.
func (f *File) Stat() (fs.FileInfo, error) { return f.f.Stat() }

// Sync commits the file's contents to stable storage.
func (f *File) Sync() error { return f.f.Sync() }

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// Write writes p at the current offset (the end, for a file opened with
// O_APPEND). If that would take the file past MaxFileSize, it writes what
// fits and returns a *LimitError.
func (f *File) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	off, err := f.offset()
	if err != nil {
		return 0, err
	}
	fit, lerr := f.fit(off, len(p))
	n, err := f.f.Write(p[:fit])
	if err != nil {
		return n, err
	}
	return n, lerr
}

// WriteString is Write of a string.
func (f *File) WriteString(s string) (int, error) { return f.Write([]byte(s)) }

// WriteAt writes p at off, within MaxFileSize as Write does.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fit, lerr := f.fit(off, len(p))
	n, err := f.f.WriteAt(p[:fit], off)
	if err != nil {
		return n, err
	}
	return n, lerr
}

// Truncate changes the file's size; growing it past MaxFileSize is a
// *LimitError and changes nothing.
func (f *File) Truncate(size int64) error {
	if f.max > 0 && size > f.max {
		return &LimitError{Limit: "file_size_limit", Max: f.max, Got: size}
	}
	return f.f.Truncate(size)
}

// ReadFrom copies r into the file through Write, so the limit holds.
func (f *File) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(struct{ io.Writer }{f}, r) // hide ReadFrom from io.Copy: no recursion, no bypass
}

func (f *File) offset() (int64, error) {
	if f.appendMode {
		fi, err := f.f.Stat()
		if err != nil {
			return 0, err
		}
		return fi.Size(), nil
	}
	return f.f.Seek(0, io.SeekCurrent)
}

// fit returns how many of n bytes written at off stay within the limit,
// and the *LimitError when that is fewer than n.
func (f *File) fit(off int64, n int) (int, error) {
	if f.max <= 0 || off+int64(n) <= f.max {
		return n, nil
	}
	fit := max(f.max-off, 0)
	return int(fit), &LimitError{Limit: "file_size_limit", Max: f.max, Got: off + int64(n)}
}
