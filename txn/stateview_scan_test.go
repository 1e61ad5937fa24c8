package txn_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// A view's Scan with a limit reads as far as the limit needs once the
// view's own deletes are taken out, and without one (limit <= 0) reads
// everything, however few the view's own writes: each page is the one the
// committed state and the view's writes make together.
func TestStateView_ScanPastOwnDeletes(t *testing.T) {
	s := openStore(t)
	committed := map[string]string{}
	for i := range 10 {
		committed[fmt.Sprintf("k%d", i)] = fmt.Sprint(i)
	}
	seed(t, s, "sys", committed)
	err := s.UpdateState(context.Background(), func(v *txn.StateView) error {
		v.Delete("sys", "k0")
		v.Delete("sys", "k1")
		v.Put("sys", "k5", []byte("five"))
		scan := func(limit int) string {
			var keys []string
			for _, e := range v.Scan("sys", "", limit) {
				keys = append(keys, e.Key+"="+string(e.Value))
			}
			return strings.Join(keys, ",")
		}
		for _, tc := range []struct {
			limit int
			want  string
		}{
			{0, "k2=2,k3=3,k4=4,k5=five,k6=6,k7=7,k8=8,k9=9"},
			{-1, "k2=2,k3=3,k4=4,k5=five,k6=6,k7=7,k8=8,k9=9"},
			{1, "k2=2"},
			{3, "k2=2,k3=3,k4=4"},
			{4, "k2=2,k3=3,k4=4,k5=five"},
			{8, "k2=2,k3=3,k4=4,k5=five,k6=6,k7=7,k8=8,k9=9"},
			{20, "k2=2,k3=3,k4=4,k5=five,k6=6,k7=7,k8=8,k9=9"},
		} {
			if got := scan(tc.limit); got != tc.want {
				t.Errorf("Scan, limit %d = %s; want %s", tc.limit, got, tc.want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
