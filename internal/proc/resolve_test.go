package proc_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/proc"
)

func writeFile(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), mode); err != nil {
		t.Fatal(err)
	}
}

// Not parallel: it changes the working directory, which is what relative
// PATH entries would resolve against.
func TestResolve(t *testing.T) {
	root := t.TempDir()
	cwd := filepath.Join(root, "cwd")
	bin := filepath.Join(root, "bin")
	noexec := filepath.Join(root, "noexec")
	writeFile(t, filepath.Join(cwd, "tgtool"), 0o755)        // the planted file
	writeFile(t, filepath.Join(cwd, "bin", "tgtool"), 0o755) // under a relative entry with a slash
	writeFile(t, filepath.Join(bin, "tgtool"), 0o755)
	writeFile(t, filepath.Join(noexec, "tgtool"), 0o644)
	writeFile(t, filepath.Join(noexec, "only"), 0o644)
	t.Chdir(cwd)

	for _, tc := range []struct {
		name, cmd, path string
		want, how       string          // on success
		kind            proc.LaunchKind // on failure
		errHas          []string
	}{
		{name: "absolute", cmd: filepath.Join(bin, "tgtool"), want: filepath.Join(bin, "tgtool"), how: "absolute path"},
		{name: "absolute unclean", cmd: bin + "/../bin/tgtool", want: filepath.Join(bin, "tgtool"), how: "absolute path"},
		{name: "PATH", cmd: "tgtool", path: bin, want: filepath.Join(bin, "tgtool"), how: "PATH entry " + bin},
		{name: "dot first is skipped", cmd: "tgtool", path: ".:" + bin, want: filepath.Join(bin, "tgtool"), how: "PATH entry " + bin},
		{name: "not executable skipped", cmd: "tgtool", path: noexec + ":" + bin, want: filepath.Join(bin, "tgtool"), how: "PATH entry " + bin},
		{name: "dot refused", cmd: "tgtool", path: ".:/nonexistent", kind: proc.KindNotFound,
			errHas: []string{`"."`, "relative PATH entry", "working directory"}},
		{name: "empty entry refused", cmd: "tgtool", path: ":/nonexistent", kind: proc.KindNotFound,
			errHas: []string{"(empty)", "working directory"}},
		{name: "relative entry refused", cmd: "tgtool", path: "bin", kind: proc.KindNotFound,
			errHas: []string{`"bin"`, "PATH has no absolute entries"}},
		{name: "not found", cmd: "tgtool-missing", path: bin, kind: proc.KindNotFound, errHas: []string{"not in the 1 absolute entries"}},
		{name: "only not executable", cmd: "only", path: noexec, kind: proc.KindNotExecutable, errHas: []string{"no execute permission"}},
		{name: "absolute not executable", cmd: filepath.Join(noexec, "only"), kind: proc.KindNotExecutable},
		{name: "directory", cmd: bin, kind: proc.KindNotExecutable, errHas: []string{"directory"}},
		{name: "absolute missing", cmd: filepath.Join(bin, "missing"), kind: proc.KindNotFound},
		{name: "relative with slash", cmd: "./tgtool", path: ".", kind: proc.KindOther, errHas: []string{"relative path refused"}},
		{name: "empty", cmd: "", path: bin, kind: proc.KindOther},
		{name: "NUL", cmd: "tg\x00tool", path: bin, kind: proc.KindOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			abs, how, err := proc.Resolve(tc.cmd, tc.path)
			if tc.kind == "" {
				if err != nil || abs != tc.want || how != tc.how {
					t.Fatalf("Resolve(%q, %q) = %q, %q, %v; want %q, %q", tc.cmd, tc.path, abs, how, err, tc.want, tc.how)
				}
				return
			}
			var le *proc.LaunchError
			if !errors.As(err, &le) || le.Kind != tc.kind || abs != "" {
				t.Fatalf("Resolve(%q, %q) = %q, %v; want a *LaunchError of kind %s", tc.cmd, tc.path, abs, err, tc.kind)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}

	// Run resolves with the PATH of the spec's environment: the planted
	// file in the working directory never runs.
	res, err := prlimitRunner(t).Run(context.Background(), proc.Spec{Path: "tgtool", Dir: cwd, Env: []string{"PATH=.:" + root}})
	if !errors.Is(err, proc.ErrNotFound) || res != nil || !strings.Contains(err.Error(), `"."`) {
		t.Errorf("Run with PATH=. = %v, %v; want not found, naming the refused entry", res, err)
	}
}
