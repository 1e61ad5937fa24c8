package runtime_test

import (
	"context"
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	tgruntime "github.com/toolgate/toolgate/runtime"
)

// BenchmarkExecute measures one invocation of a tool that writes one key,
// end to end (validation, authorization, Begin update, tool, output
// validation, Commit update). Compare with BenchmarkFloor_BoltUpdates, two
// bare bbolt updates of similar size, run in the same invocation of go test:
//
//	go test -run '^$' -bench . -benchtime 2000x ./runtime
func BenchmarkExecute(b *testing.B) {
	for _, mode := range []struct {
		name   string
		noSync bool
	}{{"nosync", true}, {"durable", false}} {
		b.Run(mode.name, func(b *testing.B) {
			rt, err := tgruntime.Open(filepath.Join(b.TempDir(), "b.db"), &tgruntime.Options{Registry: registry(b), Grants: grantAll, NoSync: mode.noSync})
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close(context.Background())
			inv := invoke("test.echo", `{"msg":"hello"}`)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := rt.Execute(context.Background(), inv); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFloor_BoltUpdates is the floor for BenchmarkExecute: the two bbolt
// updates an execution needs (the EXECUTING claim and the commit), writing
// records of about the same size, with nothing else.
func BenchmarkFloor_BoltUpdates(b *testing.B) {
	for _, mode := range []struct {
		name   string
		noSync bool
	}{{"nosync", true}, {"durable", false}} {
		b.Run(mode.name, func(b *testing.B) {
			db, err := bbolt.Open(filepath.Join(b.TempDir(), "f.db"), 0o600, &bbolt.Options{NoSync: mode.noSync, NoGrowSync: mode.noSync, FreelistType: bbolt.FreelistMapType})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			rec := make([]byte, 700)
			var i uint64
			for b.Loop() {
				i++
				key := []byte{byte(i >> 56), byte(i >> 48), byte(i >> 40), byte(i >> 32), byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}
				for range 2 {
					if err := db.Update(func(tx *bbolt.Tx) error {
						bk, err := tx.CreateBucketIfNotExists([]byte("x"))
						if err != nil {
							return err
						}
						return bk.Put(key, rec)
					}); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkExecuteParallel runs Execute from 32 callers per GOMAXPROCS (64
// on two cores): the group-commit path.
func BenchmarkExecuteParallel(b *testing.B) {
	for _, sync := range []bool{false, true} {
		b.Run(map[bool]string{false: "nosync", true: "durable"}[sync], func(b *testing.B) {
			rt, err := tgruntime.Open(filepath.Join(b.TempDir(), "b.db"), &tgruntime.Options{Registry: registry(b), Grants: grantAll, NoSync: !sync, MaxConcurrent: 1024})
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close(context.Background())
			inv := invoke("test.echo", `{"msg":"hello"}`)
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := rt.Execute(context.Background(), inv); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkExecuteTelemetry is BenchmarkExecute/nosync with the OTel SDK
// on: every span recorded (and dropped by a batch processor with no
// exporter behind it), and every metric aggregated. BenchmarkExecute itself
// runs without providers, the default.
func BenchmarkExecuteTelemetry(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts func(*tgruntime.Options) func()
	}{
		{"traces", func(o *tgruntime.Options) func() {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			o.TracerProvider = tp
			return func() { tp.Shutdown(context.Background()) }
		}},
		{"metrics", func(o *tgruntime.Options) func() {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			o.MeterProvider = mp
			return func() { mp.Shutdown(context.Background()) }
		}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			opts := &tgruntime.Options{Registry: registry(b), Grants: grantAll, NoSync: true}
			defer mode.opts(opts)()
			rt, err := tgruntime.Open(filepath.Join(b.TempDir(), "b.db"), opts)
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close(context.Background())
			inv := invoke("test.echo", `{"msg":"hello"}`)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := rt.Execute(context.Background(), inv); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
