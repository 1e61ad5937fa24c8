package wal_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/internal/wal"
	"github.com/toolgate/toolgate/internal/wal/crashfile"
)

func TestLog_RoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, got, err := wal.Open(path)
	if err != nil || len(got) != 0 || l.Next() != 1 {
		t.Fatalf("Open new: %v %v next %d", err, got, l.Next())
	}
	for i := range 3 {
		if seq, err := l.Append([]byte(fmt.Sprint("entry ", i))); err != nil || seq != uint64(i+1) {
			t.Fatalf("Append %d: %d %v", i, seq, err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	// One sync for the group, one for the zeros the file is first
	// extended with; the next group, written over them, costs one.
	if l.Syncs() != 2 {
		t.Errorf("Syncs = %d, want 2 for the first group", l.Syncs())
	}
	l.Append([]byte("entry 3"))
	if err := l.Sync(); err != nil || l.Syncs() != 3 {
		t.Errorf("Syncs = %d (%v), want 3 after a second group", l.Syncs(), err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 64<<10 {
		t.Errorf("the log's file: %v, want 64 KiB extended ahead", err)
	}
	l.Append([]byte("not synced")) // buffered: a Close loses it
	l.Close()
	l, got, err = wal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if len(got) != 4 || string(got[2].Payload) != "entry 2" || got[2].Seq != 3 || l.Next() != 5 {
		t.Fatalf("reopened: %+v, next %d", got, l.Next())
	}
}

// Reset empties the log and numbers on from the number it is given; an
// empty entry or a log whose Sync failed refuses to append.
func TestLog_ResetAndRefusals(t *testing.T) {
	f := crashfile.New()
	l, _, err := wal.OpenFile(f)
	if err != nil {
		t.Fatal(err)
	}
	l.Append([]byte("a"))
	if err := l.Reset(9); err == nil {
		t.Fatal("Reset with an entry not synced: no error")
	}
	l.Sync()
	if err := l.Reset(9); err != nil || l.Size() != 0 {
		t.Fatalf("Reset: %v, size %d", err, l.Size())
	}
	if seq, _ := l.Append([]byte("b")); seq != 9 {
		t.Fatalf("after Reset(9) the next entry is %d", seq)
	}
	if _, err := l.Append(nil); err == nil {
		t.Fatal("an empty entry was appended")
	}
	f.FailSync = syscall.EIO
	if err := l.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync with EIO: %v", err)
	}
	if _, err := l.Append([]byte("c")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Append after a failed Sync: %v, want the failure again", err)
	}
	if err := l.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync after a failed Sync: %v, want the failure again", err)
	}
}

// A damaged entry followed by a whole later one is not a crash's tail:
// Open refuses the log rather than drop what follows.
func TestLog_DamageIsNotATail(t *testing.T) {
	f := crashfile.New()
	l, _, _ := wal.OpenFile(f)
	for _, p := range []string{"one", "two", "three"} {
		l.Append([]byte(p))
		l.Sync() // each its own group: entry 3 was written once 2 was durable
	}
	f.WriteAt([]byte{'X'}, 24+3+24) // the payload of entry 2
	if _, _, err := wal.OpenFile(f); !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("Open of a damaged log: %v, want ErrCorrupt", err)
	}
	// Damage in the last group written is taken for a tail, as a crash
	// before its sync may leave it so (the disk may have written the
	// third entry's sector and not the second's): the log's limit, which
	// the sync boundaries recorded in later groups do not reach.
	f = crashfile.New()
	l, _, _ = wal.OpenFile(f)
	for _, p := range []string{"one", "two", "three"} {
		l.Append([]byte(p))
	}
	l.Sync()
	f.WriteAt([]byte{'X'}, 24+3+24)
	if l, got, err := wal.OpenFile(f); err != nil || len(got) != 1 || l.Next() != 2 {
		t.Fatalf("Open with a torn entry in the last group: %v %+v", err, got)
	}
	// The same damage in the last entry is a tail: dropped.
	f = crashfile.New()
	l, _, _ = wal.OpenFile(f)
	for _, p := range []string{"one", "two", "three"} {
		l.Append([]byte(p))
	}
	l.Sync()
	f.WriteAt([]byte{'X'}, 24+3+24+3+24)
	l, got, err := wal.OpenFile(f)
	if err != nil || len(got) != 2 || l.Next() != 3 {
		t.Fatalf("Open with a torn last entry: %v %+v next %d", err, got, l.Next())
	}
	if size, _ := f.Size(); size != 24+3+24+3 {
		t.Fatalf("the torn tail was not dropped from the file: size %d", size)
	}
}

// Thousands of crashes (2,000) at random points of a random run of appends,
// syncs and resets, each losing what was not synced in a random way:
// every entry acknowledged (synced) since the last reset is read back,
// in order and intact, nothing is read back that was never appended, and
// the log goes on numbering after the last entry it holds.
func TestLog_CrashAnywhere(t *testing.T) {
	runs := 2000
	if testing.Short() {
		runs = 300
	}
	for run := range runs {
		rng := rand.New(rand.NewPCG(uint64(run), 7))
		f := crashfile.New()
		l, _, err := wal.OpenFile(f)
		if err != nil {
			t.Fatal(err)
		}
		appended := map[uint64][]byte{}
		acked := uint64(0)   // entries up to this are durable
		base := uint64(1)    // the first entry since the last reset
		oldBase := uint64(0) // a Reset failed: the entries from here may stay
	ops:
		for range rng.IntN(40) {
			if rng.IntN(25) == 0 { // the disk fails the next sync: a crash follows
				f.FailSync = syscall.EIO
			}
			switch k := rng.IntN(10); {
			case k < 6:
				p := bytes.Repeat([]byte{byte(rng.Uint32())}, 1+rng.IntN(1500))
				seq, err := l.Append(p)
				if err != nil {
					t.Fatal(err)
				}
				appended[seq] = p
			case k < 9:
				if err := l.Sync(); err != nil {
					break ops // not acknowledged
				}
				acked = l.Next() - 1
			default:
				if err := l.Sync(); err != nil {
					break ops
				}
				acked = l.Next() - 1
				next := l.Next()
				if err := l.Reset(next); err != nil {
					// Truncated, not synced: the old entries, all
					// applied already, may stay or go.
					oldBase = base
					base = next
					break ops
				}
				base = next
			}
		}
		after := f.Crash(rng)
		l2, got, err := wal.OpenFile(after)
		if err != nil {
			t.Fatalf("run %d: reopen after a crash: %v", run, err)
		}
		if oldBase != 0 && len(got) > 0 && got[0].Seq < base {
			base = oldBase // the failed Reset left the old entries
		}
		last := base - 1
		for i, e := range got {
			if e.Seq != base+uint64(i) {
				t.Fatalf("run %d: entry %d read back as number %d, want %d", run, i, e.Seq, base+uint64(i))
			}
			if !bytes.Equal(e.Payload, appended[e.Seq]) {
				t.Fatalf("run %d: entry %d read back changed", run, e.Seq)
			}
			last = e.Seq
		}
		if last < acked && (oldBase == 0 || len(got) > 0) {
			t.Fatalf("run %d: entries up to %d were synced, only up to %d read back", run, acked, last)
		}
		if l2.Next() != last+1 && len(got) > 0 {
			t.Fatalf("run %d: next %d after entry %d", run, l2.Next(), last)
		}
		// It goes on: a new entry is durable and follows.
		if _, err := l2.Append([]byte("after")); err != nil {
			t.Fatal(err)
		}
		if err := l2.Sync(); err != nil {
			t.Fatal(err)
		}
		if _, got2, err := wal.OpenFile(after); err != nil || len(got2) != len(got)+1 {
			t.Fatalf("run %d: after a crash and one more entry: %v, %d entries, want %d", run, err, len(got2), len(got)+1)
		}
	}
}

// One entry and its sync, against the floor: a write and fdatasync of the
// same bytes on a file of the same directory, in the same run.
func BenchmarkAppendSync(b *testing.B) {
	dir := b.TempDir()
	payload := bytes.Repeat([]byte("x"), 600) // about a claim's group
	b.Run("floor", func(b *testing.B) {
		f, err := os.OpenFile(filepath.Join(dir, "floor"), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		var off int64
		for b.Loop() {
			if _, err := f.WriteAt(payload, off); err != nil {
				b.Fatal(err)
			}
			off += int64(len(payload))
			if err := syscall.Fdatasync(int(f.Fd())); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("log", func(b *testing.B) {
		l, _, err := wal.Open(filepath.Join(dir, "log"))
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		for b.Loop() {
			if _, err := l.Append(payload); err != nil {
				b.Fatal(err)
			}
			if err := l.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
