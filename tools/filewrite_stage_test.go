package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
)

// funcStager is a tools.Stager built from func fields; a nil field does
// nothing (and the staged file then stays where it was written).
type funcStager struct {
	prepare func(root, staged string) error
	stage   func(root, staged, target string) error
}

func (s funcStager) Prepare(root, staged string) error {
	if s.prepare == nil {
		return nil
	}
	return s.prepare(root, staged)
}

func (s funcStager) Stage(root, staged, target string) error {
	if s.stage == nil {
		return nil
	}
	return s.stage(root, staged, target)
}

// writeStaged runs file.write of content to name (relative to dir, which
// filesystem.write is granted on) with stager.
func writeStaged(t *testing.T, dir, name, content string, stager tools.Stager) error {
	t.Helper()
	w := tools.FileWrite()
	env := &tools.Env{Grants: []capability.Capability{{Name: "filesystem.write", Scope: dir}}, WorkDir: dir,
		Limits: w.Declaration().ResourceLimits, Stager: stager}
	defer env.Close()
	in, _ := json.Marshal(tools.FileWriteInput{Path: name, Content: content})
	_, err := w.Execute(context.Background(), env, in)
	return err
}

// checkNamesTarget fails t unless err names the user's path (name) and
// not the staged file's (a name the user never chose), and no staged file
// is left in dir.
func checkNamesTarget(t *testing.T, err error, dir, name string) {
	t.Helper()
	if err == nil {
		t.Fatal("the write did not fail")
	}
	if msg := err.Error(); strings.Contains(msg, tools.StagePrefix) || !strings.Contains(msg, name) {
		t.Errorf("the error does not name %q alone: %q", name, msg)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*", tools.StagePrefix+"*"))
	top, _ := filepath.Glob(filepath.Join(dir, tools.StagePrefix+"*"))
	if left = append(left, top...); len(left) > 0 {
		t.Errorf("staged files left: %v", left)
	}
}

// A file.write that fails once its staged file is being made says which
// file it could not write: the path the user gave, never the staged
// file's name (".toolgate-stage-..."), which the user never chose; the
// error keeps its cause for errors.Is.
func TestFileWrite_StagedErrorsNameTheTarget(t *testing.T) {
	t.Run("the staged file cannot be created", func(t *testing.T) {
		dir := t.TempDir()
		must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
		// Something takes the staged file's name before it is created
		// (O_EXCL): its creation fails.
		err := writeStaged(t, dir, "sub/notes.txt", "hello", funcStager{prepare: func(root, staged string) error {
			return os.Mkdir(filepath.Join(root, staged), 0o755)
		}})
		if !errors.Is(err, fs.ErrExist) {
			t.Errorf("err = %v, want one that is fs.ErrExist", err)
		}
		if msg := err.Error(); strings.Contains(msg, tools.StagePrefix) || !strings.Contains(msg, "sub/notes.txt") {
			t.Errorf("the error does not name sub/notes.txt alone: %q", msg)
		}
	})
	t.Run("the directory is not writable", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root writes in any directory; the other cases fail the staged file as root")
		}
		dir := t.TempDir()
		sub := filepath.Join(dir, "sub")
		must(t, os.Mkdir(sub, 0o500))
		t.Cleanup(func() { os.Chmod(sub, 0o700) })
		err := writeStaged(t, dir, "sub/notes.txt", "hello", funcStager{})
		if !errors.Is(err, fs.ErrPermission) {
			t.Errorf("err = %v, want one that is fs.ErrPermission", err)
		}
		checkNamesTarget(t, err, dir, "sub/notes.txt")
	})
	t.Run("the stager refuses", func(t *testing.T) {
		dir := t.TempDir()
		errChanged := errors.New("the directory changed while the tool ran")
		err := writeStaged(t, dir, "notes.txt", "hello", funcStager{stage: func(root, staged, target string) error {
			// As the runtime's stager says it (runtime/stage.go, rootIdentity).
			return fmt.Errorf("runtime: the staged file %s is not in %s: %w", staged, root, errChanged)
		}})
		if !errors.Is(err, errChanged) {
			t.Errorf("err = %v, want one that is the stager's", err)
		}
		checkNamesTarget(t, err, dir, "notes.txt")
	})
	t.Run("the write fails (file too large)", func(t *testing.T) {
		// A child (this test, run again) whose files cannot grow past 4
		// bytes (RLIMIT_FSIZE, set in the child only) writes 5.
		if dir := os.Getenv("TOOLGATE_TOOLS_FSIZE_CHILD"); dir != "" {
			signal.Ignore(syscall.SIGXFSZ) // the write then fails with EFBIG
			must(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 4, Max: 4}))
			err := writeStaged(t, dir, "notes.txt", "hello", funcStager{})
			if !errors.Is(err, syscall.EFBIG) {
				t.Errorf("err = %v, want one that is EFBIG", err)
			}
			checkNamesTarget(t, err, dir, "notes.txt")
			return
		}
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestFileWrite_StagedErrorsNameTheTarget$/^the_write_fails", "-test.v")
		cmd.Env = append(os.Environ(), "TOOLGATE_TOOLS_FSIZE_CHILD="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestFileWrite_StagedErrorsNameTheTarget/the_write_fails") {
			t.Fatalf("child: %v\n%s", err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "notes.txt")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("notes.txt exists after a failed write: %v", err)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
