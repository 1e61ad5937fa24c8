package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/tools"
)

// A committed staged write is done only in the directory the file was
// staged in: the directory replaced by a link to another one after the
// commit makes the rename fail (parked, reported), never a silent success
// that writes nothing (the staged file is not in the other directory, so
// it looked renamed already).
func TestFinishIntent_DirectorySwapped(t *testing.T) {
	base := t.TempDir()
	root, elsewhere := filepath.Join(base, "out"), filepath.Join(base, "elsewhere")
	for _, d := range []string{root, elsewhere} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	staged := tools.StagePrefix + "x"
	if err := os.WriteFile(filepath.Join(root, staged), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := fileIntent{Root: root, Staged: staged, Target: "report.txt"}
	var err error
	if in.Dev, in.Ino, err = rootIdentity(root, staged); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rootIdentity(elsewhere, staged); err == nil {
		t.Fatal("a directory without the staged file was taken as its directory")
	}

	if err := os.Rename(root, filepath.Join(base, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, root); err != nil {
		t.Fatal(err)
	}
	err = finishIntent(in)
	if err == nil || !strings.Contains(err.Error(), "no longer the directory") {
		t.Fatalf("finishIntent in a swapped directory: %v; want a refusal (the write parked)", err)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "report.txt")); err == nil {
		t.Error("the write landed in the directory swapped in")
	}

	// Put back, it is done.
	os.Remove(root)
	if err := os.Rename(filepath.Join(base, "moved"), root); err != nil {
		t.Fatal(err)
	}
	if err := finishIntent(in); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "report.txt")); err != nil || string(b) != "data" {
		t.Fatalf("after the rename: %q, %v", b, err)
	}
}
