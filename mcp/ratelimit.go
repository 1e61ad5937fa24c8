package mcp

import (
	"context"
	"encoding/json"
	"log/slog"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/ratelimit"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// RateLimits are token buckets per principal and per tool in front of
// tools/call: the same type, and the same "rateLimits" of the config file,
// as toolgate serve's (server.RateLimits). A zero Rate means no limit.
type RateLimits = ratelimit.Limits

// Rate is a token bucket: PerSecond tokens a second, up to Burst.
type Rate = ratelimit.Rate

// MetaRetryAfter is the _meta key of a rate-limited call's answer: the
// seconds to wait before calling again.
const MetaRetryAfter = "io.toolgate/retryAfter"

// admit takes a token from the buckets of the call's principal and of tool
// ("" for toolgate.execute_intent: the principal's only, as toolgate
// serve's intent execution). Past either limit the call is refused before
// anything runs: an isError result, state REFUSED, ResourceError
// rate_limited, that says which limit and when to retry (retryAfter, in
// seconds, in the error and in _meta), recorded on the call's span and in
// the refusal log. nil means admitted.
func (s *Server) admit(ctx context.Context, span trace.Span, r request, tool string) *sdk.CallToolResult {
	if s.limits == nil {
		return nil
	}
	ex := s.limits.Take(r.principal, tool)
	if ex == nil {
		return nil
	}
	retry := ex.RetryAfter()
	span.SetAttributes(attribute.String("error.type", "rate_limited"), attribute.String("toolgate.rate_limit", ex.Limit))
	span.SetStatus(codes.Error, "rate limited")
	s.refusals.LogAttrs(ctx, slog.LevelWarn, "call refused",
		slog.String("code", "rate_limited"), slog.String("limit", ex.Limit),
		slog.String("principal", r.principal), slog.String("tool", tool),
		slog.String("callId", r.callID), slog.Int("retryAfter", retry))
	info := rateLimitedError{ErrorInfo: tgruntime.ErrorInfo{Type: "ResourceError", Code: "rate_limited", Message: ex.Error()}, RetryAfter: retry}
	b, _ := json.Marshal(map[string]any{"state": "REFUSED", "error": info})
	return &sdk.CallToolResult{
		IsError: true,
		Content: []sdk.Content{&sdk.TextContent{Text: string(b)}},
		Meta:    sdk.Meta{MetaError: info, MetaState: "REFUSED", MetaRetryAfter: retry},
	}
}

// rateLimitedError is the error of a rate-limited call: the error's type,
// code and message, and the seconds to wait.
type rateLimitedError struct {
	tgruntime.ErrorInfo
	RetryAfter int `json:"retryAfter"`
}
