package storetest

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// testAuditGroups: AuditGroups(from) delivers the stored groups from the
// one holding seq from on, in order: no group that ends before from but
// that one. From past the head no group holds from: it delivers nothing
// before the last group (the last group, whose entries the caller skips,
// or nothing), for every from up to the largest uint64. It stops when fn
// returns false, and returns fn's error as is.
func testAuditGroups(t *testing.T, b *Backend) {
	s := b.open(t, b.fresh(t))
	ctx := context.Background()
	be := s.Driver()
	// Groups 1-2, 3, 4-6.
	for i, n := range []int{2, 1, 3} {
		evs := make([]txn.AuditEvent, 0, n)
		for j := range n {
			evs = append(evs, Event(string(rune('a'+i))+string(rune('0'+j))))
		}
		if err := s.Put(ctx, Record("g"+string(rune('0'+i)), "tool", "DENIED"), evs...); err != nil {
			t.Fatal(err)
		}
	}
	groups := func(from uint64) []uint64 {
		t.Helper()
		var got []uint64
		if err := be.AuditGroups(ctx, from, func(seq uint64, _ []byte) (bool, error) {
			got = append(got, seq)
			return true, nil
		}); err != nil {
			t.Fatalf("AuditGroups(%d) = %v", from, err)
		}
		return got
	}
	for from, want := range map[uint64][]uint64{0: {1, 3, 4}, 1: {1, 3, 4}, 2: {1, 3, 4}, 3: {3, 4}, 4: {4}, 5: {4}, 6: {4}} {
		if got := groups(from); !reflect.DeepEqual(got, want) {
			t.Errorf("AuditGroups(%d) delivered groups %v, want %v", from, got, want)
		}
	}
	for _, from := range []uint64{7, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64 - 1, math.MaxUint64} {
		if got := groups(from); len(got) > 1 || len(got) == 1 && got[0] != 4 {
			t.Errorf("AuditGroups(%d), past the head, delivered groups %v; want none before the last (4)", from, got)
		}
	}
	var got []uint64
	if err := be.AuditGroups(ctx, 0, func(seq uint64, _ []byte) (bool, error) {
		got = append(got, seq)
		return false, nil
	}); err != nil || !reflect.DeepEqual(got, []uint64{1}) {
		t.Errorf("AuditGroups whose fn says stop delivered %v, %v; want [1]", got, err)
	}
	boom := errors.New("boom")
	got = nil
	if err := be.AuditGroups(ctx, 3, func(seq uint64, _ []byte) (bool, error) {
		got = append(got, seq)
		return true, boom
	}); err != boom || !reflect.DeepEqual(got, []uint64{3}) {
		t.Errorf("AuditGroups whose fn fails = %v after %v; want the error as is after [3]", err, got)
	}
}
