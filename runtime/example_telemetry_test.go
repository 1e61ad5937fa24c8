package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate/capability"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// Tracing: the application brings the OpenTelemetry SDK (here a recorder; in
// production a batch processor and an OTLP exporter) and gives the runtime
// its TracerProvider. Each invocation is an execute_tool span with a span
// per attempt and per lifecycle phase.
func ExampleOptions_tracing() {
	dir, _ := os.MkdirTemp("", "toolgate-example")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello"), 0o600)

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	rt, err := tgruntime.Open(filepath.Join(dir, "toolgate.db"), &tgruntime.Options{
		TracerProvider: tp,
		Grants:         map[string][]capability.Capability{"agent": {{Name: "filesystem.read", Scope: dir}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close(context.Background())
	res, _ := rt.Execute(context.Background(), tgruntime.Invocation{
		Tool: "file.read", Principal: "agent",
		Input: json.RawMessage(`{"path":"` + filepath.Join(dir, "notes.txt") + `"}`),
	})
	fmt.Println(res.State, len(res.TraceID), "hex digits of trace id")

	depth := map[string]int{}
	for _, s := range spans.Started() {
		d := depth[s.Parent().SpanID().String()] + 1
		depth[s.SpanContext().SpanID().String()] = d
		fmt.Println(strings.Repeat("  ", d-1) + s.Name())
	}
	// Output:
	// COMPLETED 32 hex digits of trace id
	// execute_tool file.read
	//   attempt 1
	//     validate
	//     authorize
	//     acquire
	//     begin
	//     execute
	//     validate_output
	//     commit
}
