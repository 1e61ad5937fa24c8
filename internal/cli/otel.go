package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	tgruntime "github.com/toolgate/toolgate/runtime"
)

// flushTimeout bounds how long the CLI waits at exit for its spans and
// metrics to reach the collector.
const flushTimeout = 5 * time.Second

const telemetryHelp = `Telemetry: with OTEL_EXPORTER_OTLP_ENDPOINT set (or its _TRACES_ and _METRICS_
variants), spans and metrics go over OTLP (OTEL_EXPORTER_OTLP_PROTOCOL:
http/protobuf, the default, or grpc) as service $OTEL_SERVICE_NAME (default
toolgate), and the trace id is printed. Set OTEL_METRICS_EXPORTER=none for a
collector that takes no metrics, such as Jaeger; OTEL_SDK_DISABLED=true turns
all of it off. An unreachable collector costs at most 5s at exit and one
warning, never the exit code. A W3C $TRACEPARENT makes the invocation part of
that trace.`

// telemetry is the OpenTelemetry SDK of one CLI command: OTLP exporters for
// traces (batched, with a bounded queue that drops rather than blocks) and
// metrics (a periodic reader), configured from the standard OTEL_*
// variables, which the exporters read themselves. Without an OTLP endpoint
// it is off and costs nothing.
type telemetry struct {
	tp     *sdktrace.TracerProvider // nil: traces off
	mp     *sdkmetric.MeterProvider // nil: metrics off
	errs   *telemetryErrors
	stderr io.Writer
}

// startTelemetry sets up what the environment asks for. It never fails:
// what cannot be set up is reported once, at shutdown, as a warning.
func startTelemetry(ctx context.Context, stderr io.Writer) *telemetry {
	t := &telemetry{errs: &telemetryErrors{}, stderr: stderr}
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return t
	}
	traces, metrics := signalOn("TRACES"), signalOn("METRICS")
	if !traces && !metrics {
		return t
	}
	errorHandler.sink.Store(t.errs) // the SDK reports export errors to the global handler
	errorHandler.install()
	res := newResource(ctx, t.errs)
	if traces {
		exp, err := traceExporter(ctx)
		if err != nil {
			t.errs.add(fmt.Errorf("traces: %w", err))
		} else {
			// The batch processor's queue (OTEL_BSP_MAX_QUEUE_SIZE, default
			// 2048 spans) drops spans when full: it never blocks a caller.
			t.tp = sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(exp))
		}
	}
	if metrics {
		exp, err := metricExporter(ctx)
		if err != nil {
			t.errs.add(fmt.Errorf("metrics: %w", err))
		} else {
			t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
		}
	}
	return t
}

// configure hands the providers to the runtime.
func (t *telemetry) configure(o *tgruntime.Options) {
	if t.tp != nil {
		o.TracerProvider = t.tp
	}
	if t.mp != nil {
		o.MeterProvider = t.mp
	}
}

// context returns ctx carrying the remote parent named by $TRACEPARENT
// (and $TRACESTATE), if any, so that the invocation joins the caller's
// trace.
func (t *telemetry) context(ctx context.Context) context.Context {
	tp := os.Getenv("TRACEPARENT")
	if tp == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": tp, "tracestate": os.Getenv("TRACESTATE")}
	return propagation.TraceContext{}.Extract(ctx, carrier)
}

// shutdown flushes what is buffered, waiting at most flushTimeout in all,
// and prints one warning if anything could not be set up or exported.
func (t *telemetry) shutdown() {
	if t.tp == nil && t.mp == nil && t.errs.first() == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	if t.tp != nil {
		t.errs.add(t.tp.ForceFlush(ctx))
		t.errs.add(t.tp.Shutdown(ctx))
	}
	if t.mp != nil {
		if err := t.mp.Shutdown(ctx); err != nil { // collects and exports once more
			t.errs.add(fmt.Errorf("metrics: %w", err))
		}
	}
	errorHandler.sink.CompareAndSwap(t.errs, nil)
	if err := t.errs.first(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("the collector at %s did not answer within %v", endpoint(), flushTimeout)
		}
		hint := ""
		if strings.Contains(err.Error(), "metrics") {
			hint = " (a collector that takes no metrics, such as Jaeger: set OTEL_METRICS_EXPORTER=none)"
		}
		fmt.Fprintf(t.stderr, "toolgate: warning: telemetry was not exported (the invocation is unaffected): %v%s\n", oneLine(err), hint)
	}
}

// signalOn reports whether the environment configures an OTLP endpoint for
// signal ("TRACES" or "METRICS") and does not turn its exporter off.
func signalOn(signal string) bool {
	if strings.TrimSpace(os.Getenv("OTEL_"+signal+"_EXPORTER")) == "none" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}

// endpoint names the OTLP endpoint the environment sets, for messages.
func endpoint() string {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"} {
		if e := os.Getenv(v); e != "" {
			return e
		}
	}
	return "(none)"
}

// protocol returns the OTLP protocol of signal: its own variable, then the
// general one, then http/protobuf.
func protocol(signal string) (string, error) {
	p := os.Getenv("OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL")
	if p == "" {
		p = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p = strings.TrimSpace(p); p {
	case "", "http/protobuf":
		return "http/protobuf", nil
	case "grpc":
		return p, nil
	}
	return "", fmt.Errorf("OTLP protocol %q is not supported; use grpc or http/protobuf", p)
}

func traceExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	p, err := protocol("TRACES")
	if err != nil {
		return nil, err
	}
	if p == "grpc" {
		return otlptracegrpc.New(ctx)
	}
	return otlptracehttp.New(ctx)
}

func metricExporter(ctx context.Context) (sdkmetric.Exporter, error) {
	p, err := protocol("METRICS")
	if err != nil {
		return nil, err
	}
	if p == "grpc" {
		return otlpmetricgrpc.New(ctx)
	}
	return otlpmetrichttp.New(ctx)
}

// newResource describes the process: service.name toolgate (unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise), its version
// when built from a tagged module, and the SDK's own attributes.
func newResource(ctx context.Context, errs *telemetryErrors) *resource.Resource {
	attrs := []attribute.KeyValue{attribute.String("service.name", "toolgate")}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		attrs = append(attrs, attribute.String("service.version", bi.Main.Version))
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		errs.add(err) // res still holds what could be detected
	}
	return res
}

// telemetryErrors keeps the first telemetry error of a command.
type telemetryErrors struct {
	mu  sync.Mutex
	err error
}

func (e *telemetryErrors) add(err error) {
	if err == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil {
		e.err = err
	}
}

func (e *telemetryErrors) first() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// errorHandler is the process's OpenTelemetry error handler (a global of
// the OTel API: the SDK's background exports report there). It forwards to
// the running command's telemetryErrors and drops errors between commands.
var errorHandler forwarder

type forwarder struct {
	once sync.Once
	sink atomic.Pointer[telemetryErrors]
}

func (f *forwarder) install() {
	f.once.Do(func() { otel.SetErrorHandler(f) })
}

func (f *forwarder) Handle(err error) {
	if s := f.sink.Load(); s != nil {
		s.add(err)
	}
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(tgruntime.Message(err)), " ")
}
