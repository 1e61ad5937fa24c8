package txn

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"
)

// Holder describes the process that holds a database open for writing, as
// it recorded itself in the holder file next to the database (see
// HolderPath): a process that finds the database locked reads it to say
// who holds it. Open writes it once it has the lock, and Close removes it
// before releasing the lock. It is advice for messages, never a lock: the
// file lock decides.
type Holder struct {
	PID     int       `json:"pid"`
	Command []string  `json:"command"` // the process's command line
	Since   time.Time `json:"since"`   // when it took the lock
	// Addr is the address a server holding the database listens on, and
	// API what it serves there ("http": toolgate's HTTP API; "mcp": MCP
	// over streamable HTTP), when it said so (SetHolderAddr).
	Addr string `json:"addr,omitempty"`
	API  string `json:"api,omitempty"`
	// Socket is the Unix socket on which the holder serves the CLI of its
	// own OS user (see SocketPath), when it said so (SetHolderSocket).
	Socket string `json:"socket,omitempty"`
}

// SocketPath is the Unix socket next to the database at dbPath through
// which its holder serves the CLI: dbPath with ".sock" appended.
func SocketPath(dbPath string) string { return dbPath + ".sock" }

// HolderPath is the holder file of the database at dbPath: dbPath with
// ".holder" appended.
func HolderPath(dbPath string) string { return dbPath + ".holder" }

// ReadHolder returns the holder recorded for the database at dbPath, or
// nil when there is none: no file, a file that does not parse, or a stale
// one (its process is gone, or its pid now runs another program).
func ReadHolder(dbPath string) *Holder {
	b, err := os.ReadFile(HolderPath(dbPath))
	if err != nil {
		return nil
	}
	var h Holder
	if json.Unmarshal(b, &h) != nil || h.PID <= 0 || !alive(h) {
		return nil
	}
	return &h
}

// SetHolderAddr records that the process holding the database at dbPath
// serves api (see Holder.API) on addr. Only the holder may: it fails when
// the holder file names another process.
func SetHolderAddr(dbPath, addr, api string) error {
	return updateHolder(dbPath, func(h *Holder) { h.Addr, h.API = addr, api })
}

// updateHolder changes this process's holder file with set.
func updateHolder(dbPath string, set func(*Holder)) error {
	b, err := os.ReadFile(HolderPath(dbPath))
	if err != nil {
		return err
	}
	var h Holder
	if err := json.Unmarshal(b, &h); err != nil {
		return err
	}
	if h.PID != os.Getpid() {
		return errors.New("txn: the database's holder file names another process")
	}
	set(&h)
	return writeHolder(dbPath, &h)
}

// SetHolderSocket records that the process holding the database at dbPath
// serves the CLI on the Unix socket at path ("" says it no longer does).
// Only the holder may, as for SetHolderAddr.
func SetHolderSocket(dbPath, path string) error {
	return updateHolder(dbPath, func(h *Holder) { h.Socket = path })
}

// recordHolder writes this process's holder file for the database at
// dbPath, which it has just locked for writing. A file that cannot be
// written costs only the better message: it is not an error.
func recordHolder(dbPath string) {
	_ = writeHolder(dbPath, &Holder{PID: os.Getpid(), Command: os.Args, Since: time.Now().UTC().Truncate(time.Second)})
}

// dropHolder removes the holder file of the database at dbPath if it is
// this process's; the caller still holds the lock, so no other process can
// have written it since.
func dropHolder(dbPath string) {
	b, err := os.ReadFile(HolderPath(dbPath))
	if err != nil {
		return
	}
	var h Holder
	if json.Unmarshal(b, &h) == nil && h.PID == os.Getpid() {
		_ = os.Remove(HolderPath(dbPath))
	}
}

// writeHolder replaces the holder file at once (a temporary file renamed
// over it), so that a reader never sees half of it.
func writeHolder(dbPath string, h *Holder) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	path := HolderPath(dbPath)
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o600)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// alive reports whether h's process still runs: its pid exists and, where
// /proc shows it, runs the command h recorded (a pid reused by another
// program is not the holder).
func alive(h Holder) bool {
	if processGone(h.PID) {
		return false
	}
	if runtime.GOOS != "linux" {
		return true
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(h.PID) + "/cmdline")
	if err != nil {
		return true // not ours to read: trust the pid
	}
	want := []byte{}
	for _, a := range h.Command {
		want = append(append(want, a...), 0)
	}
	return bytes.Equal(cmdline, want)
}
