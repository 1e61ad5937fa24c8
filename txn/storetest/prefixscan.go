package storetest

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// testStateScanPrefixes: StateScan, and a view's Scan, return exactly the
// keys that start with the prefix, in byte order, whatever bytes the
// prefix ends with: a one-byte prefix, bytes 0xff (the greatest, after
// which no key of the prefix can be bounded by incrementing it), and a
// prefix of only 0xff bytes.
func testStateScanPrefixes(t *testing.T, b *Backend) {
	s := b.open(t, b.fresh(t))
	ctx := context.Background()
	keys := []string{"a", "a1", "a\xff", "a\xff\xff", "a\xff1", "b", "b1", "\xfe", "\xfe\xff", "\xff", "\xff\xff", "\xff1"}
	if err := s.UpdateState(ctx, func(v *txn.StateView) error {
		for _, k := range keys {
			if err := v.Put("ns", k, []byte(k)); err != nil {
				return err
			}
			if err := v.Put("other", k, nil); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for _, prefix := range []string{"", "a", "a\xff", "a\xff\xff", "b", "\xfe", "\xff", "\xff\xff", "c", "\xff\xff\xff"} {
		var want []string
		for _, k := range sorted {
			if strings.HasPrefix(k, prefix) {
				want = append(want, k)
			}
		}
		got := func(es []txn.Entry) []string {
			var out []string
			for _, e := range es {
				if string(e.Value) != e.Key {
					t.Errorf("prefix %q: key %q holds %q", prefix, e.Key, e.Value)
				}
				out = append(out, e.Key)
			}
			return out
		}
		es, err := s.StateScan(ctx, "ns", prefix)
		if err != nil || !reflect.DeepEqual(got(es), want) {
			t.Errorf("StateScan(%q) = %q, %v; want %q", prefix, got(es), err, want)
		}
		var viewed []txn.Entry
		if err := s.UpdateState(ctx, func(v *txn.StateView) error { viewed = v.Scan("ns", prefix, 0); return nil }); err != nil ||
			!reflect.DeepEqual(got(viewed), want) {
			t.Errorf("a view's Scan(%q) = %q, %v; want %q", prefix, got(viewed), err, want)
		}
	}
}
