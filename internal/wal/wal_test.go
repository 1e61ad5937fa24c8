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
	l, got, err := wal.Open(path, 0)
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
	l, got, err = wal.Open(path, 0)
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
	l, _, err := wal.OpenFile(f, 0)
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
	l, _, _ := wal.OpenFile(f, 0)
	for _, p := range []string{"one", "two", "three"} {
		l.Append([]byte(p))
		l.Sync() // each its own group: entry 3 was written once 2 was durable
	}
	f.WriteAt([]byte{'X'}, 24+3+24) // the payload of entry 2
	if _, _, err := wal.OpenFile(f, 0); !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("Open of a damaged log: %v, want ErrCorrupt", err)
	}
	// Damage in the last group written is taken for a tail, as a crash
	// before its sync may leave it so (the disk may have written the
	// third entry's sector and not the second's): the log's limit, which
	// the sync boundaries recorded in later groups do not reach.
	f = crashfile.New()
	l, _, _ = wal.OpenFile(f, 0)
	for _, p := range []string{"one", "two", "three"} {
		l.Append([]byte(p))
	}
	l.Sync()
	f.WriteAt([]byte{'X'}, 24+3+24)
	if l, got, err := wal.OpenFile(f, 0); err != nil || len(got) != 1 || l.Next() != 2 {
		t.Fatalf("Open with a torn entry in the last group: %v %+v", err, got)
	}
	// The same damage in the last entry is a tail: dropped.
	f = crashfile.New()
	l, _, _ = wal.OpenFile(f, 0)
	for _, p := range []string{"one", "two", "three"} {
		l.Append([]byte(p))
	}
	l.Sync()
	f.WriteAt([]byte{'X'}, 24+3+24+3+24)
	l, got, err := wal.OpenFile(f, 0)
	if err != nil || len(got) != 2 || l.Next() != 3 {
		t.Fatalf("Open with a torn last entry: %v %+v next %d", err, got, l.Next())
	}
	if size, _ := f.Size(); size != 24+3+24+3 {
		t.Fatalf("the torn tail was not dropped from the file: size %d", size)
	}
}

// Thousands of crashes (2,000) at random points of a random run of appends,
// syncs and resets (each reset a checkpoint: the database then holds every
// entry so far, and the next entries overwrite the file from its start),
// each losing what was not synced in a random way. After each: every entry
// acknowledged (synced) since the last reset is read back, in order and
// intact; an entry read back from before it is one the database holds,
// intact; nothing is read back that was never appended; and the log goes
// on after the last entry it holds.
func TestLog_CrashAnywhere(t *testing.T) {
	runs := 2000
	if testing.Short() {
		runs = 300
	}
	resets := 0
	for run := range runs {
		rng := rand.New(rand.NewPCG(uint64(run), 7))
		f := crashfile.New()
		l, _, err := wal.OpenFile(f, 0)
		if err != nil {
			t.Fatal(err)
		}
		appended := map[uint64][]byte{}
		acked := uint64(0)   // entries up to this are durable
		applied := uint64(0) // the database holds the entries up to this (the last reset)
	ops:
		for range rng.IntN(60) {
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
				if err := l.Reset(l.Next()); err != nil {
					t.Fatalf("run %d: Reset: %v", run, err)
				}
				applied = acked
				resets++
			}
		}
		after := f.Crash(rng)
		l2, got, err := wal.OpenFile(after, applied)
		if err != nil {
			t.Fatalf("run %d: reopen after a crash: %v", run, err)
		}
		last := applied
		for i, e := range got {
			if i > 0 && e.Seq != got[i-1].Seq+1 {
				t.Fatalf("run %d: entry %d follows entry %d", run, e.Seq, got[i-1].Seq)
			}
			if e.Seq > applied && (i == 0 || got[i-1].Seq < applied) && e.Seq != applied+1 {
				t.Fatalf("run %d: the first entry after the reset at %d read back is %d", run, applied, e.Seq)
			}
			if !bytes.Equal(e.Payload, appended[e.Seq]) {
				t.Fatalf("run %d: entry %d read back changed", run, e.Seq)
			}
			last = max(last, e.Seq)
		}
		if last < acked {
			t.Fatalf("run %d: entries up to %d were synced, only up to %d read back", run, acked, last)
		}
		if len(got) > 0 && l2.Next() != got[len(got)-1].Seq+1 {
			t.Fatalf("run %d: next %d after entry %d", run, l2.Next(), got[len(got)-1].Seq)
		}
		// It goes on, as a store does on open: entries the database holds
		// already are passed by, and a new entry is durable and follows.
		want := len(got) + 1
		if last == applied {
			if err := l2.Reset(applied + 1); err != nil {
				t.Fatalf("run %d: Reset after reopen: %v", run, err)
			}
			want = 1
		}
		if _, err := l2.Append([]byte("after")); err != nil {
			t.Fatal(err)
		}
		if err := l2.Sync(); err != nil {
			t.Fatal(err)
		}
		if _, got2, err := wal.OpenFile(after, applied); err != nil || len(got2) != want || got2[len(got2)-1].Seq != last+1 {
			t.Fatalf("run %d: after a crash and one more entry: %v, %d entries, want %d ending at %d", run, err, len(got2), want, last+1)
		}
	}
	if resets < runs/2 {
		t.Fatalf("only %d resets in %d runs: the log's reuse went untested", resets, runs)
	}
}

// A reset log is reused: its file keeps its size, the next entries
// overwrite it from the start at one sync per group (no truncation, no
// extension), and the frames left beyond them end the log without being
// read back, even where the first new frame is torn (it was not synced).
func TestLog_ResetReusesTheFile(t *testing.T) {
	f := crashfile.New()
	l, _, _ := wal.OpenFile(f, 0)
	for i := range 20 {
		l.Append(bytes.Repeat([]byte{byte('a' + i)}, 100))
		l.Sync()
	}
	size, _ := f.Size()
	syncs := l.Syncs()
	if err := l.Reset(21); err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(20); err == nil {
		t.Fatal("Reset below the next entry: no error")
	}
	// Of the old frames' size: the third old frame starts where the new
	// ones end.
	l.Append(bytes.Repeat([]byte("1"), 100))
	l.Append(bytes.Repeat([]byte("2"), 100))
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if now, _ := f.Size(); now != size || l.Syncs() != syncs+1 {
		t.Fatalf("after a reset and a group: file %d bytes (was %d), %d syncs (was %d); want the same size and one sync", now, size, l.Syncs(), syncs)
	}
	_, got, err := wal.OpenFile(f.Crash(rand.New(rand.NewPCG(1, 1))), 20)
	if err != nil || len(got) != 2 || got[0].Seq != 21 || got[1].Payload[0] != '2' {
		t.Fatalf("reopened after the reset: %v %+v; want entries 21 and 22 only", err, got)
	}
	// The first frame after a reset torn: the old frames beyond it, with
	// their numbers and durable sizes, are not damage.
	l.Reset(23)
	l.Append(bytes.Repeat([]byte("x"), 300))
	l.Write()
	f.WriteAt([]byte{'X'}, 40) // the new frame's payload
	if _, got, err := wal.OpenFile(f, 22); err != nil || len(got) != 0 {
		t.Fatalf("reopened with the first frame after a reset torn: %v %+v; want an empty log", err, got)
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
		l, _, err := wal.Open(filepath.Join(dir, "log"), 0)
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
