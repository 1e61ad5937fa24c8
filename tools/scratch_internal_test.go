package tools

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// The fresh working directories: each make gives a directory no other make
// gave, the spare made ahead included, also to concurrent callers; a spare
// that is gone or was replaced by a link is not given, a new directory is;
// settle leaves nothing.
func TestScratchDirs_FreshEachTime(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	s := newScratchDirs()
	idle := func() string {
		s.mu.Lock()
		defer s.mu.Unlock()
		for s.busy > 0 {
			s.idle.Wait()
		}
		return s.spares[tmp]
	}
	mk := func() string {
		d, err := s.make()
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
			t.Fatalf("make gave %s, not a directory (%v)", d, err)
		}
		return d
	}
	given := map[string]bool{}
	give := func(d string) {
		if given[d] {
			t.Fatalf("%s given twice", d)
		}
		given[d] = true
	}

	give(mk())
	spare := idle()
	if spare == "" {
		t.Fatal("no spare made after a make")
	}
	if d := mk(); d != spare {
		t.Fatalf("make gave %s, not the spare %s", d, spare)
	} else {
		give(d)
	}

	// A spare removed meanwhile (a temporary-file cleaner), or replaced by
	// a link to another directory.
	spare = idle()
	if err := os.Remove(spare); err != nil {
		t.Fatal(err)
	}
	if d := mk(); d == spare {
		t.Fatal("make gave a spare that was removed")
	} else {
		give(d)
	}
	spare = idle()
	other := t.TempDir()
	if err := os.Remove(spare); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, spare); err != nil {
		t.Fatal(err)
	}
	if d := mk(); d == spare {
		t.Fatal("make gave a link put in the spare's place")
	} else {
		give(d)
	}
	if err := os.Remove(spare); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	dirs := make([]string, 32)
	for i := range dirs {
		wg.Go(func() {
			d, err := s.make()
			if err != nil {
				t.Error(err)
			}
			dirs[i] = d
		})
	}
	wg.Wait()
	for _, d := range dirs {
		give(d)
	}

	for d := range given {
		if err := os.WriteFile(filepath.Join(d, "left"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		s.remove(d)
	}
	s.settle()
	if left, _ := filepath.Glob(filepath.Join(tmp, "*")); len(left) != 0 {
		t.Fatalf("left after settle: %v", left)
	}
}
