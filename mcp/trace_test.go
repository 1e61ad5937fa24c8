package mcp_test

import (
	"context"
	"io"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// A traceparent in _meta is continued: the tools/call span (OTel MCP
// conventions) is the caller's span's child, and the runtime's
// execute_tool span is beneath it.
func TestTraceContext(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	o := testOptions(testRegistry(t))
	o.TracerProvider = tp
	rt, err := tgruntime.Open(testdb.Path(t, "tg.db"), o)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	srv, err := mcp.New(rt, &mcp.Options{Principal: principal, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	crd, swr := io.Pipe()
	srd, cwr := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go srv.Run(ctx, &sdk.IOTransport{Reader: srd, Writer: swr})
	cs := connect(t, &sdk.IOTransport{Reader: crd, Writer: cwr}, nil, "")
	defer cs.Close()

	const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	res := call(t, ctx, cs, "test.noop", map[string]any{}, sdk.Meta{"traceparent": "00-" + traceID + "-" + parent + "-01"})
	completed(t, res)
	if res.Meta[mcp.MetaTraceID] != traceID {
		t.Errorf("the invocation's trace %v, want the caller's %s", res.Meta[mcp.MetaTraceID], traceID)
	}
	var callSpan, execSpan sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "tools/call test.noop":
			callSpan = s
		case "execute_tool test.noop":
			execSpan = s
		}
	}
	if callSpan == nil || execSpan == nil {
		t.Fatalf("spans: tools/call %v, execute_tool %v", callSpan != nil, execSpan != nil)
	}
	if callSpan.Parent().SpanID().String() != parent || callSpan.SpanContext().TraceID().String() != traceID {
		t.Errorf("tools/call span's parent %s in trace %s, want the caller's", callSpan.Parent().SpanID(), callSpan.SpanContext().TraceID())
	}
	if execSpan.Parent().SpanID() != callSpan.SpanContext().SpanID() {
		t.Error("execute_tool is not beneath tools/call")
	}
	attrs := map[string]string{}
	for _, a := range callSpan.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	for _, k := range []string{"mcp.method.name", "mcp.session.id", "jsonrpc.request.id", "gen_ai.tool.name"} {
		if attrs[k] == "" {
			t.Errorf("tools/call span lacks %s: %v", k, attrs)
		}
	}
}
