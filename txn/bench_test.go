package txn_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// BenchmarkBeginCommit is one claim and one commit (two writes) per op, the
// store's share of an invocation; the parallel variant runs 32 callers per
// GOMAXPROCS (64 on two cores), where group commit shares updates.
//
//	go test -run '^$' -bench BeginCommit -benchtime 2s ./txn
//
// With TOOLGATE_TEST_BACKEND=postgres it runs against Postgres (see
// conformance_test.go); scripts/pg-test.sh's server runs without fsync, so
// there sync=true only waits for the WAL write.
func BenchmarkBeginCommit(b *testing.B) {
	for _, sync := range []bool{false, true} {
		for _, par := range []int{0, 32} {
			name := fmt.Sprintf("sync=%v/callers=1", sync)
			if par > 0 {
				name = fmt.Sprintf("sync=%v/callers=%dxGOMAXPROCS", sync, par)
			}
			b.Run(name, func(b *testing.B) {
				path := filepath.Join(b.TempDir(), "b.db")
				if onPostgres() {
					path = freshPostgres(b)
				}
				s, err := txn.Open(path, &txn.Options{NoSync: !sync})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				var n atomic.Int64
				op := func() {
					id := fmt.Sprintf("e%d", n.Add(1))
					tx, err := s.Begin(context.Background(), executing(id))
					if err != nil {
						b.Fatal(err)
					}
					tx.Put("bench", id, []byte("value"))
					if err := tx.Commit(context.Background(), finalOf(id)); err != nil {
						b.Fatal(err)
					}
				}
				if par == 0 {
					for b.Loop() {
						op()
					}
					return
				}
				b.SetParallelism(par)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						op()
					}
				})
			})
		}
	}
}
