package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// dbHolder describes the process that holds a database open for writing, as
// it recorded itself in the holder file next to the database (see
// holderPath): a process that finds the database locked reads it to say
// who holds it. The CLI writes it once it has opened the store for
// writing (openHeld), and removes it before it closes the store, while
// the lock is still its own. It is advice for messages, never a lock: the
// file lock decides.
type dbHolder struct {
	PID     int       `json:"pid"`
	Command []string  `json:"command"` // the process's command line
	Since   time.Time `json:"since"`   // when it took the lock
	// Addr is the address a server holding the database listens on, and
	// API what it serves there ("http": toolgate's HTTP API; "mcp": MCP
	// over streamable HTTP), when it said so (setHolderAddr).
	Addr string `json:"addr,omitempty"`
	API  string `json:"api,omitempty"`
	// Socket is the Unix socket on which the holder serves the CLI of its
	// own OS user (see socketPath), when it said so (setHolderSocket).
	Socket string `json:"socket,omitempty"`
}

// socketPath is the Unix socket next to the database at dbPath through
// which its holder serves the CLI: dbPath with ".sock" appended.
func socketPath(dbPath string) string { return dbPath + ".sock" }

// holderPath is the holder file of the database at dbPath: dbPath with
// ".holder" appended.
func holderPath(dbPath string) string { return dbPath + ".holder" }

// readHolder returns the holder recorded for the database at dbPath, or
// nil when there is none: no file, a file that does not parse, or a stale
// one (its process is gone, or its pid now runs another program).
func readHolder(dbPath string) *dbHolder {
	b, err := os.ReadFile(holderPath(dbPath))
	if err != nil {
		return nil
	}
	var h dbHolder
	if json.Unmarshal(b, &h) != nil || h.PID <= 0 || !alive(h) {
		return nil
	}
	return &h
}

// setHolderAddr records that the process holding the database at dbPath
// serves api (see dbHolder.API) on addr. Only the holder may: it fails when
// the holder file names another process.
func setHolderAddr(dbPath, addr, api string) error {
	return updateHolder(dbPath, func(h *dbHolder) { h.Addr, h.API = addr, api })
}

// updateHolder changes this process's holder file with set.
func updateHolder(dbPath string, set func(*dbHolder)) error {
	b, err := os.ReadFile(holderPath(dbPath))
	if err != nil {
		return err
	}
	var h dbHolder
	if err := json.Unmarshal(b, &h); err != nil {
		return err
	}
	if h.PID != os.Getpid() {
		return errors.New("the database's holder file names another process")
	}
	set(&h)
	return writeHolder(dbPath, &h)
}

// setHolderSocket records that the process holding the database at dbPath
// serves the CLI on the Unix socket at path ("" says it no longer does).
// Only the holder may, as for setHolderAddr.
func setHolderSocket(dbPath, path string) error {
	return updateHolder(dbPath, func(h *dbHolder) { h.Socket = path })
}

// recordHolder writes this process's holder file for the database at
// dbPath, which it has just locked for writing. A file that cannot be
// written costs only the better message: it is not an error.
func recordHolder(dbPath string) {
	_ = writeHolder(dbPath, &dbHolder{PID: os.Getpid(), Command: os.Args, Since: time.Now().UTC().Truncate(time.Second)})
}

// dropHolder removes the holder file of the database at dbPath if it is
// this process's; the caller still holds the lock, so no other process can
// have written it since.
func dropHolder(dbPath string) {
	b, err := os.ReadFile(holderPath(dbPath))
	if err != nil {
		return
	}
	var h dbHolder
	if json.Unmarshal(b, &h) == nil && h.PID == os.Getpid() {
		_ = os.Remove(holderPath(dbPath))
	}
}

// writeHolder replaces the holder file at once (a temporary file renamed
// over it), so that a reader never sees half of it.
func writeHolder(dbPath string, h *dbHolder) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	path := holderPath(dbPath)
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
func alive(h dbHolder) bool {
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

// heldRuntime is a runtime on a store the CLI opened for it: the CLI owns
// the store and, on a bbolt file, the holder file that names this process
// to others who find the database locked. Close closes the runtime, then
// removes the holder file (while the lock still keeps any other process
// from writing it), then closes the store.
type heldRuntime struct {
	*tgruntime.Runtime
	store  *txn.Store
	holder string // the database whose holder file this process wrote; "" on Postgres

	once sync.Once
	err  error
}

// openHeld opens the store at path with the store options of opts,
// records this process in its holder file (a bbolt file), and starts a
// runtime on it, as runtime.Open would: invalid options fail before
// anything is opened.
func openHeld(path string, opts *tgruntime.Options) (*heldRuntime, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	timeout := opts.OpenTimeout
	if timeout == 0 {
		timeout = txn.DefaultTimeout
	}
	store, err := txn.Open(path, &txn.Options{Timeout: timeout, NoSync: opts.NoSync, Node: opts.Node, Lease: opts.Lease, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	h := &heldRuntime{store: store}
	if !txn.IsPostgresURL(path) {
		h.holder = path
		recordHolder(path) // who holds it, for the message of the next process that finds it locked
	}
	rt, err := tgruntime.New(store, opts)
	if err != nil {
		h.closeStore()
		return nil, err
	}
	h.Runtime = rt
	return h, nil
}

// Close closes the runtime (waiting, until ctx is done, for its
// invocations), then the store. It is idempotent.
func (h *heldRuntime) Close(ctx context.Context) error {
	h.once.Do(func() {
		err := h.Runtime.Close(ctx)
		h.err = errors.Join(err, h.closeStore())
	})
	return h.err
}

func (h *heldRuntime) closeStore() error {
	if h.holder != "" {
		dropHolder(h.holder)
	}
	return h.store.Close()
}
