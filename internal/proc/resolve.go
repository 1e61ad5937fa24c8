package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Resolve finds the executable that name runs, as an absolute path, and
// says how it was found ("absolute path" or "PATH entry /usr/bin").
//
// An absolute name is checked as it is. A bare name (no slash) is looked up
// in the absolute entries of pathEnv, a colon-separated list as in the PATH
// variable, in order; the first regular file with an execute bit that this
// process may execute wins. Empty and relative entries ("", ".", "bin") are
// refused: they would resolve against the working directory, which is how
// a planted file shadows a real command. If the only match is under such an
// entry, the error says so. A name with a slash that is not absolute
// ("./x", "bin/x") is refused for the same reason.
//
// The error is a *LaunchError of kind KindNotFound, KindNotExecutable or
// KindOther (for a name that is refused before any lookup).
func Resolve(name, pathEnv string) (abs, how string, err error) {
	switch {
	case name == "":
		return "", "", &LaunchError{Kind: KindOther, Command: name, Reason: "empty command name"}
	case strings.ContainsRune(name, 0):
		return "", "", &LaunchError{Kind: KindOther, Command: name, Reason: "command name contains a NUL byte"}
	case filepath.IsAbs(name):
		p := filepath.Clean(name)
		if kind, why, err := checkExecutable(p); kind != "" {
			return "", "", &LaunchError{Kind: kind, Command: name, Reason: why, Err: err}
		}
		return p, "absolute path", nil
	case strings.Contains(name, "/"):
		return "", "", &LaunchError{Kind: KindOther, Command: name,
			Reason: "relative path refused: give a bare command name (looked up in PATH) or an absolute path"}
	}

	var (
		refused    []string // relative entries that hold a candidate
		notExec    string   // the first candidate that is not executable
		notExecWhy string
		notExecErr error
		searched   int
	)
	for _, dir := range filepath.SplitList(pathEnv) {
		if !filepath.IsAbs(dir) {
			// Look, only to say so in the error; never run it.
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				shown := dir
				if shown == "" {
					shown = `"" (empty)`
				} else {
					shown = fmt.Sprintf("%q", dir)
				}
				refused = append(refused, shown)
			}
			continue
		}
		searched++
		p := filepath.Join(dir, name)
		kind, why, err := checkExecutable(p)
		switch kind {
		case "":
			return p, "PATH entry " + dir, nil
		case KindNotExecutable:
			if notExec == "" {
				notExec, notExecWhy, notExecErr = p, why, err
			}
		}
	}
	if notExec != "" {
		return "", "", &LaunchError{Kind: KindNotExecutable, Command: name,
			Reason: notExec + ": " + notExecWhy, Err: notExecErr}
	}
	reason := fmt.Sprintf("not in the %d absolute entries of PATH", searched)
	if searched == 0 {
		reason = "PATH has no absolute entries"
	}
	if len(refused) > 0 {
		reason += "; a file of that name exists under the relative PATH entry " + strings.Join(refused, ", ") +
			", which is refused because it would resolve against the working directory"
	}
	return "", "", &LaunchError{Kind: KindNotFound, Command: name, Reason: reason, Err: fs.ErrNotExist}
}

// checkExecutable returns "" if p is a regular file this process may
// execute, else the kind of failure and why.
func checkExecutable(p string) (LaunchKind, string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return KindNotFound, "no such file", fs.ErrNotExist
		}
		return KindNotExecutable, "cannot stat", err
	}
	if fi.IsDir() {
		return KindNotExecutable, "is a directory", nil
	}
	if !fi.Mode().IsRegular() {
		return KindNotExecutable, "not a regular file (" + fi.Mode().Type().String() + ")", nil
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return KindNotExecutable, fmt.Sprintf("no execute permission (mode %v)", fi.Mode().Perm()), nil
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return KindNotExecutable, "execute permission denied", err
	}
	return "", "", nil
}
