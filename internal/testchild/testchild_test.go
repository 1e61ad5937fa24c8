package testchild

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The child is built in the temporary directory and Cleanup removes it:
// the temporary directory is as it was.
func TestCleanup_LeavesTheTempDirAsItWas(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	before, _ := filepath.Glob(filepath.Join(tmp, "*"))
	p := Path(t)
	if !strings.HasPrefix(p, tmp+string(filepath.Separator)) {
		t.Fatalf("the child %s is not in the temporary directory %s", p, tmp)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	Cleanup()
	after, _ := filepath.Glob(filepath.Join(tmp, "*"))
	if len(after) != len(before) {
		t.Fatalf("left in the temporary directory: %v (before: %v)", after, before)
	}
	if q := Path(t); q == p { // built again after a cleanup
		t.Fatalf("Path after Cleanup returned the removed %s", q)
	}
	Cleanup()
}

// Every test package that uses the child program runs its tests through
// Main, so that the program's directory is removed when they end.
func TestEveryUserRunsMain(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	uses, mains := map[string]bool{}, map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, filepath.Join(root, "internal", "testchild")) {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			if im.Path.Value == `"github.com/toolgate/toolgate/internal/testchild"` {
				uses[filepath.Dir(path)] = true
			}
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// testchild.Main(m), or a TestMain of its own (goleak's, say) that
		// calls testchild.Cleanup when the tests end.
		if strings.Contains(string(src), "testchild.Main(m)") || strings.Contains(string(src), "testchild.Cleanup()") {
			mains[filepath.Dir(path)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(uses) == 0 {
		t.Fatal("found no package using the test child")
	}
	for dir := range uses {
		if !mains[dir] {
			rel, _ := filepath.Rel(root, dir)
			t.Errorf("%s uses the test child but its TestMain calls neither testchild.Main(m) nor testchild.Cleanup(): the child's directory is left in the temporary directory", rel)
		}
	}
}
