package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// stagedLeft lists the staged files left in dir.
func stagedLeft(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if strings.HasPrefix(e.Name(), tools.StagePrefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

func writeOpts(dir string) *tgruntime.Options {
	return &tgruntime.Options{
		Grants:  map[string][]capability.Capability{"tester": {{Name: "filesystem.write", Scope: dir}, {Name: "state.write"}}},
		WorkDir: dir,
	}
}

func writeInput(path, content string) string {
	b, _ := json.Marshal(tools.FileWriteInput{Path: path, Content: content})
	return string(b)
}

func TestFileWrite_VisibleAtCommit(t *testing.T) {
	dir := t.TempDir()
	rt, _ := openRuntime(t, writeOpts(dir), tools.FileWrite())
	res, err := rt.Execute(context.Background(), invoke("file.write", writeInput("notes.txt", "hello")))
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Output) != `{"path":"notes.txt","size":5,"created":true}` {
		t.Errorf("output %s", res.Output)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "notes.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("after commit: %q, %v", b, err)
	}
	if _, err := rt.Execute(context.Background(), invoke("file.write", writeInput("notes.txt", "bye"))); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(b) != "bye" {
		t.Fatalf("replaced: %q", b)
	}
	if left := stagedLeft(t, dir); len(left) != 0 {
		t.Errorf("staged files left: %v", left)
	}
	for _, ns := range []string{"toolgate.files", "toolgate.staging"} {
		if vals, _ := tgruntime.StoreOf(rt).StateValues(context.Background(), ns); len(vals) != 0 {
			t.Errorf("%s: records left after the renames: %v", ns, vals)
		}
	}
}

// A failed or rolled back attempt leaves the files exactly as they were:
// the tool stages writes, then fails (and, separately, times out).
func TestFileWrite_RollbackLeavesFilesAsTheyWere(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("original"), 0o600); err != nil {
		t.Fatal(err)
	}
	fail := func(id string, end func(ctx context.Context) error) tools.Tool {
		return tool(decl(id, func(d *tools.Declaration) {
			d.RequiredCapabilities = []capability.Capability{{Name: "filesystem.write", Scope: dir}}
			d.ResourceLimits.MaxExecutionTime = 200e6
		}), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			for _, p := range []string{"keep.txt", "new.txt"} {
				if _, err := env.FS("filesystem.write").WriteStaged(p, []byte("changed"), 0o644); err != nil {
					return msg{}, err
				}
			}
			return in, end(ctx)
		})
	}
	rt, _ := openRuntime(t, writeOpts(dir),
		fail("test.fails", func(context.Context) error { return errors.New("boom") }),
		fail("test.times_out", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }),
	)
	for _, id := range []string{"test.fails", "test.times_out"} {
		res, err := rt.Execute(context.Background(), invoke(id, `{"msg":"x"}`))
		if err == nil || res.State != lifecycle.RolledBack {
			t.Fatalf("%s: %v, %s", id, err, res.State)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "keep.txt")); string(b) != "original" {
			t.Errorf("%s: keep.txt holds %q", id, b)
		}
		if _, err := os.Stat(filepath.Join(dir, "new.txt")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: new.txt exists", id)
		}
		if left := stagedLeft(t, dir); len(left) != 0 {
			t.Errorf("%s: staged files left: %v", id, left)
		}
		if vals, _ := tgruntime.StoreOf(rt).StateValues(context.Background(), "toolgate.staging"); len(vals) != 0 {
			t.Errorf("%s: pending records left: %v", id, vals)
		}
	}
}

// A tool that ignores its deadline and stages a file after its attempt
// was rolled back is refused: nothing is left behind for Open to find.
// (The stager also refuses between discarding the attempt's staged files
// and the end of its transaction; that window is too short to hit here.)
func TestFileWrite_AbandonedToolCannotStage(t *testing.T) {
	dir := t.TempDir()
	late := make(chan error, 1)
	release := make(chan struct{})
	tl := tool(decl("test.late", func(d *tools.Declaration) {
		d.RequiredCapabilities = []capability.Capability{{Name: "filesystem.write", Scope: dir}}
		d.ResourceLimits.MaxExecutionTime = 50e6
	}), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		<-release // past the deadline: the attempt has been rolled back
		_, err := env.FS("filesystem.write").WriteStaged("late.txt", []byte("late"), 0o644)
		late <- err
		return in, err
	})
	rt, _ := openRuntime(t, writeOpts(dir), tl)
	res, err := rt.Execute(context.Background(), invoke("test.late", `{"msg":"x"}`))
	if err == nil || res.State != lifecycle.RolledBack {
		t.Fatalf("Execute = %v, %s; want the timeout", err, res.State)
	}
	close(release)
	if err := <-late; err == nil {
		t.Fatal("a staged write after the rollback succeeded")
	}
	if left := stagedLeft(t, dir); len(left) != 0 {
		t.Errorf("staged files left: %v", left)
	}
	if vals, _ := tgruntime.StoreOf(rt).StateValues(context.Background(), "toolgate.staging"); len(vals) != 0 {
		t.Errorf("pending records left: %v", vals)
	}
}

// A crash between the commit and the rename is finished when the database
// is next opened.
func TestFileWrite_CrashBetweenCommitAndRename(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("before"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := writeOpts(dir)
	rt, path := openRuntime(t, opts, tools.FileWrite())
	tgruntime.SkipStagedApply(rt)
	res, err := rt.Execute(context.Background(), invoke("file.write", writeInput("a.txt", "after")))
	if err != nil || res.State != lifecycle.Completed {
		t.Fatalf("%v, %s", err, res.State)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "before" {
		t.Fatalf("the 'crash' came too late: %q", b)
	}
	if len(stagedLeft(t, dir)) != 1 {
		t.Fatal("no staged file waiting")
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	rt2, err := reopen(path, opts, tools.FileWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close(context.Background())
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "after" {
		t.Errorf("after reopening: %q; the committed write was not finished", b)
	}
	if left := stagedLeft(t, dir); len(left) != 0 {
		t.Errorf("staged files left: %v", left)
	}
	if vals, _ := tgruntime.StoreOf(rt2).StateValues(context.Background(), "toolgate.files"); len(vals) != 0 {
		t.Errorf("intents left: %v", vals)
	}
}

func TestFileWrite_Refusals(t *testing.T) {
	dir := t.TempDir()
	rt, _ := openRuntime(t, writeOpts(dir), tools.FileWrite(),
		tool(decl("test.sneak", func(d *tools.Declaration) {
			d.RequiredCapabilities = []capability.Capability{{Name: "state.write"}}
		}), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			return in, env.State.Put("toolgate.files", "x", []byte(`{"root":"/","staged":"etc/x","target":"etc/passwd"}`))
		}))
	res, err := rt.Execute(context.Background(), invoke("file.write", writeInput("big.txt", strings.Repeat("x", 1<<20+1))))
	var re *tgruntime.ResourceError
	if !errors.As(err, &re) || re.Resource != "file_size_limit" || res.State != lifecycle.RolledBack {
		t.Errorf("over maxFileSize: %v", err)
	}
	// Out of the grant: denied at rule 2, before anything runs (its path is
	// the tool's input capability).
	if res, err := rt.Execute(context.Background(), invoke("file.write", writeInput("../escape.txt", "x"))); !errors.Is(err, tgruntime.ErrAuthorization) || res.State != lifecycle.Denied {
		t.Errorf("../escape.txt: %v", err)
	}
	if _, err := rt.Execute(context.Background(), invoke("test.sneak", `{"msg":"x"}`)); !errors.Is(err, tools.ErrAccessDenied) {
		t.Errorf("a tool wrote the runtime's namespace: %v", err)
	}
	if left := stagedLeft(t, dir); len(left) != 0 {
		t.Errorf("staged files left: %v", left)
	}
}

// A crash while a tool runs leaves its staged files behind, recorded as
// pending: the next Open removes them (their attempt never committed), and
// leaves every other file alone.
func TestFileWrite_CrashDuringExecutionCleansStagedFiles(t *testing.T) {
	dir := t.TempDir()
	opts := writeOpts(dir)
	rt, path := openRuntime(t, opts, tools.FileWrite())
	staged := tools.StagePrefix + "0123456789abcdef-a.txt"
	for _, name := range []string{staged, "a.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	store := tgruntime.StoreOf(rt)
	ctx := context.Background()
	for key, in := range map[string]string{
		"exec-1/0": `{"root":"` + dir + `","staged":"` + staged + `"}`,
		"exec-1/1": `{"root":"` + dir + `","staged":"a.txt"}`, // not a staged name: never removed
	} {
		if err := store.PutState(ctx, "toolgate.staging", key, []byte(in)); err != nil {
			t.Fatal(err)
		}
	}
	rt.Close(ctx)
	rt2, err := reopen(path, opts, tools.FileWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close(ctx)
	if left := stagedLeft(t, dir); len(left) != 0 {
		t.Errorf("staged files left: %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.txt")); err != nil {
		t.Errorf("a.txt: %v; recovery removed a file that is not a staged one", err)
	}
	if vals, _ := tgruntime.StoreOf(rt2).StateValues(ctx, "toolgate.staging"); len(vals) != 0 {
		t.Errorf("pending records left: %v", vals)
	}
}

// After a crash, the committed writes of one file are finished in the
// order they were made: the last one wins, as it would have without the
// crash.
func TestFileWrite_RecoveryKeepsTheOrderOfWrites(t *testing.T) {
	dir := t.TempDir()
	opts := writeOpts(dir)
	many := tool(decl("test.many", func(d *tools.Declaration) {
		d.RequiredCapabilities = []capability.Capability{{Name: "filesystem.write", Scope: dir}}
	}), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		for i := range 11 {
			if _, err := env.FS("filesystem.write").WriteStaged("f.txt", []byte(strconv.Itoa(i)), 0o644); err != nil {
				return msg{}, err
			}
		}
		return in, nil
	})
	rt, path := openRuntime(t, opts, many)
	tgruntime.SkipStagedApply(rt)
	if _, err := rt.Execute(context.Background(), invoke("test.many", `{"msg":"x"}`)); err != nil {
		t.Fatal(err)
	}
	rt.Close(context.Background())
	rt2, err := reopen(path, opts, many)
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close(context.Background())
	if b, _ := os.ReadFile(filepath.Join(dir, "f.txt")); string(b) != "10" {
		t.Fatalf("f.txt holds %q after recovery; want the last write, 10", b)
	}
}

// A committed write whose rename cannot be done (a directory now sits at
// the target) is parked, with its staged file, and does not stop Open.
func TestFileWrite_UnfinishableRenameIsParked(t *testing.T) {
	dir := t.TempDir()
	opts := writeOpts(dir)
	rt, path := openRuntime(t, opts, tools.FileWrite())
	tgruntime.SkipStagedApply(rt)
	if _, err := rt.Execute(context.Background(), invoke("file.write", writeInput("a.txt", "x"))); err != nil {
		t.Fatal(err)
	}
	rt.Close(context.Background())
	if err := os.MkdirAll(filepath.Join(dir, "a.txt", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt2, err := reopen(path, opts, tools.FileWrite())
	if err != nil {
		t.Fatalf("Open refused over a rename it cannot do: %v", err)
	}
	defer rt2.Close(context.Background())
	ctx := context.Background()
	if vals, _ := tgruntime.StoreOf(rt2).StateValues(ctx, "toolgate.files"); len(vals) != 0 {
		t.Errorf("the intent is still pending: %v", vals)
	}
	parked, _ := tgruntime.StoreOf(rt2).StateValues(ctx, tgruntime.FailedWritesNamespace)
	if len(parked) != 1 || len(stagedLeft(t, dir)) != 1 {
		t.Fatalf("parked %v, staged files %v; want the write parked with its staged file", parked, stagedLeft(t, dir))
	}
}

// reopen opens the database at path again, as after a crash, with opts and
// a registry of ts.
func reopen(path string, opts *tgruntime.Options, ts ...tools.Tool) (*tgruntime.Runtime, error) {
	reg := tools.NewRegistry()
	for _, tl := range ts {
		if err := reg.Register(tl); err != nil {
			return nil, err
		}
	}
	opts.Registry = reg
	return tgruntime.Open(path, opts)
}
