package mcp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/ratelimit"
	"github.com/toolgate/toolgate/lifecycle"
	"github.com/toolgate/toolgate/oauth"
	"github.com/toolgate/toolgate/rules"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// ExecuteIntentTool is the name of the tool that runs an approved intent.
const ExecuteIntentTool = "toolgate.execute_intent"

// Keys of _meta, in requests and results.
const (
	MetaIdempotencyKey = "io.toolgate/idempotencyKey"
	MetaExecutionID    = "io.toolgate/executionId"
	MetaCallID         = "io.toolgate/callId"
	MetaTraceID        = "io.toolgate/traceId"
	MetaState          = "io.toolgate/state"
	MetaReplayed       = "io.toolgate/replayed"
	MetaIntent         = "io.toolgate/intent"
	MetaError          = "io.toolgate/error"
	// MetaWrapResult, in a tool's _meta, marks a tool whose output is not
	// a JSON object: its structured content is {"result": OUTPUT}.
	MetaWrapResult = "io.toolgate/wrapResult"
)

// Options configure a Server. A nil *Options means the zero value.
type Options struct {
	// Principal is who every call runs as, unless the transport
	// authenticated someone else (an HTTP bearer token, see HTTPOptions);
	// "" means "mcp:anonymous".
	Principal string
	// Grants are capabilities granted to every call on top of the
	// runtime's policy (the CLI's --allow).
	Grants []capability.Capability
	// Name and Version are the server's implementation info; default
	// "toolgate" and "".
	Name, Version string
	// ApproveHint says what a person runs to approve an intent; %s is the
	// intent id. Default "toolgate intent approve %s".
	ApproveHint string
	// ProgressInterval is how often a call that asked for progress reports
	// it; default 1s.
	ProgressInterval time.Duration
	// TracerProvider receives a span per tools/call ("tools/call TOOL"),
	// parent of the runtime's own; nil means none (a traceparent in _meta
	// is still continued by the runtime's spans).
	TracerProvider trace.TracerProvider
	// Logger receives warnings (tools left out) and internal errors; nil
	// means none.
	Logger *slog.Logger
	// ApproveViaElicitation lets the session's own client approve a call
	// that requires approval: when the client declared the elicitation
	// capability, such a call asks it (an input request of the call, or
	// elicitation/create for a client older than protocol 2026-07-28) to
	// show its user the exact canonical call and its hash, and an accept
	// with the confirmation ticked approves the intent as the session's
	// principal, recorded "via elicitation", and runs it once. A decline, a
	// cancel or no answer leaves the intent pending. Off by default: the
	// approval passes through the agent's own client, which a person
	// approving out of band (toolgate intent approve) does not depend on.
	ApproveViaElicitation bool
	// RateLimits limit the tools/calls of each principal and of each tool,
	// as toolgate serve's do (see RateLimits); zero means no limit. The
	// buckets are this Server's own: each process counts for itself.
	RateLimits RateLimits
	// RefusalLog receives one line (level Warn, message "call refused") per
	// call refused by a rate limit: code, limit, principal, tool, callId,
	// retryAfter. nil means Logger.
	RefusalLog *slog.Logger
}

// Server is an MCP server over one runtime. It is safe for concurrent use,
// by any number of sessions.
type Server struct {
	rt       *tgruntime.Runtime
	opts     Options
	sdk      *sdk.Server
	tagKey   string // the _meta key the wire reader puts the request id under
	stateKey []byte // signs the request state of approval questions
	tracer   trace.Tracer
	skipped  []string
	entries  map[string]*tools.Entry // by MCP name, for tools/list's filter
	// wrapped holds the tools whose output is not an object: their
	// structured content is {"result": OUTPUT} (see outputSchema).
	wrapped  map[toolVersion]bool
	limits   *ratelimit.Limiter // nil: no limits
	refusals *slog.Logger
}

type toolVersion struct{ tool, version string }

// New builds the MCP server of rt's registry. It fails when a registered
// tool would take the name of toolgate's own tool.
func New(rt *tgruntime.Runtime, opts *Options) (*Server, error) {
	s := &Server{rt: rt}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Principal == "" {
		s.opts.Principal = "mcp:anonymous"
	}
	if err := tgruntime.CheckIdentity(s.opts.Principal, ""); err != nil {
		return nil, fmt.Errorf("mcp: principal: %s", strings.TrimPrefix(err.Error(), "runtime: "))
	}
	if s.opts.Name == "" {
		s.opts.Name = "toolgate"
	}
	if s.opts.ApproveHint == "" {
		s.opts.ApproveHint = "toolgate intent approve %s"
	}
	if s.opts.ProgressInterval <= 0 {
		s.opts.ProgressInterval = time.Second
	}
	if s.opts.Logger == nil {
		s.opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := s.opts.RateLimits.Check(); err != nil {
		return nil, fmt.Errorf("mcp: %w", err)
	}
	if s.opts.RateLimits != (RateLimits{}) {
		s.limits = ratelimit.New(s.opts.RateLimits)
	}
	s.refusals = s.opts.RefusalLog
	if s.refusals == nil {
		s.refusals = s.opts.Logger
	}
	if s.opts.TracerProvider != nil {
		s.tracer = s.opts.TracerProvider.Tracer("github.com/toolgate/toolgate/mcp")
	}
	s.tagKey = "io.toolgate/rpc-" + randomHex(8)
	s.stateKey = []byte(randomHex(32))
	s.entries = map[string]*tools.Entry{}
	s.sdk = sdk.NewServer(&sdk.Implementation{Name: s.opts.Name, Version: s.opts.Version},
		&sdk.ServerOptions{Logger: s.opts.Logger, Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{}},
			SetCacheable: privateToolList})
	s.sdk.AddReceivingMiddleware(s.visibleTools)

	reg := rt.Registry()
	for _, e := range reg.Entries() {
		d := e.Declaration()
		if d.ID == ExecuteIntentTool {
			return nil, fmt.Errorf("mcp: the registered tool %s takes the name of toolgate's own tool", d.Key())
		}
		if h, err := reg.Lookup(d.ID, ""); err == nil && h.Declaration().Version == d.Version {
			s.add(e, d.ID) // the highest version, under the plain id
		}
		s.add(e, VersionedName(d.ID, d.Version))
	}
	s.sdk.AddTool(&sdk.Tool{
		Name:  ExecuteIntentTool,
		Title: "Run an approved intent",
		Description: "Runs an intent a person approved: the exact call it holds, at most once. " +
			"A tool that requires approval answers a call with the intent's id and hash; once a person approved it, call this tool with them. " +
			"Running it again returns the stored outcome, marked replayed. " +
			"The id may be given as intentId, the name the approval answer uses.",
		InputSchema:  executeIntentInput,
		OutputSchema: executeIntentOutput,
		Annotations:  &sdk.ToolAnnotations{Title: "Run an approved intent", DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
	}, s.executeIntent)
	return s, nil
}

// SDK returns the underlying SDK server, for an embedder that adds its own
// features. Connect it through Run or Handler so that request ids are
// recorded.
func (s *Server) SDK() *sdk.Server { return s.sdk }

// Skipped names the tools left out of tools/list, and why.
func (s *Server) Skipped() []string { return slices.Clone(s.skipped) }

// VersionedName is the MCP tool name of one version of a tool: ID--VERSION,
// with a "+" written "_".
func VersionedName(id, version string) string {
	return id + "--" + strings.ReplaceAll(version, "+", "_")
}

func (s *Server) add(e *tools.Entry, name string) {
	d := e.Declaration()
	var in map[string]any
	if err := json.Unmarshal(d.InputSchema, &in); err != nil || in["type"] != "object" {
		s.skipped = append(s.skipped, name+": its input schema is not of type \"object\", which MCP requires")
		s.opts.Logger.Warn("tool left out of tools/list: its input schema is not of type \"object\", which MCP requires", "tool", d.Key())
		return
	}
	// A call a Cedar policy asks a person about answers the
	// approval_required object, as a tool requiring approval does.
	sd := d
	if set := s.rt.Policy().Rules(); set != nil && set.MayAsk(d.ID, d.Version) {
		sd.RequiresApproval = true
	}
	out, wrap, err := outputSchema(sd)
	if err != nil {
		s.skipped = append(s.skipped, name+": "+err.Error())
		s.opts.Logger.Warn("tool left out of tools/list: "+err.Error(), "tool", d.Key())
		return
	}
	meta := sdk.Meta{"io.toolgate/tool": d.ID, "io.toolgate/version": d.Version, "io.toolgate/requiresApproval": d.RequiresApproval}
	if wrap {
		if s.wrapped == nil {
			s.wrapped = make(map[toolVersion]bool)
		}
		s.wrapped[toolVersion{d.ID, d.Version}] = true
		meta[MetaWrapResult] = true
	}
	t := &sdk.Tool{
		Name:         name,
		Title:        d.Name,
		Description:  d.Description,
		InputSchema:  json.RawMessage(d.InputSchema),
		OutputSchema: out,
		Annotations:  annotations(d),
		Meta:         meta,
	}
	defer func() {
		if p := recover(); p != nil { // the SDK refuses the tool
			s.skipped = append(s.skipped, fmt.Sprintf("%s: %v", name, p))
			s.opts.Logger.Warn("tool left out of tools/list", "tool", d.Key(), "reason", fmt.Sprint(p))
		}
	}()
	s.sdk.AddTool(t, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return s.call(ctx, req, e, &d) // d read once, not per call
	})
	s.entries[name] = e
}

// annotations derives the MCP hints from a declaration.
func annotations(d tools.Declaration) *sdk.ToolAnnotations {
	// readOnly as the runtime decides whether a call needs a claim; an
	// input capability counts: some calls require it.
	readOnly, openWorld := d.ReadOnly(), false
	for _, c := range d.MayRequire() {
		switch c.Name {
		case "filesystem.read", "state.read", "filesystem.write", "state.write":
		default: // process.exec, or anything reaching beyond files and state
			openWorld = true
		}
	}
	return &sdk.ToolAnnotations{
		Title:           d.Name,
		ReadOnlyHint:    readOnly,
		IdempotentHint:  d.Idempotent,
		DestructiveHint: ptr(!readOnly),
		OpenWorldHint:   ptr(openWorld),
	}
}

func ptr[T any](v T) *T { return &v }

// request is what a tools/call carries besides its arguments.
type request struct {
	principal string
	grants    []capability.Capability // Options.Grants, and what the policy grants an OAuth token's scopes and claims
	token     *audit.Token            // the OAuth access token the call came with, if any
	scopes    []string                // its scopes and grant claims, which Cedar policies see
	claims    map[string][]string
	callID    string
	session   string
	rpcID     string
	key       string
}

func (s *Server) request(req *sdk.CallToolRequest) (request, error) {
	r := request{}
	r.principal, r.grants, r.token = s.caller(req.Extra)
	r.scopes, r.claims = tokenClaims(req.Extra)
	meta := req.Params.Meta
	if v, ok := meta[s.tagKey].(string); ok {
		r.session, r.rpcID, _ = strings.Cut(v, " ")
		if r.session == "" && req.Session != nil {
			r.session = req.Session.ID()
		}
		if r.rpcID != "" && r.session != "" {
			r.callID = "mcp:" + callIDPart(r.session, 48) + ":" + callIDPart(r.rpcID, 64)
		}
	}
	if v, ok := meta[MetaIdempotencyKey]; ok {
		key, isString := v.(string)
		if !isString || key == "" {
			return r, fmt.Errorf("_meta %q must be a non-empty string", MetaIdempotencyKey)
		}
		r.key = key
	}
	return r, nil
}

// caller is who a request comes from: Options.Principal over stdio, the
// principal of its bearer token over HTTP; the grants its calls carry
// (Options.Grants, and what the policy grants an OAuth token's scopes and
// claims); and the token, for the records.
func (s *Server) caller(extra *sdk.RequestExtra) (principal string, grants []capability.Capability, token *audit.Token) {
	principal, grants = s.opts.Principal, s.opts.Grants
	if extra == nil || extra.TokenInfo == nil || extra.TokenInfo.UserID == "" {
		return principal, grants, nil
	}
	principal = extra.TokenInfo.UserID
	if id, ok := extra.TokenInfo.Extra[identityKey].(*oauth.Identity); ok {
		token = &audit.Token{Issuer: id.Issuer, Subject: id.Subject, SHA256: id.TokenSHA256}
		grants = slices.Clone(s.opts.Grants)
		pol := s.rt.Policy()
		for _, sub := range id.PolicySubjects() {
			grants = append(grants, pol.Grants(sub)...)
		}
	}
	return principal, grants, token
}

var callIDSafe = regexp.MustCompile(`^[0-9A-Za-z._-]+$`)

// callIDPart is s if a call id may hold it within max bytes, else a hash
// of it.
func callIDPart(s string, max int) string {
	if len(s) <= max && callIDSafe.MatchString(s) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "h" + hex.EncodeToString(sum[:12])
}

// context continues the caller's trace (_meta traceparent) and opens the
// tools/call span.
func (s *Server) context(ctx context.Context, req *sdk.CallToolRequest, r request) (context.Context, trace.Span) {
	var carrier propagation.MapCarrier // made only when there is a trace context
	for _, k := range []string{"traceparent", "tracestate"} {
		if v, ok := req.Params.Meta[k].(string); ok {
			if carrier == nil {
				carrier = propagation.MapCarrier{}
			}
			carrier[k] = v
		}
	}
	if carrier != nil {
		ctx = propagation.TraceContext{}.Extract(ctx, carrier)
	}
	if s.tracer == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	attrs := []attribute.KeyValue{
		attribute.String("mcp.method.name", "tools/call"),
		attribute.String("gen_ai.tool.name", req.Params.Name),
		attribute.String("gen_ai.operation.name", "execute_tool"),
	}
	if r.session != "" {
		attrs = append(attrs, attribute.String("mcp.session.id", r.session))
	}
	if r.rpcID != "" {
		attrs = append(attrs, attribute.String("jsonrpc.request.id", r.rpcID))
	}
	return s.tracer.Start(ctx, "tools/call "+req.Params.Name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

func (s *Server) call(ctx context.Context, req *sdk.CallToolRequest, e *tools.Entry, dp *tools.Declaration) (*sdk.CallToolResult, error) {
	d := dp
	r, err := s.request(req)
	if err != nil {
		return nil, invalidParams(userMessage(err))
	}
	ctx, span := s.context(ctx, req, r)
	defer span.End()
	if refused := s.admit(ctx, span, r, d.ID); refused != nil {
		return refused, nil
	}
	input := req.Params.Arguments
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	inv := tgruntime.Invocation{
		Tool: d.ID, Version: d.Version, Input: input, CallID: r.callID,
		Principal: r.principal, Grants: r.grants, Token: r.token, Scopes: r.scopes, Claims: r.claims, IdempotencyKey: r.key,
	}
	ctx, stop := s.progress(ctx, req, d)
	defer stop()
	if d.RequiresApproval || s.asks(e, inv) {
		return s.approval(ctx, req, e, inv)
	}
	res, err := s.rt.Execute(ctx, inv)
	return s.answer(res, err)
}

// approval answers a call of a tool that requires approval: an approved
// intent for the identical call runs (once); otherwise the call becomes
// an intent, or is refused as Execute would refuse it (recorded).
func (s *Server) approval(ctx context.Context, req *sdk.CallToolRequest, e *tools.Entry, inv tgruntime.Invocation) (*sdk.CallToolResult, error) {
	d := e.Declaration()
	if len(inv.Input) > 0 && e.ValidateInput(inv.Input) != nil {
		return s.answer(s.rt.Execute(ctx, inv)) // FAILED, recorded
	}
	dec := s.rt.DecideFor(callerOf(inv), e, inv.Input, inv.Grants)
	if !dec.Allowed() {
		return s.answer(s.rt.Execute(ctx, inv)) // DENIED, recorded
	}
	hash, err := tgruntime.IntentHash(d.ID, d.Version, inv.Input)
	if err != nil {
		return s.answer(s.rt.Execute(ctx, inv))
	}
	// The newest intent this principal proposed for the identical call.
	in, err := s.rt.IntentFor(ctx, inv.Principal, hash)
	var ie *tgruntime.IntentError
	switch {
	case errors.As(err, &ie) && ie.Code == "intent_not_found":
	case err != nil:
		return s.answer(nil, err)
	default:
		switch in.Status {
		case "approved", "executed":
			inv.IntentID, inv.IntentHash = in.ID, in.Hash
			inv.Tool, inv.Version, inv.Input = "", "", nil
			return s.answer(s.rt.Execute(ctx, inv))
		case "pending":
			return s.elicit(ctx, req, inv, in, dec.Rules)
		} // rejected: a new intent
	}
	in, err = s.rt.Propose(ctx, inv)
	if err != nil {
		return s.answer(nil, err)
	}
	return s.elicit(ctx, req, inv, in, dec.Rules)
}

// asks reports whether the policy's Cedar policies ask a person about
// inv, a call of e (valid input, allowed otherwise): it then becomes an
// intent, as a call of a tool requiring approval does.
func (s *Server) asks(e *tools.Entry, inv tgruntime.Invocation) bool {
	if s.rt.Policy().Rules() == nil || e.ValidateInput(inv.Input) != nil {
		return false
	}
	d := s.rt.DecideFor(callerOf(inv), e, inv.Input, inv.Grants)
	return d.Allowed() && d.Rules != nil && d.Rules.Effect == rules.Approval
}

func callerOf(inv tgruntime.Invocation) tools.Caller {
	return tools.Caller{Principal: inv.Principal, Scopes: inv.Scopes, Claims: inv.Claims}
}

// Via is how an approval through elicitation is recorded
// (runtime.IntentDecision.Via and the audit event's intent.via).
const Via = "elicitation"

// elicitSchema is the form an approval by elicitation asks for: one
// explicit confirmation, which must be true.
var elicitSchema = json.RawMessage(`{"type":"object","properties":{"approve":{"type":"boolean","title":"Approve and run this exact call once",` +
	`"description":"true approves the call shown, as you, and runs it once"}},"required":["approve"]}`)

// elicit answers a pending intent. With elicitation on and a client that
// declared it, the first call returns an input request (multi round-trip
// requests: the SDK's client, or for an older client the SDK's server,
// asks the user with elicitation/create and calls again with the answer);
// the call again with an accept whose confirmation is true approves the
// intent as the session's principal, via elicitation, and runs it once.
// Otherwise (off, no capability, declined, cancelled, an answer to a
// question this server did not ask) the intent stays pending and the call
// answers approval_required.
func (s *Server) elicit(ctx context.Context, req *sdk.CallToolRequest, inv tgruntime.Invocation, in *tgruntime.Intent, rd *rules.Decision) (*sdk.CallToolResult, error) {
	if !s.opts.ApproveViaElicitation || req.Session == nil {
		return s.pending(in, rd), nil
	}
	if ip := req.Session.InitializeParams(); ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil {
		return s.pending(in, rd), nil
	}
	key, state := "toolgate.approve."+in.ID, s.requestState(in, inv.Principal)
	if answer, ok := req.Params.InputResponses[key].(*sdk.ElicitResult); ok {
		// Only an answer to the question this server asked about this very
		// intent, for this principal, counts.
		if !hmac.Equal([]byte(req.Params.RequestState), []byte(state)) || answer.Action != "accept" || answer.Content["approve"] != true {
			return s.pending(in, rd), nil
		}
		if _, err := s.rt.ApproveVia(ctx, in.ID, inv.Principal, Via); err != nil {
			return s.answer(nil, err)
		}
		inv.IntentID, inv.IntentHash = in.ID, in.Hash
		inv.Tool, inv.Version, inv.Input = "", "", nil
		return s.answer(s.rt.Execute(ctx, inv))
	}
	canonical, err := canonicalCall(in)
	if err != nil {
		return s.pending(in, rd), nil
	}
	msg := fmt.Sprintf("The agent asks to run %s@%s, which requires a person's approval. Approving runs exactly this call, once, "+
		"as %s; the approval is recorded as yours, via elicitation.\n\nThe call (canonical JSON):\n%s\n\nIts SHA-256 (intent %s):\n%s",
		in.Tool, in.Version, inv.Principal, canonical, in.ID, in.Hash)
	return &sdk.CallToolResult{
		InputRequests: sdk.InputRequestMap{key: &sdk.ElicitParams{
			Message: msg, RequestedSchema: elicitSchema,
			Meta: sdk.Meta{MetaIntent: map[string]any{"intentId": in.ID, "hash": in.Hash, "tool": in.Tool, "version": in.Version, "call": json.RawMessage(canonical)}},
		}},
		RequestState: state,
	}, nil
}

// requestState binds an approval question to its intent and principal: an
// HMAC under the server's own key, which a client cannot make up.
func (s *Server) requestState(in *tgruntime.Intent, principal string) string {
	m := hmac.New(sha256.New, s.stateKey)
	m.Write([]byte(in.ID + "\x00" + in.Hash + "\x00" + principal))
	return hex.EncodeToString(m.Sum(nil))
}

// canonicalCall is what an intent's hash is the SHA-256 of: the RFC 8785
// canonical form of {"input", "tool", "version"}.
func canonicalCall(in *tgruntime.Intent) ([]byte, error) {
	b, err := json.Marshal(struct {
		Input   json.RawMessage `json:"input"`
		Tool    string          `json:"tool"`
		Version string          `json:"version"`
	}{in.Input, in.Tool, in.Version})
	if err != nil {
		return nil, err
	}
	b, err = audit.Canonicalize(b)
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != in.Hash {
		return nil, errors.New("the intent's canonical form does not hash to its hash")
	}
	return b, nil
}

func (s *Server) pending(in *tgruntime.Intent, rd *rules.Decision) *sdk.CallToolResult {
	approve := fmt.Sprintf(s.opts.ApproveHint, in.ID)
	v := map[string]any{
		"status": "approval_required", "intentId": in.ID, "hash": in.Hash,
		"tool": in.Tool, "version": in.Version, "approve": approve,
		"then": fmt.Sprintf("call %s with {\"id\": %q, \"hash\": %q}, or repeat this call", ExecuteIntentTool, in.ID, in.Hash),
	}
	why, who := "requires a person's approval", "a person"
	if rd != nil && rd.Effect == rules.Approval {
		// Which Cedar policies asked, under which policy set, and whom.
		v["policies"], v["policySet"] = rd.Policies, rd.Revision
		why = "needs a person's approval under Cedar policy " + strings.Join(rd.Policies, ", ") + " (policy set " + rd.Revision + ")"
		if len(rd.Approvers) > 0 {
			v["approvers"] = rd.Approvers
			who = "a member of " + strings.Join(rd.Approvers, " and ")
		}
	}
	b, _ := json.Marshal(v)
	text := fmt.Sprintf("%s@%s %s and did not run. Intent %s (hash %s) waits for it: %s approves it with `%s`. "+
		"Once approved, call %s with {\"id\": %q, \"hash\": %q}, or repeat this call; it runs once.\n%s",
		in.Tool, in.Version, why, in.ID, in.Hash, who, approve, ExecuteIntentTool, in.ID, in.Hash, b)
	return &sdk.CallToolResult{
		Content:           []sdk.Content{&sdk.TextContent{Text: text}},
		StructuredContent: json.RawMessage(b), // the approval_required branch of the tool's outputSchema
		Meta:              sdk.Meta{MetaIntent: v, MetaState: "APPROVAL_REQUIRED"},
	}
}

func (s *Server) executeIntent(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	r, err := s.request(req)
	if err != nil {
		return nil, invalidParams(userMessage(err))
	}
	ctx, span := s.context(ctx, req, r)
	defer span.End()
	if refused := s.admit(ctx, span, r, ""); refused != nil {
		return refused, nil
	}
	ref, err := parseIntentRef(req.Params.Arguments)
	if err != nil {
		return refusal("ValidationError", "invalid_input", err.Error()), nil
	}
	ctx, stop := s.progress(ctx, req, nil)
	defer stop()
	res, err := s.rt.Execute(ctx, tgruntime.Invocation{
		IntentID: ref.ID, IntentHash: ref.Hash, CallID: r.callID,
		Principal: r.principal, Grants: r.grants, Token: r.token, Scopes: r.scopes, Claims: r.claims,
	})
	return s.answer(res, err)
}

// progress reports the elapsed time while the call runs, when the client
// sent a progress token, and the bytes of output the call's processes
// wrote so far (for a tool that may run processes, or once one wrote
// something); it returns the context to run the call in and the function
// that stops it.
func (s *Server) progress(ctx context.Context, req *sdk.CallToolRequest, d *tools.Declaration) (context.Context, func()) {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return ctx, func() {}
	}
	out := new(tools.OutputCounter)
	ctx = tools.WithOutputCounter(ctx, out)
	process := d != nil && slices.ContainsFunc(d.RequiredCapabilities, func(c capability.Capability) bool { return c.Name == "process.exec" })
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		start := time.Now()
		t := time.NewTicker(s.opts.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				el := time.Since(start)
				msg := "running for " + el.Round(time.Millisecond).String()
				if n := out.Bytes(); process || n > 0 {
					msg += fmt.Sprintf("; %d bytes of output so far", n)
				}
				req.Session.NotifyProgress(context.WithoutCancel(ctx), &sdk.ProgressNotificationParams{
					ProgressToken: token, Progress: el.Seconds(), Message: msg,
				})
			}
		}
	}()
	return ctx, func() { close(done); <-stopped }
}

// answer maps an invocation's outcome to a tools/call result.
func (s *Server) answer(res *tgruntime.Result, err error) (*sdk.CallToolResult, error) {
	if res == nil {
		var ie *tgruntime.IntentError
		var ke *tgruntime.IdempotencyError
		var ve *tgruntime.ValidationError
		switch {
		case errors.Is(err, tools.ErrToolNotFound), errors.Is(err, tools.ErrVersionNotFound):
			return nil, invalidParams(userMessage(err))
		case errors.As(err, &ie):
			return refusal("IntentError", ie.Code, userMessage(err)), nil
		case errors.As(err, &ke):
			return refusal("IdempotencyError", ke.Code, userMessage(err)), nil
		case errors.As(err, &ve):
			return refusal("ValidationError", "invalid_"+ve.Phase, userMessage(err)), nil
		case errors.Is(err, tgruntime.ErrClosed):
			return nil, internalError("the server is shutting down")
		}
		s.opts.Logger.Error("invocation could not be run", "error", err)
		return nil, internalError("the invocation could not be run; see the server's log")
	}
	meta := sdk.Meta{MetaExecutionID: res.ExecutionID, MetaCallID: res.CallID, MetaState: string(res.State)}
	if res.TraceID != "" {
		meta[MetaTraceID] = res.TraceID
	}
	if res.Replayed {
		meta[MetaReplayed] = true
	}
	if res.IntentID != "" {
		meta["io.toolgate/intentId"] = res.IntentID
	}
	if res.State == lifecycle.Completed {
		out := res.Output
		if len(out) == 0 {
			out = json.RawMessage("null")
		}
		structured := out
		if len(s.wrapped) > 0 && s.wrapped[toolVersion{res.Tool, res.Version}] {
			structured = wrapResult(out) // see outputSchema
		}
		return &sdk.CallToolResult{
			Content:           []sdk.Content{&sdk.TextContent{Text: string(out)}},
			StructuredContent: structured,
			Meta:              meta,
		}, nil
	}
	info := tgruntime.ErrorInfo{Type: "Error", Code: strings.ToLower(string(res.State))}
	if res.Error != nil {
		info = *res.Error
		info.Stack = "" // stays in the records
	}
	meta[MetaError] = info
	body := map[string]any{"state": res.State, "executionId": res.ExecutionID, "callId": res.CallID, "error": info}
	if res.Replayed {
		body["replayed"] = true
	}
	b, _ := json.Marshal(body)
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}, Meta: meta}, nil
}

// refusal is a call refused before anything ran.
func refusal(typ, code, msg string) *sdk.CallToolResult {
	info := tgruntime.ErrorInfo{Type: typ, Code: code, Message: msg}
	b, _ := json.Marshal(map[string]any{"state": "REFUSED", "error": info})
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}, Meta: sdk.Meta{MetaError: info}}
}

func userMessage(err error) string { return tgruntime.Message(err) }

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
