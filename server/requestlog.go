package server

import (
	"log/slog"
	"net/http"
	"time"
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
