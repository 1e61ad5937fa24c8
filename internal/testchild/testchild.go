// Package testchild builds the child program that tests of process tools
// and limits run as a real process: one binary, built once per test
// process, without the race detector, in a temporary directory that Main
// removes when the tests end. Only tests use it: every test package that
// calls Path runs its tests through Main (TestEveryUserRunsMain checks).
package testchild

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built string // the directory holding the child, once built
)

// build builds the child once; after Cleanup, it builds it again.
func build() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if built != "" {
		return filepath.Join(built, "child"), nil
	}
	dir, err := os.MkdirTemp("", "toolgate-testchild-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "child")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "build", "-o", path, "github.com/toolgate/toolgate/internal/testchild/child").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", errors.New("building the test child: " + err.Error() + "\n" + string(out))
	}
	built = dir
	return path, nil
}

// Cleanup removes the child program's directory, if it was built.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if built != "" {
		os.RemoveAll(built)
		built = ""
	}
}

// Main runs the tests of a package that uses the child program, then
// removes it, and exits with the tests' status: call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// Path returns the absolute path of the child program, building it on the
// first call; it fails tb if it cannot be built. The modes are listed in
// the child's package documentation (internal/testchild/child).
func Path(tb testing.TB) string {
	tb.Helper()
	p, err := build()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
