// Package wal is a write-ahead log: numbered entries appended to one file
// and made durable in groups, one sync per group, to be applied to a
// database that is itself synced only at checkpoints.
//
// The log holds opaque entries. A writer appends the entries of a group
// ([Log.Append]), then makes them durable with one [Log.Sync]; only then
// may it acknowledge them. After the database it feeds has made every
// entry up to some number durable on its own (a checkpoint), the writer
// starts the log over ([Log.Reset]), which keeps it bounded: the next
// entries overwrite the file from its start, so that a file once extended
// is reused, never truncated and extended again. On open, the entries
// after the database's checkpoint are read back and applied again.
//
// # Format
//
// Each entry is a frame: its payload's length (4 bytes), a CRC-32C of the
// rest (4 bytes), its number (8 bytes), the size of the log that was
// durable when it was written (8 bytes), all little-endian, then the
// payload. Numbers go up by one from frame to frame. The file has no
// header: an empty file is an empty log. After a Reset the file still
// holds frames of entries the database has applied, beyond the new ones:
// they are numbered below every new entry, and so end the log where they
// begin, as the zeros of a file's unused end do.
//
// # What a crash leaves
//
// A crash, or a lost power supply, can lose what was written after the
// last Sync, and leave any part of it: nothing, a prefix, garbage, zeros,
// or the bytes that were there before.
// That is the tail: the frames after the last whole one whose CRC holds.
// Open drops the tail. The disk may write back unsynced sectors in any
// order, so a whole frame may follow a torn one; but a torn frame in what
// a later frame says was durable when it was written is not a crash's
// tail: the log is damaged, and Open refuses it ([ErrCorrupt]) rather than
// lose what was acknowledged.
package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync/atomic"
)

const frameHeader = 24 // length, CRC, number, durable size

// maxEntry bounds one entry's payload, so that a damaged length cannot
// make Open read or allocate without limit.
const maxEntry = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt reports a log whose damage is not a crash's torn tail.
var ErrCorrupt = errors.New("the write-ahead log is damaged")

// File is what a Log writes through: an *os.File, or in tests one that
// forgets what was not synced.
type File interface {
	io.ReaderAt
	io.WriterAt
	Sync() error // makes what was written durable (fdatasync)
	Truncate(size int64) error
	Size() (int64, error)
	Close() error
}

// Log is a write-ahead log open for appending. Its methods are not safe
// for concurrent use: its one writer (a group committer) serializes them.
type Log struct {
	f       File
	size    int64 // bytes of whole frames in the file, written or buffered
	written int64 // bytes handed to the file
	durable int64 // bytes made durable by the last sync
	// allocated is how far the file has been extended with zeros, made
	// durable, ahead of the frames (see Sync).
	allocated int64
	next      uint64 // the number of the next entry
	buf       []byte // frames appended and not yet written
	err       error  // a failed write or sync: the log is unusable
	syncs     atomic.Uint64
}

// Open opens the log at path, creating it empty if there is none. See
// [OpenFile].
func Open(path string, applied uint64) (*Log, []Entry, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, err
	}
	l, entries, err := OpenFile(osFile{f}, applied)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, entries, nil
}

// Entry is one entry read back from the log.
type Entry struct {
	Seq     uint64
	Payload []byte
	durable int64 // the log's durable size when it was written
}

// OpenFile reads the log in f and returns it open for appending, with the
// entries it holds, in order. applied is the number of the last entry the
// database holds already (0 for none): a frame numbered up to it that
// lies beyond the log's frames is left from before a Reset, not written
// since. A torn tail is dropped from the file (and that made durable)
// before it returns. An empty log numbers its next entry 1 until
// [Log.Reset] says otherwise.
func OpenFile(f File, applied uint64) (*Log, []Entry, error) {
	size, err := f.Size()
	if err != nil {
		return nil, nil, err
	}
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	entries, end, err := parse(data, applied)
	if err != nil {
		return nil, nil, err
	}
	l := &Log{f: f, size: int64(end), written: int64(end), durable: int64(end), allocated: int64(end), next: 1}
	if len(entries) > 0 {
		l.next = entries[len(entries)-1].Seq + 1
	}
	if int64(end) < size {
		if err := f.Truncate(int64(end)); err != nil {
			return nil, nil, err
		}
		if err := l.sync(); err != nil {
			return nil, nil, err
		}
	}
	return l, entries, nil
}

// parse reads the whole frames of data, and where they end. A frame
// numbered below the one before it is left from before a Reset: the
// frames end there.
func parse(data []byte, applied uint64) ([]Entry, int, error) {
	var entries []Entry
	off := 0
	for {
		e, n, ok := frameAt(data, off)
		if !ok {
			break
		}
		if len(entries) > 0 {
			switch last := entries[len(entries)-1].Seq; {
			case e.Seq <= last:
				return tail(data, entries, off, applied)
			case e.Seq != last+1:
				return nil, 0, fmt.Errorf("%w: entry %d follows entry %d", ErrCorrupt, e.Seq, last)
			}
		}
		entries = append(entries, e)
		off += n
	}
	return tail(data, entries, off, applied)
}

// tail checks that what follows the frames at off is a tail: no whole
// frame of a number later than both the last entry and applied starts
// anywhere in it that was written once the place where the frames stop
// was durable.
func tail(data []byte, entries []Entry, off int, applied uint64) ([]Entry, int, error) {
	after := applied
	if len(entries) > 0 {
		after = max(after, entries[len(entries)-1].Seq)
	}
	limit := after + uint64(len(data)/frameHeader) // no later number fits beyond
	for i := off + 1; i+frameHeader <= len(data); i++ {
		if seq := binary.LittleEndian.Uint64(data[i+8 : i+16]); seq <= after || seq > limit {
			continue // cheap: most garbage fails here, before a CRC
		}
		if e, _, ok := frameAt(data, i); ok && e.durable > int64(off) {
			return nil, 0, fmt.Errorf("%w: the entry at byte %d is damaged, and entry %d (at byte %d) was written once it was durable", ErrCorrupt, off, e.Seq, i)
		}
	}
	return entries, off, nil
}

// frameAt reads the frame at off: whole, its CRC holding.
func frameAt(data []byte, off int) (Entry, int, bool) {
	if len(data)-off < frameHeader {
		return Entry{}, 0, false
	}
	h := data[off : off+frameHeader]
	n := binary.LittleEndian.Uint32(h[0:4])
	if n == 0 || n > maxEntry || uint64(len(data)-off-frameHeader) < uint64(n) {
		return Entry{}, 0, false
	}
	body := data[off+8 : off+frameHeader+int(n)] // number, durable size and payload
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(h[4:8]) {
		return Entry{}, 0, false
	}
	e := Entry{Seq: binary.LittleEndian.Uint64(h[8:16]), durable: int64(binary.LittleEndian.Uint64(h[16:24])), Payload: body[16:]}
	return e, frameHeader + int(n), true
}

// Next is the number the next appended entry gets.
func (l *Log) Next() uint64 { return l.next }

// Size is the log's size in bytes, what Append buffered included.
func (l *Log) Size() int64 { return l.size }

// Syncs is how many times the log has made its file durable.
func (l *Log) Syncs() uint64 { return l.syncs.Load() }

// Append adds an entry to the log and returns its number. It is durable
// once Sync has returned nil; before that a crash may lose it.
func (l *Log) Append(payload []byte) (uint64, error) {
	if l.err != nil {
		return 0, l.err
	}
	if len(payload) == 0 || len(payload) > maxEntry {
		return 0, fmt.Errorf("a log entry of %d bytes (1 to %d)", len(payload), maxEntry)
	}
	seq := l.next
	var h [frameHeader]byte
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint64(h[8:16], seq)
	binary.LittleEndian.PutUint64(h[16:24], uint64(l.durable))
	c := crc32.Update(crc32.Checksum(h[8:24], castagnoli), castagnoli, payload)
	binary.LittleEndian.PutUint32(h[4:8], c)
	l.buf = append(append(l.buf, h[:]...), payload...)
	l.size += int64(frameHeader + len(payload))
	l.next++
	return seq, nil
}

// Write hands what Append buffered to the file, without a sync: a crash
// of the process keeps it, a crash of the machine may not.
func (l *Log) Write() error {
	if l.err != nil {
		return l.err
	}
	if len(l.buf) > 0 {
		if _, err := l.f.WriteAt(l.buf, l.written); err != nil {
			return l.fail(err)
		}
		l.written += int64(len(l.buf))
		l.buf = l.buf[:0]
	}
	return nil
}

// Sync writes what Append buffered and makes the log durable. An error
// leaves the log unusable: what it holds on disk is then unknown, and
// only reopening it (which reads back what is there) goes on.
//
// The file is extended ahead of the frames with zeros, made durable once
// per extension (64 KiB first, doubling up to 4 MiB): a sync of frames
// written over them then changes no file size, which on ext4 and xfs
// spares each sync a commit of the file system's journal (the frames end
// at the first zero, as at a torn tail).
func (l *Log) Sync() error {
	if l.err != nil {
		return l.err
	}
	if need := l.written + int64(len(l.buf)); need > l.allocated {
		if err := l.extend(need); err != nil {
			return err
		}
	}
	if err := l.Write(); err != nil {
		return err
	}
	return l.sync()
}

const (
	firstExtension = 64 << 10
	maxExtension   = 4 << 20
)

// extend writes zeros from the end of the frames to past need, and makes
// them durable.
func (l *Log) extend(need int64) error {
	n := min(max(l.allocated, firstExtension), maxExtension)
	for l.written+n < need {
		n += maxExtension
	}
	if _, err := l.f.WriteAt(make([]byte, l.written+n-max(l.allocated, l.written)), max(l.allocated, l.written)); err != nil {
		return l.fail(err)
	}
	if err := l.sync(); err != nil {
		return err
	}
	l.allocated = l.written + n
	return nil
}

func (l *Log) sync() error {
	l.syncs.Add(1)
	if err := l.f.Sync(); err != nil {
		return l.fail(err)
	}
	l.durable = l.written
	return nil
}

func (l *Log) fail(err error) error {
	l.err = fmt.Errorf("the write-ahead log failed: %w", err)
	return l.err
}

// Reset starts the log over once every entry it holds is durable
// elsewhere (a checkpoint): the next entry, numbered next, is written at
// the file's start. Nothing is written now, and the file keeps its size:
// its frames, all numbered below next, stay until new ones overwrite
// them. A crash before then leaves them whole or in part, and Open, told
// the database holds them, applies none of them again.
func (l *Log) Reset(next uint64) error {
	if l.err != nil {
		return l.err
	}
	if len(l.buf) > 0 {
		return errors.New("the write-ahead log is reset with entries not synced")
	}
	if next < l.next {
		return fmt.Errorf("the write-ahead log is reset to entry %d, below its next entry %d", next, l.next)
	}
	l.allocated = max(l.allocated, l.written)
	l.size, l.written, l.durable, l.next = 0, 0, 0, next
	return nil
}

// Close closes the log's file. Entries appended and not synced are lost.
func (l *Log) Close() error { return l.f.Close() }

// osFile is a File on an *os.File.
type osFile struct{ *os.File }

func (f osFile) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (f osFile) Sync() error { return fdatasync(f.File) }
