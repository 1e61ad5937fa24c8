package tools_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
)

func writeEnv(t *testing.T, maxFileSize int64) (*tools.Env, fsTree) {
	t.Helper()
	tr := newFSTree(t)
	env := &tools.Env{
		Grants:  []capability.Capability{fsRead("filesystem.write", tr.data), fsRead("filesystem.read", tr.data)},
		WorkDir: tr.data,
		Limits:  tools.ResourceLimits{MaxFileSize: maxFileSize},
	}
	t.Cleanup(func() { env.Close() })
	return env, tr
}

func wantLimit(t *testing.T, err error, max int64) {
	t.Helper()
	var le *tools.LimitError
	if !errors.As(err, &le) || le.Limit != "file_size_limit" || le.Max != max || !errors.Is(err, tools.ErrLimit) {
		t.Fatalf("err = %v; want a file_size_limit *LimitError with Max %d", err, max)
	}
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func TestFS_WriteWithinLimit(t *testing.T) {
	env, tr := writeEnv(t, 10)
	w := env.FS("filesystem.write")
	if err := w.WriteFile("out.txt", []byte("0123456789"), 0o644); err != nil {
		t.Fatalf("writing exactly the limit: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(tr.data, "out.txt")); string(got) != "0123456789" {
		t.Errorf("file holds %q", got)
	}
}

func TestFS_WritePastLimit(t *testing.T) {
	const max = 10
	env, tr := writeEnv(t, max)
	w := env.FS("filesystem.write")
	p := filepath.Join(tr.data, "out.txt")

	t.Run("WriteFile", func(t *testing.T) {
		wantLimit(t, w.WriteFile("out.txt", []byte("0123456789A"), 0o644), max)
		if n := fileSize(t, p); n != max {
			t.Errorf("file is %d bytes; the limit is %d", n, max)
		}
	})
	t.Run("successive writes", func(t *testing.T) {
		f, err := w.Create("out.txt")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString("01234"); err != nil {
			t.Fatal(err)
		}
		n, err := f.WriteString("567890")
		wantLimit(t, err, max)
		if n != 5 {
			t.Errorf("wrote %d bytes of the crossing write; want the 5 that fit", n)
		}
		if _, err := f.WriteString("x"); err == nil {
			t.Error("a write at the limit succeeded")
		}
	})
	t.Run("WriteAt far out", func(t *testing.T) {
		f, err := w.OpenFile("out.txt", os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_, err = f.WriteAt([]byte("x"), 1<<30)
		wantLimit(t, err, max)
		if n := fileSize(t, p); n > max {
			t.Errorf("file grew to %d", n)
		}
	})
	t.Run("Seek then Write", func(t *testing.T) {
		f, err := w.OpenFile("out.txt", os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Seek(1<<20, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		_, err = f.Write([]byte("x"))
		wantLimit(t, err, max)
	})
	t.Run("Truncate up", func(t *testing.T) {
		f, err := w.OpenFile("out.txt", os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		wantLimit(t, f.Truncate(max+1), max)
		if err := f.Truncate(3); err != nil {
			t.Errorf("shrinking: %v", err)
		}
	})
	t.Run("append", func(t *testing.T) {
		if err := w.WriteFile("log.txt", []byte("12345678"), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := w.OpenFile("log.txt", os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		n, err := f.WriteString("abc")
		wantLimit(t, err, max)
		if n != 2 {
			t.Errorf("appended %d bytes; want the 2 that fit", n)
		}
	})
	t.Run("io.Copy of a large reader", func(t *testing.T) {
		f, err := w.Create("big.txt")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_, err = io.Copy(f, io.LimitReader(zeros{}, 1<<20))
		wantLimit(t, err, max)
		if n := fileSize(t, filepath.Join(tr.data, "big.txt")); n != max {
			t.Errorf("file is %d bytes", n)
		}
	})
}

func TestFS_WriteNeedsWriteHandle(t *testing.T) {
	env, tr := writeEnv(t, 0)
	r := env.FS("filesystem.read")
	for name, err := range map[string]error{
		"OpenFile": func() error { _, err := r.OpenFile("x.txt", os.O_WRONLY|os.O_CREATE, 0o644); return err }(),
		"Create":   func() error { _, err := r.Create("x.txt"); return err }(),
		"Remove":   r.Remove("file.txt"),
		"Mkdir":    r.Mkdir("d", 0o755),
	} {
		var ae *tools.AccessError
		if !errors.As(err, &ae) || !strings.HasPrefix(ae.Capability, "filesystem.write:") {
			t.Errorf("%s through a read handle: err = %v; want an AccessError naming filesystem.write", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(tr.data, "x.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a refused create left a file behind")
	}
	f, err := r.OpenFile("file.txt", os.O_RDONLY, 0)
	if err != nil {
		t.Fatalf("reading through OpenFile: %v", err)
	}
	f.Close()
}

func TestFS_WriteEscapes(t *testing.T) {
	env, tr := writeEnv(t, 0)
	w := env.FS("filesystem.write")
	secret := filepath.Join(tr.base, "secret.txt")
	for _, p := range []string{"../secret.txt", secret, "link", "abslink", "dirlink/secret.txt", "../database/new.txt", filepath.Join(tr.database, "x.txt"), "/tmp/toolgate-escape.txt"} {
		t.Run(p, func(t *testing.T) {
			err := w.WriteFile(p, []byte("pwned"), 0o644)
			var ae *tools.AccessError
			if !errors.As(err, &ae) {
				t.Fatalf("WriteFile(%q) = %v; want *AccessError", p, err)
			}
		})
	}
	if b, _ := os.ReadFile(secret); string(b) != "secret" {
		t.Errorf("secret.txt now holds %q", b)
	}
	if err := w.Remove("../secret.txt"); !errors.Is(err, tools.ErrAccessDenied) {
		t.Errorf("Remove(../secret.txt) = %v", err)
	}
	if err := w.Mkdir("newdir", 0o755); err != nil {
		t.Errorf("Mkdir inside: %v", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
