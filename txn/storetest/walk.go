package storetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// testWalkAndPages: final records and claims are listed together, in id
// order or in reverse, a page at a time from a cursor (an id stored or
// not); a namespace is read a page at a time, and scanned by prefix whole
// or up to a limit.
func testWalkAndPages(t *testing.T, b *Backend) {
	s := b.open(t, b.fresh(t))
	ctx := context.Background()
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("r%02d", i)
		ids = append(ids, id)
		if i%2 == 0 {
			if err := s.Put(ctx, Record(id, "tool", "FAILED")); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := s.Begin(ctx, Record(id, "tool", "EXECUTING")); err != nil { // a claim, left open
			t.Fatal(err)
		}
	}
	list := func(f txn.Filter) []string {
		t.Helper()
		recs, err := s.List(ctx, f)
		if err != nil {
			t.Fatalf("List(%+v): %v", f, err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.ExecutionID)
		}
		return out
	}
	reversed := make([]string, len(ids))
	for i, id := range ids {
		reversed[len(ids)-1-i] = id
	}
	if got := list(txn.Filter{}); !reflect.DeepEqual(got, ids) {
		t.Fatalf("List = %v; want %v", got, ids)
	}
	if got := list(txn.Filter{Newest: true}); !reflect.DeepEqual(got, reversed) {
		t.Fatalf("List, newest first = %v; want %v", got, reversed)
	}
	for _, newest := range []bool{false, true} {
		want := ids
		if newest {
			want = reversed
		}
		var got []string
		cursor := ""
		for range 10 {
			page := list(txn.Filter{Newest: newest, Limit: 3, Cursor: cursor})
			if len(page) == 0 {
				break
			}
			got = append(got, page...)
			cursor = page[len(page)-1]
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("pages of 3, newest first %v = %v; want %v", newest, got, want)
		}
	}
	for _, tc := range []struct {
		f    txn.Filter
		want []string
	}{
		{txn.Filter{Cursor: "r09a", Limit: 2}, []string{"r10", "r11"}}, // a cursor not stored
		{txn.Filter{Cursor: "r09a", Limit: 2, Newest: true}, []string{"r09", "r08"}},
		{txn.Filter{Cursor: "r", Limit: 1}, []string{"r00"}},
		{txn.Filter{Cursor: "s", Limit: 1, Newest: true}, []string{"r19"}},
		{txn.Filter{Cursor: "r19"}, nil},
		{txn.Filter{Cursor: "r00", Newest: true}, nil},
		{txn.Filter{State: "EXECUTING", Limit: 2}, []string{"r01", "r03"}},
	} {
		if got := list(tc.f); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("List(%+v) = %v; want %v", tc.f, got, tc.want)
		}
	}

	var keys []string
	for i := range 10 {
		keys = append(keys, fmt.Sprintf("k%02d", i))
	}
	if err := s.UpdateState(ctx, func(v *txn.StateView) error {
		for _, k := range keys {
			if err := v.Put("ns", k, []byte("v"+k)); err != nil {
				return err
			}
		}
		return v.Put("other", "k00", []byte("x"))
	}); err != nil {
		t.Fatal(err)
	}
	page := func(after string, n int) []string {
		t.Helper()
		es, err := s.StatePage(ctx, "ns", after, n)
		if err != nil {
			t.Fatalf("StatePage(%q, %d): %v", after, n, err)
		}
		var out []string
		for _, e := range es {
			if string(e.Value) != "v"+e.Key {
				t.Fatalf("StatePage: %s = %q", e.Key, e.Value)
			}
			out = append(out, e.Key)
		}
		return out
	}
	var got []string
	after := ""
	for range 10 {
		p := page(after, 3)
		if len(p) > 3 {
			t.Fatalf("a page of 3 holds %v", p)
		}
		if len(p) == 0 {
			break
		}
		got = append(got, p...)
		after = p[len(p)-1]
	}
	if !reflect.DeepEqual(got, keys) {
		t.Fatalf("pages of 3 = %v; want %v", got, keys)
	}
	for _, tc := range []struct {
		after string
		n     int
		want  []string
	}{
		{"", 1, keys[:1]},
		{"", 10, keys},
		{"", 11, keys},
		{"k04", 2, keys[5:7]},
		{"k045", 2, keys[5:7]},
		{"k09", 5, nil},
		{"", 0, nil},
	} {
		if got := page(tc.after, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("StatePage(%q, %d) = %v; want %v", tc.after, tc.n, got, tc.want)
		}
	}
	if es, err := s.StateScan(ctx, "ns", "k0"); err != nil || len(es) != 10 {
		t.Errorf("StateScan(k0) = %d entries, %v; want 10", len(es), err)
	}
	if es, err := s.StateScan(ctx, "ns", "k05"); err != nil || len(es) != 1 || es[0].Key != "k05" {
		t.Errorf("StateScan(k05) = %v, %v", es, err)
	}
	if err := s.UpdateState(ctx, func(v *txn.StateView) error {
		for _, tc := range []struct {
			prefix string
			limit  int
			want   int
		}{{"k", 0, 10}, {"k", 4, 4}, {"k", 10, 10}, {"k", 20, 10}, {"k0", 1, 1}, {"x", 0, 0}} {
			if es := v.Scan("ns", tc.prefix, tc.limit); len(es) != tc.want {
				t.Errorf("a view's Scan(%q, %d) = %d entries; want %d", tc.prefix, tc.limit, len(es), tc.want)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
