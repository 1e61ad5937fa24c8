package txn_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// AuditRaw passes the stored groups in order, then the head; AuditHead
// reads the head's seq.
func TestStore_AuditRaw(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	s := openStoreAt(t, path)
	ctx := context.Background()
	raw := func(s *txn.Store) (keys [][]byte, values [][]byte) {
		t.Helper()
		err := s.AuditRaw(ctx, func(k, v []byte) error {
			keys = append(keys, bytes.Clone(k))
			values = append(values, bytes.Clone(v))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return keys, values
	}
	if keys, _ := raw(s); len(keys) != 0 {
		t.Fatalf("empty log: %d keys", len(keys))
	}
	if seq, err := s.AuditHead(ctx); seq != 0 || err != nil {
		t.Fatalf("AuditHead of an empty log = %d, %v", seq, err)
	}
	for i, n := range []int{1, 3, 2} {
		var evs []txn.AuditEvent
		for j := range n {
			evs = append(evs, txn.AuditEvent{Data: fmt.Appendf(nil, `{"write":%d,"n":%d}`, i, j)})
		}
		if err := s.Put(ctx, newRecord(fmt.Sprint("r", i), "t", "DENIED"), evs...); err != nil {
			t.Fatal(err)
		}
	}
	log, err := s.AuditLog(ctx, 0, 0)
	if err != nil || len(log) != 6 {
		t.Fatalf("AuditLog: %d entries, %v", len(log), err)
	}
	keys, values := raw(s)
	if len(keys) != 4 {
		t.Fatalf("%d keys, want 3 groups and the head", len(keys))
	}
	var got []txn.AuditEntry
	for i, first := range []uint64{1, 2, 5} {
		if !bytes.Equal(keys[i], binary.BigEndian.AppendUint64(nil, first)) {
			t.Fatalf("key %d = %x, want seq %d", i, keys[i], first)
		}
		var group []txn.AuditEntry
		if err := json.Unmarshal(values[i], &group); err != nil {
			t.Fatal(err)
		}
		got = append(got, group...)
	}
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(log)
	if !bytes.Equal(a, b) {
		t.Fatalf("raw groups hold %s\nAuditLog returns %s", a, b)
	}
	head := binary.BigEndian.AppendUint64(nil, 6)
	h, _ := hex.DecodeString(log[5].Hash)
	if string(keys[3]) != txn.AuditHeadKey || !bytes.Equal(values[3], append(head, h...)) {
		t.Fatalf("head %x = %x", keys[3], values[3])
	}
	if seq, err := s.AuditHead(ctx); seq != 6 || err != nil {
		t.Fatalf("AuditHead = %d, %v", seq, err)
	}

	// fn's error stops the walk; a cancelled context fails it.
	stop := errors.New("stop")
	calls := 0
	if err := s.AuditRaw(ctx, func(k, v []byte) error { calls++; return stop }); err != stop || calls != 1 {
		t.Fatalf("AuditRaw = %v after %d calls, want stop after 1", err, calls)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.AuditRaw(cancelled, func(k, v []byte) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("AuditRaw(cancelled) = %v", err)
	}

	// A read-only store reads the same.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if keys2, values2 := raw(ro); len(keys2) != 4 || !bytes.Equal(values2[2], values[2]) {
		t.Fatalf("read-only: %d keys", len(keys2))
	}
}

// Events that are not one JSON value without whitespace around it are
// refused before anything is written; Checked skips only the JSON check,
// and checked events are chained like any other.
func TestStore_AuditEventChecks(t *testing.T) {
	s := openStoreAt(t, filepath.Join(t.TempDir(), "toolgate.db"))
	ctx := context.Background()
	for i, ev := range []txn.AuditEvent{
		{Data: []byte(`{"a":`)},
		{Data: nil},
		{Data: nil, Checked: true},
		{Data: []byte(` {"a":1}`)},
		{Data: []byte("{\"a\":1}\n"), Checked: true},
	} {
		rec := newRecord(fmt.Sprintf("bad-%d", i), "t", "FAILED")
		if err := s.Put(ctx, rec, ev); !errors.Is(err, txn.ErrInvalidRecord) {
			t.Errorf("event %d (%q, checked %v): Put = %v, want ErrInvalidRecord", i, ev.Data, ev.Checked, err)
		}
		if _, err := s.Get(ctx, rec.ExecutionID); err == nil {
			t.Errorf("event %d: the record was written", i)
		}
	}
	events := []txn.AuditEvent{{Data: []byte(`{"n":1}`), Checked: true}, {Data: []byte(`{"n":2}`)}}
	if err := s.Put(ctx, newRecord("ok", "t", "FAILED"), events...); err != nil {
		t.Fatal(err)
	}
	entries, err := s.AuditLog(ctx, 1, 0)
	if err != nil || len(entries) != 2 {
		t.Fatalf("AuditLog = %d entries, %v", len(entries), err)
	}
	var link [32]byte
	for i, e := range entries {
		sum := sha256.Sum256(events[i].Data)
		link = sha256.Sum256(append(link[:], sum[:]...))
		if e.Hash != hex.EncodeToString(link[:]) || string(e.Event) != string(events[i].Data) {
			t.Errorf("entry %d = %+v, want hash %x over %s", i, e, link, events[i].Data)
		}
	}
}
