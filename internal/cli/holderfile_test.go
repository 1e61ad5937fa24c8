package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// A runtime the CLI opened names its process in the holder file, which a
// process finding the database locked reads; its Close removes it.
func TestHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	s, err := openHeld(path, &tgruntime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := readHolder(path)
	if h == nil || h.PID != os.Getpid() || len(h.Command) == 0 || h.Command[0] != os.Args[0] || h.Since.IsZero() || h.Addr != "" {
		t.Fatalf("holder = %+v", h)
	}
	fi, err := os.Stat(holderPath(path))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("holder file: %v %v", fi, err)
	}
	if _, err := txn.Open(path, &txn.Options{Timeout: 10 * time.Millisecond}); !errors.Is(err, txn.ErrLocked) {
		t.Fatalf("second open: %v", err)
	}
	if err := setHolderAddr(path, "127.0.0.1:7070", "http"); err != nil {
		t.Fatal(err)
	}
	if h := readHolder(path); h == nil || h.Addr != "127.0.0.1:7070" || h.API != "http" {
		t.Fatalf("holder after setHolderAddr = %+v", h)
	}
	if err := setHolderSocket(path, socketPath(path)); err != nil {
		t.Fatal(err)
	}
	if h := readHolder(path); h == nil || h.Socket != path+".sock" || h.Addr != "127.0.0.1:7070" {
		t.Fatalf("holder after setHolderSocket = %+v", h)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(holderPath(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the holder file outlived Close: %v", err)
	}
	// A reader takes a shared lock and records nothing.
	r, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := os.Stat(holderPath(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a read-only open wrote a holder file: %v", err)
	}
}

// A holder file whose process is gone (a holder killed before it could
// remove it) names no one, and the next writer replaces it.
func TestHolder_Stale(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no 'true' to make a dead pid: ", err)
	}
	dead := dbHolder{PID: cmd.Process.Pid, Command: []string{"toolgate", "serve"}, Since: time.Now()}
	b, _ := json.Marshal(dead)
	if err := os.WriteFile(holderPath(path), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if h := readHolder(path); h != nil {
		t.Fatalf("a dead process's holder file names %+v", h)
	}
	// A live pid running another program than the one recorded: reused.
	reused := dbHolder{PID: os.Getpid(), Command: []string{"toolgate", "serve"}, Since: time.Now()}
	b, _ = json.Marshal(reused)
	if err := os.WriteFile(holderPath(path), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if h := readHolder(path); h != nil {
		t.Fatalf("a holder file whose pid runs another program names %+v", h)
	}
	s, err := openHeld(path, &tgruntime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if h := readHolder(path); h == nil || h.PID != os.Getpid() {
		t.Fatalf("the new writer's holder = %+v", h)
	}
	if err := os.WriteFile(holderPath(path), []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if h := readHolder(path); h != nil {
		t.Fatalf("an unreadable holder file names %+v", h)
	}
	if err := setHolderAddr(path, "x", "http"); err == nil {
		t.Fatal("setHolderAddr over a file that is not ours succeeded")
	}
}
