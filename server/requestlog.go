package server

import (
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
)

// logWriter records what the request log says about a request: its status,
// and what the handlers learn on the way (the principal, the execution).
type logWriter struct {
	http.ResponseWriter
	status      int
	principal   string
	executionID string
}

func (w *logWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *logWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (write
// deadlines).
func (w *logWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// noted returns the request's log record, or a throwaway one when the
// request log is off.
func noted(w http.ResponseWriter) *logWriter {
	if lw, ok := w.(*logWriter); ok {
		return lw
	}
	return &logWriter{}
}

// requestLog writes one line per request to log once it is answered:
// method, path, principal ("" before authentication), status, execution id
// ("" when none), duration.
func requestLog(log *slog.Logger, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		lw := &logWriter{ResponseWriter: w}
		defer func() {
			status := lw.status
			if status == 0 {
				status = http.StatusOK // nothing written: net/http answers 200
			}
			log.LogAttrs(r.Context(), slog.LevelInfo, "request",
				slog.String("method", r.Method), slog.String("path", r.URL.Path),
				slog.String("principal", lw.principal), slog.Int("status", status),
				slog.String("executionId", lw.executionID), slog.Duration("duration", time.Since(start)))
		}()
		h.ServeHTTP(lw, r)
	})
}

// NotePrincipal tells the request log who made the request, once a handler
// served through [Instrument] has authenticated it.
func NotePrincipal(w http.ResponseWriter, principal string) { noted(w).principal = principal }

// Instrument is h served as the server serves its API: a span per request
// (with opts' tracer and meter providers; a caller's traceparent is its
// parent; named by the pattern of the route that served it) and, with
// opts.RequestLog, one request-log line once answered. The server serves
// its API and each of Options.Handlers through it. opts nil means neither
// a log nor providers of its own (the global ones).
func Instrument(h http.Handler, opts *Options) http.Handler {
	if opts != nil && opts.RequestLog != nil {
		h = requestLog(opts.RequestLog, h)
	}
	return otelhttp.NewHandler(h, "toolgate", handlerOptions(opts)...)
}

// handlerOptions are the options of the server's otelhttp handlers: W3C
// trace context whatever the global propagator is (a caller's traceparent
// makes the server span its child), opts' providers, spans named by their
// route's pattern.
func handlerOptions(opts *Options) []otelhttp.Option {
	hopts := []otelhttp.Option{otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))}
	if opts != nil && opts.TracerProvider != nil {
		hopts = append(hopts, otelhttp.WithTracerProvider(opts.TracerProvider))
	}
	if opts != nil && opts.MeterProvider != nil {
		hopts = append(hopts, otelhttp.WithMeterProvider(opts.MeterProvider))
	}
	return append(hopts, otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		if r.Pattern != "" {
			return r.Pattern // "POST /v1/tools/{name}/execute": low cardinality
		}
		return r.Method
	}))
}
