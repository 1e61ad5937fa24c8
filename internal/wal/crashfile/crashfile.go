// Package crashfile is a file in memory that forgets, at a simulated
// crash, what was not synced: the way a machine that loses power leaves a
// file. Tests of what a crash leaves write through it.
package crashfile

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
)

// block is the unit in which a crash keeps or loses unsynced data: a
// disk sector.
const block = 512

// File is a file in memory. What was written shows at once to its
// readers; what a crash keeps is what was synced (a truncation not synced:
// either as if it had not happened, and nothing after it, or done), and of
// the rest any mix of sectors: each the new data or the old (past the synced size:
// zeros or whatever the disk held), with the size anywhere between the synced one and the current.
type File struct {
	mu      sync.Mutex
	data    []byte // what readers see
	durable []byte // what a crash surely keeps, once a truncation is
	syncs   int
	// untruncated is the file as the last sync left it, when a truncation
	// below that has not been synced since: a crash may lose that
	// truncation (a file system's metadata change, whole or not at all),
	// and with it every write after it.
	untruncated []byte

	// FailSync, when set, is returned by the next Sync (once), which then
	// syncs nothing; FailWrite likewise by the next WriteAt, which writes
	// nothing.
	FailSync, FailWrite error

	// BeforeSync and AfterSync, when set, are called at the start and at
	// the end of each Sync (after a failed one too): a test takes its
	// crash there.
	BeforeSync, AfterSync func()
}

// New returns an empty file.
func New() *File { return &File{} }

func (f *File) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off >= int64(len(f.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *File) WriteAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.FailWrite; err != nil {
		f.FailWrite = nil
		return 0, err
	}
	if off < 0 {
		return 0, errors.New("crashfile: negative offset")
	}
	if end := off + int64(len(p)); end > int64(len(f.data)) {
		f.data = append(f.data, make([]byte, end-int64(len(f.data)))...)
	}
	copy(f.data[off:], p)
	return len(p), nil
}

func (f *File) Truncate(size int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if size < int64(len(f.durable)) {
		if f.untruncated == nil {
			f.untruncated = f.durable
		}
		f.durable = f.durable[:size:size]
	}
	if size < int64(len(f.data)) {
		f.data = f.data[:size]
	} else {
		f.data = append(f.data, make([]byte, size-int64(len(f.data)))...)
	}
	return nil
}

func (f *File) Sync() error {
	if f.BeforeSync != nil {
		f.BeforeSync()
	}
	if f.AfterSync != nil {
		defer f.AfterSync()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.FailSync; err != nil {
		f.FailSync = nil
		return err
	}
	f.durable = append([]byte(nil), f.data...)
	f.untruncated = nil
	f.syncs++
	return nil
}

func (f *File) Size() (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.data)), nil
}

func (f *File) Close() error { return nil }

// Syncs is how many Syncs succeeded.
func (f *File) Syncs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncs
}

// Crash returns the file as a crash at this moment may leave it, chosen
// by rng: what was synced, and of what was written since, a random mix.
func (f *File) Crash(rng *rand.Rand) *File {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.untruncated != nil && rng.IntN(2) == 0 { // the truncation was lost, and what followed
		return &File{data: bytes.Clone(f.untruncated), durable: bytes.Clone(f.untruncated)}
	}
	lo, hi := len(f.durable), len(f.data)
	if lo > hi {
		lo, hi = hi, lo // a truncation not synced: either size may stay
	}
	size := lo + rng.IntN(hi-lo+1)
	out := make([]byte, size)
	for off := 0; off < size; off += block {
		end := min(off+block, size)
		switch rng.IntN(3) {
		case 0: // the new data reached the disk
			copyPart(out[off:end], f.data, off)
		case 1: // the old stayed (past the synced size: zeros)
			copyPart(out[off:end], f.durable, off)
		default: // the old stayed; past the synced size, what the disk
			// held before (anything)
			copyPart(out[off:end], f.durable, off)
			for i := max(off, len(f.durable)); i < end; i++ {
				out[i] = byte(rng.Uint32())
			}
		}
	}
	return &File{data: out, durable: append([]byte(nil), out...)}
}

// copyPart copies src[off:] into dst, as far as src goes (zeros after).
func copyPart(dst, src []byte, off int) {
	if off < len(src) {
		copy(dst, src[off:])
	}
}
