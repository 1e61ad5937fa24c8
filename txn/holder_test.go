package txn_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolgate/toolgate/txn"
)

// A store open for writing names its process in the holder file, which a
// process finding the database locked reads; Close removes it.
func TestHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	s, err := txn.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := txn.ReadHolder(path)
	if h == nil || h.PID != os.Getpid() || len(h.Command) == 0 || h.Command[0] != os.Args[0] || h.Since.IsZero() || h.Addr != "" {
		t.Fatalf("holder = %+v", h)
	}
	fi, err := os.Stat(txn.HolderPath(path))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("holder file: %v %v", fi, err)
	}
	if _, err := txn.Open(path, &txn.Options{Timeout: 10 * time.Millisecond}); !errors.Is(err, txn.ErrLocked) {
		t.Fatalf("second open: %v", err)
	}
	if err := txn.SetHolderAddr(path, "127.0.0.1:7070", "http"); err != nil {
		t.Fatal(err)
	}
	if h := txn.ReadHolder(path); h == nil || h.Addr != "127.0.0.1:7070" || h.API != "http" {
		t.Fatalf("holder after SetHolderAddr = %+v", h)
	}
	if err := txn.SetHolderSocket(path, txn.SocketPath(path)); err != nil {
		t.Fatal(err)
	}
	if h := txn.ReadHolder(path); h == nil || h.Socket != path+".sock" || h.Addr != "127.0.0.1:7070" {
		t.Fatalf("holder after SetHolderSocket = %+v", h)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(txn.HolderPath(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the holder file outlived Close: %v", err)
	}
	// A reader takes a shared lock and records nothing.
	r, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := os.Stat(txn.HolderPath(path)); !errors.Is(err, fs.ErrNotExist) {
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
	dead := txn.Holder{PID: cmd.Process.Pid, Command: []string{"toolgate", "serve"}, Since: time.Now()}
	b, _ := json.Marshal(dead)
	if err := os.WriteFile(txn.HolderPath(path), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if h := txn.ReadHolder(path); h != nil {
		t.Fatalf("a dead process's holder file names %+v", h)
	}
	// A live pid running another program than the one recorded: reused.
	reused := txn.Holder{PID: os.Getpid(), Command: []string{"toolgate", "serve"}, Since: time.Now()}
	b, _ = json.Marshal(reused)
	if err := os.WriteFile(txn.HolderPath(path), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if h := txn.ReadHolder(path); h != nil {
		t.Fatalf("a holder file whose pid runs another program names %+v", h)
	}
	s, err := txn.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if h := txn.ReadHolder(path); h == nil || h.PID != os.Getpid() {
		t.Fatalf("the new writer's holder = %+v", h)
	}
	if err := os.WriteFile(txn.HolderPath(path), []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if h := txn.ReadHolder(path); h != nil {
		t.Fatalf("an unreadable holder file names %+v", h)
	}
	if err := txn.SetHolderAddr(path, "x", "http"); err == nil {
		t.Fatal("SetHolderAddr over a file that is not ours succeeded")
	}
}
