package txn_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// A claim holds the processes the tool runs (SetProcesses); recovery after
// a crash sees them, and the final record does not carry them. A record
// without processes is stored byte for byte as before they existed, so
// every older record reads unchanged.
func TestTx_SetProcesses(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	tx, err := s.Begin(ctx, executing("p"))
	if err != nil {
		t.Fatal(err)
	}
	ps := []txn.Process{{Pid: 4242, StartTime: 99, Session: 7, BootID: "b", Host: "h", Command: "/usr/bin/sleep"}}
	if err := tx.SetProcesses(ctx, ps); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, "p"); err != nil || !reflect.DeepEqual(rec.Processes, ps) || rec.State != "EXECUTING" {
		t.Fatalf("claim after SetProcesses: %+v, %v", rec, err)
	}
	if err := tx.SetProcesses(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if rec, _ := s.Get(ctx, "p"); rec.Processes != nil {
		t.Fatalf("claim after SetProcesses(nil): %+v", rec.Processes)
	}
	if err := tx.Rollback(ctx, finalOf("p")); err != nil {
		t.Fatal(err)
	}
	if err := tx.SetProcesses(ctx, ps); !errors.Is(err, txn.ErrTxDone) {
		t.Fatalf("SetProcesses after the end = %v, want ErrTxDone", err)
	}

	plain := executing("q")
	old, err := txn.EncodeRecord(plain)
	if err != nil {
		t.Fatal(err)
	}
	with := executing("q")
	with.Processes = ps
	data, err := txn.EncodeRecord(with)
	if err != nil {
		t.Fatal(err)
	}
	// The older form, tagged 0x02 instead of 0x01, followed by its
	// extensions: no token (0), then the processes (1 ...).
	if old[0] != 0x01 || data[0] != 0x02 || !bytes.HasPrefix(data[1:], old[1:]) || len(data) <= len(old)+2 ||
		data[len(old)] != 0 || data[len(old)+1] != 1 {
		t.Fatal("a record with processes is not the older form, tagged 0x02, followed by them")
	}
	back, err := txn.ParseRecord(data)
	if err != nil || len(back.Processes) != len(ps) || back.Processes[0] != ps[0] {
		t.Fatalf("decoded: %+v, %v", back, err)
	}
}

func TestStore_RecoverSeesProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	s := openStoreAt(t, path)
	ctx := context.Background()
	tx, _ := s.Begin(ctx, executing("crashed"))
	ps := []txn.Process{{Pid: 4242, StartTime: 99, BootID: "b"}}
	if err := tx.SetProcesses(ctx, ps); err != nil {
		t.Fatal(err)
	}
	s.Close() // the process "dies" while the tool's process runs

	s = openStoreAt(t, path)
	var seen []txn.Process
	if _, err := s.Recover(ctx, func(r *txn.Record) ([]txn.AuditEvent, error) {
		seen = r.Processes
		r.Processes = nil
		r.State = "ROLLED_BACK"
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(seen, ps) {
		t.Fatalf("recovery saw processes %+v, want %+v", seen, ps)
	}
	if rec, _ := s.Get(ctx, "crashed"); rec.Processes != nil || rec.State != "ROLLED_BACK" {
		t.Fatalf("recovered record: %+v", rec)
	}
}
