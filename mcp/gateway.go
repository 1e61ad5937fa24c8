package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
)

// GatewayOptions configure a Gateway. A nil *GatewayOptions means the zero
// value.
type GatewayOptions struct {
	// Stderr receives what stdio upstream servers write to their standard
	// error, each line prefixed "toolgate: MCP server NAME: "; nil
	// discards it.
	Stderr io.Writer
	// StartTimeout bounds connecting to an upstream and reading its
	// tools/list; default 30s.
	StartTimeout time.Duration
	// Version is the client version toolgate reports to upstreams.
	Version string
	// MaxTools bounds the tools/list of one server: a server that lists
	// more (one whose pages never end would fill memory until
	// StartTimeout) is refused. Default 10000.
	MaxTools int
	// Only, when set, says which servers to start: Tools leaves the
	// others out, unstarted, with none of their tools (for a program that
	// needs one tool, as toolgate run file.read needs no upstream). Nil
	// starts every server.
	Only func(server string) bool
}

// Gateway governs upstream MCP servers: it turns each tool of each server a
// registry file declares (tools.MCPServer) into a toolgate tool NAME.TOOL,
// which runs through runtime.Execute like any other. Pass its Tools method
// to tools.LoadRegistryFileWith, and Close it when the runtime is closed.
//
// What a gateway tool is:
//
//   - its id is NAME.MappedName(TOOL) (two tools whose names map to one id
//     are both left out, with a warning naming both; a tool whose id is a
//     built-in tool's or toolgate.execute_intent is left out, with a
//     warning); its schemas are the upstream's, in any dialect the validator
//     supports (tools.UpstreamSchemas): RFC-0001 6.3's findings are warnings
//     kept with the tool, or, with the server's strict_schemas, leave it out
//     with a warning naming it and why. An inputSchema without $schema gets
//     draft 2020-12's, which MCP defines as the default dialect. A tool without an
//     outputSchema gets a permissive one ({"type": "object"}), and its output
//     is {"content": [the result's content blocks]} (with
//     "structuredContent" when the result has one); a tool with an
//     outputSchema outputs the result's structuredContent, which the runtime
//     validates against it.
//   - its version is the one pinned in the file, else the upstream server's
//     own (a leading "v" dropped; one that is not a semantic version must be
//     pinned). Approvals are bound to tool@version, so under a pin the
//     upstream's definition is pinned too: the file gives, per tool, the
//     definition_sha256 of the definition it approved (DefinitionSHA256;
//     PinBlock prints them), and/or the schema_sha256 of its schemas
//     (SchemaSHA256); a pinned tool with neither refuses to load, naming
//     the hash, unless the server says pin_definitions: false. A pinned
//     tool whose definition differs is registered but unavailable (a
//     tools.UnavailableError naming what changed, and a warning) until a
//     person updates the pin.
//   - it requires mcp.call:NAME/TOOL (a grant of mcp.call:NAME covers every
//     tool of the server), and is idempotent, requires approval and has the
//     limits the file says (per tool, else per server). The upstream's own
//     annotations are hints from the server, not trusted.
//
// A call: the upstream's isError is the tool's failure (ROLLED_BACK, with
// the upstream's text); an upstream that cannot be reached, or that dies
// mid-call, is a tools.UnavailableError, which the runtime records as a
// ResourceError ("mcp_upstream") and retries only for an idempotent tool;
// at the deadline the runtime aborts the attempt (ABORTED) and the upstream
// call is cancelled (notifications/cancelled). One message from an upstream
// is bounded (16 MiB, or twice the largest max_output_bytes of its tools
// when more): a larger one, a JSON answer over HTTP included, breaks the
// connection and the call is a ResourceError, as is a line from a stdio
// server that is not one JSON-RPC message (upstreamTransport). A
// connection that broke is
// opened again on the next call (for stdio, a new process), and its tools'
// definitions are checked again, as they are on the next call after the
// server says its tools changed (notifications/tools/list_changed): a tool
// whose definition changed since the start is unavailable until toolgate
// starts again, and a tool added since is not one of toolgate's.
type Gateway struct {
	opts GatewayOptions

	mu        sync.Mutex
	upstreams []*upstream
	warnings  []string
}

// NewGateway returns a gateway with no upstreams yet.
func NewGateway(opts *GatewayOptions) *Gateway {
	g := &Gateway{}
	if opts != nil {
		g.opts = *opts
	}
	if g.opts.Stderr == nil {
		g.opts.Stderr = io.Discard
	}
	if g.opts.StartTimeout <= 0 {
		g.opts.StartTimeout = 30 * time.Second
	}
	if g.opts.MaxTools <= 0 {
		g.opts.MaxTools = 10000
	}
	return g
}

// Warnings returns why tools were left out, one line each, in the order
// found. (What RFC-0001 6.3 finds in a tool that was kept is its registry
// entry's, tools.Entry.Warnings.)
func (g *Gateway) Warnings() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.warnings)
}

// Close closes every upstream connection (a stdio server's standard input
// is closed; if it has not exited 2 seconds later, its process group is
// killed).
func (g *Gateway) Close() error {
	g.mu.Lock()
	ups := g.upstreams
	g.upstreams = nil
	g.mu.Unlock()
	var errs []error
	for _, u := range ups {
		errs = append(errs, u.close())
	}
	return errors.Join(errs...)
}

// Tools connects to each server, reads its tools/list and returns its
// tools. It fails when a server cannot be started or reached, or when a
// pinned version's schemas are not the pinned ones; a tool that cannot be
// accepted otherwise is left out, with a warning (see Warnings). It has the
// signature of tools.MCPTools.
func (g *Gateway) Tools(servers []tools.MCPServer) ([]tools.Tool, error) {
	var out []tools.Tool
	for i := range servers {
		if g.opts.Only != nil && !g.opts.Only(servers[i].Name) {
			continue
		}
		u := &upstream{decl: servers[i], gw: g}
		g.mu.Lock()
		g.upstreams = append(g.upstreams, u)
		g.mu.Unlock()
		ts, err := u.load()
		if err != nil {
			return nil, fmt.Errorf("MCP server %s: %w", u.decl.Name, err)
		}
		out = append(out, ts...)
	}
	return out, nil
}

func (g *Gateway) warn(format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.warnings = append(g.warnings, fmt.Sprintf(format, args...))
}

// PinBlock connects to the server s, reads its tools/list and returns the
// lines that pin it, ready to paste under its entry in the registry file
// once a person has reviewed the tools: version (the server's own when it
// is a semantic version, else 0.0.0 and a comment saying to choose one)
// and, under tools:, each tool's schema_sha256 and definition_sha256
// (keyed by the upstream's own name), indented for an entry of
// mcp_servers. Both hashes let a drift say whether the schemas changed or
// only the description, title or annotations.
func (g *Gateway) PinBlock(s tools.MCPServer) (string, error) {
	u := &upstream{decl: s, gw: g}
	defer u.close()
	ctx, cancel := context.WithTimeout(context.Background(), g.opts.StartTimeout)
	defer cancel()
	cs, err := u.connect(ctx)
	if err != nil {
		return "", fmt.Errorf("MCP server %s: cannot connect: %v", s.Name, err)
	}
	u.mu.Lock()
	u.session = cs
	u.mu.Unlock()
	list, err := listTools(ctx, cs, g.opts.MaxTools)
	if err != nil {
		return "", fmt.Errorf("MCP server %s: tools/list: %v", s.Name, err)
	}
	var b strings.Builder
	version := ""
	if ir := cs.InitializeResult(); ir != nil && ir.ServerInfo != nil {
		version = strings.TrimPrefix(ir.ServerInfo.Version, "v")
	}
	if tools.IsSemver(version) {
		fmt.Fprintf(&b, "    version: %s\n", version)
	} else {
		fmt.Fprintf(&b, "    version: 0.0.0  # the server reports %q: choose the version you reviewed\n", version)
	}
	b.WriteString("    tools:\n")
	slices.SortFunc(list, func(a, b *sdk.Tool) int { return strings.Compare(a.Name, b.Name) })
	for _, t := range list {
		h, err := SchemaSHA256(t.InputSchema, t.OutputSchema)
		if err != nil {
			return "", fmt.Errorf("MCP server %s: tool %s: its schemas are not JSON: %v", s.Name, t.Name, err)
		}
		d, err := DefinitionSHA256(t)
		if err != nil {
			return "", fmt.Errorf("MCP server %s: tool %s: its definition is not JSON: %v", s.Name, t.Name, err)
		}
		name, _ := json.Marshal(t.Name) // a YAML double-quoted key
		fmt.Fprintf(&b, "      %s: {schema_sha256: %s, definition_sha256: %s}\n", name, h, d)
	}
	return b.String(), nil
}

// SchemaSHA256 is the hash a registry file pins an upstream tool's schemas
// with (schema_sha256): the hex SHA-256 of the JSON object
// {"inputSchema": ..., "outputSchema": ...} holding the schemas as the
// upstream lists them (outputSchema null when it has none), with object
// keys sorted and no insignificant space.
func SchemaSHA256(inputSchema, outputSchema any) (string, error) {
	return canonicalSHA256(map[string]any{"inputSchema": inputSchema, "outputSchema": outputSchema})
}

// canonicalSHA256 is the hex SHA-256 of m as JSON, object keys sorted, no
// insignificant space, numbers as written.
func canonicalSHA256(m map[string]any) (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	var v any // through the generic data model: keys sorted, numbers as written
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return "", err
	}
	if b, err = json.Marshal(v); err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// DefinitionSHA256 is the hash a registry file pins an upstream tool's
// whole definition with (definition_sha256): as SchemaSHA256, of the JSON
// object {"name", "title", "description", "annotations", "inputSchema",
// "outputSchema"} as the upstream lists them (null for what it does not
// give). A changed description (the usual "rug pull" of a tool that was
// approved) changes it.
func DefinitionSHA256(t *sdk.Tool) (string, error) {
	return canonicalSHA256(map[string]any{
		"name": t.Name, "title": t.Title, "description": t.Description, "annotations": t.Annotations,
		"inputSchema": t.InputSchema, "outputSchema": t.OutputSchema,
	})
}

// upstream is one MCP server behind the gateway.
type upstream struct {
	decl tools.MCPServer
	gw   *Gateway

	mu         sync.Mutex
	session    *sdk.ClientSession
	hashes     map[string]string // upstream tool name -> schema hash at load
	stderr     *lineWriter       // the server's standard error, made once by stderrLog
	stderrOnce sync.Once
	stale      bool // the session's server said its tools changed
	closed     bool
}

// errUpstreamClosed is the cause of a call made after the gateway closed.
var errUpstreamClosed = errors.New("the gateway is closed")

// transport returns the transport of the server: for a stdio server, the
// process it starts, bounded as the process tools are (tools.MCPServer's
// Start), whose Close closes the transport.
func (u *upstream) transport() (sdk.Transport, io.Closer, error) {
	max := u.maxMessage()
	if u.decl.URL != "" {
		headers, err := u.decl.Headers()
		if err != nil {
			return nil, nil, err
		}
		client := &http.Client{
			Transport: &headerTransport{base: http.DefaultTransport, headers: headers, max: int64(max)},
			// The headers (credentials, from the environment) are the
			// endpoint's: a redirect elsewhere would carry them there, as
			// the transport sets them on every request.
			CheckRedirect: func(r *http.Request, _ []*http.Request) error {
				return fmt.Errorf("the server redirected to %s; toolgate does not follow an MCP server's redirects", r.URL.Redacted())
			},
		}
		return &sdk.StreamableClientTransport{
			Endpoint:     u.decl.URL,
			HTTPClient:   client,
			MaxRetries:   -1, // a broken stream is the call's ResourceError, not retried behind the runtime's back
			MaxEventSize: max,
		}, nil, nil
	}
	p, err := u.decl.Start(u.stderrLog())
	if err != nil {
		return nil, nil, err
	}
	return &upstreamTransport{rw: p, max: max}, p, nil
}

// stderrLog is where a stdio server's standard error goes: the gateway's
// Stderr, each line prefixed with the server's name, the same writer for
// each process of the server.
func (u *upstream) stderrLog() io.Writer {
	if u.gw.opts.Stderr == io.Discard {
		return io.Discard
	}
	// Not under u.mu: a reconnect (sessionFor) starts the process holding it.
	u.stderrOnce.Do(func() {
		u.stderr = &lineWriter{w: u.gw.opts.Stderr, prefix: "toolgate: MCP server " + u.decl.Name + ": "}
	})
	return u.stderr
}

// lineWriter writes whole lines to w, each with prefix and in one Write
// (so that they do not interleave with toolgate's own messages); a line
// longer than 4 KiB is cut there, and control characters but tab become
// '?' (an upstream's escape sequences do not reach the terminal).
type lineWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

const maxLogLine = 4 << 10

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range p {
		if c == '\n' || len(l.buf) == maxLogLine {
			l.emit()
			if c == '\n' {
				continue
			}
		}
		l.buf = append(l.buf, c)
	}
	return len(p), nil
}

// flush writes a last line without its newline. l.mu is not held.
func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emit()
	}
}

func (l *lineWriter) emit() {
	line := strings.TrimSuffix(string(l.buf), "\r")
	line = strings.Map(func(r rune) rune {
		if r != '\t' && (r < 0x20 || r == 0x7f) {
			return '?'
		}
		return r
	}, line)
	l.w.Write([]byte(l.prefix + line + "\n"))
	l.buf = l.buf[:0]
}

// maxMessage bounds one message from the server, in bytes: 16 MiB (the
// SDK's bound of a stdio line), or room for twice the largest
// max_output_bytes of its tools (a result may hold its output twice, as
// content and structuredContent) when that is more. A larger message ends
// the connection: the call is a ResourceError.
func (u *upstream) maxMessage() int {
	most := u.decl.Limits.MaxOutputBytes
	for _, o := range u.decl.Tools {
		if o.Limits != nil && o.Limits.MaxOutputBytes > most {
			most = o.Limits.MaxOutputBytes
		}
	}
	if n := 2*most + 1<<20; n > sdk.DefaultMaxLineLength {
		return int(n)
	}
	return sdk.DefaultMaxLineLength
}

// connect opens a session (for stdio, starts the process).
func (u *upstream) connect(ctx context.Context) (*sdk.ClientSession, error) {
	t, closer, err := u.transport()
	if err != nil {
		return nil, err
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "toolgate-gateway", Version: u.gw.opts.Version}, &sdk.ClientOptions{
		// A server that changed its tools says so: the next call checks
		// their schemas again, as after a reconnect.
		ToolListChangedHandler: func(_ context.Context, r *sdk.ToolListChangedRequest) {
			u.mu.Lock()
			if u.session == r.Session {
				u.stale = true
			}
			u.mu.Unlock()
		},
	})
	cs, err := c.Connect(ctx, t, nil)
	if err != nil {
		if closer != nil {
			closer.Close()
		}
		return nil, err
	}
	// A session that ends between calls (the process exited) is
	// forgotten, so that the next call connects again instead of failing.
	go func() {
		cs.Wait()
		u.drop(cs)
	}()
	return cs, nil
}

// listTools reads the server's whole tools/list, at most max tools.
func listTools(ctx context.Context, cs *sdk.ClientSession, max int) ([]*sdk.Tool, error) {
	var out []*sdk.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		if len(out) == max {
			return nil, fmt.Errorf("the server lists more than %d tools", max)
		}
		out = append(out, t)
	}
	return out, nil
}

// load connects, lists the tools and makes toolgate tools of them.
func (u *upstream) load() ([]tools.Tool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), u.gw.opts.StartTimeout)
	defer cancel()
	cs, err := u.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot connect: %v", err)
	}
	u.mu.Lock()
	u.session = cs
	u.mu.Unlock()
	list, err := listTools(ctx, cs, u.gw.opts.MaxTools)
	if err != nil {
		return nil, fmt.Errorf("tools/list: %v", err)
	}
	serverVersion := ""
	if ir := cs.InitializeResult(); ir != nil && ir.ServerInfo != nil {
		serverVersion = strings.TrimPrefix(ir.ServerInfo.Version, "v")
	}
	byName := map[string]*sdk.Tool{}
	ids := map[string][]string{} // mapped name -> the upstream names mapping to it
	for _, t := range list {
		byName[t.Name] = t
		m := MappedName(t.Name)
		ids[m] = append(ids[m], t.Name)
	}
	var problems []string
	for name, o := range u.decl.Tools {
		if byName[name] == nil {
			hint := ""
			if same := ids[name]; len(same) == 1 {
				hint = fmt.Sprintf(" (it is the id of its tool %q: tools: takes the server's own names)", same[0])
			}
			problems = append(problems, fmt.Sprintf("tool %s (line %d) is not one the server lists%s", name, o.Line, hint))
		}
	}
	u.hashes = map[string]string{}
	var out []tools.Tool
	for _, t := range list {
		if same := ids[MappedName(t.Name)]; len(same) > 1 {
			// A true collision: neither is the id's, and which one a grant
			// or an approval meant would be a guess.
			var quoted []string
			for _, n := range same {
				quoted = append(quoted, strconv.Quote(n))
			}
			u.gw.warn("%s.%s left out: the server's tools %s all map to the id %s.%s", u.decl.Name, MappedName(t.Name), strings.Join(quoted, " and "), u.decl.Name, MappedName(t.Name))
			continue
		}
		gt, problem, skip := u.tool(t, serverVersion)
		switch {
		case problem != "":
			problems = append(problems, problem)
		case skip != "":
			u.gw.warn("%s.%s left out: %s", u.decl.Name, MappedName(t.Name), skip)
		default:
			out = append(out, gt)
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return nil, errors.New(strings.Join(slices.Compact(problems), "; ")) // each once
	}
	return out, nil
}

// MappedName is the name an upstream tool has in toolgate, the TOOL of its
// id SERVER.TOOL and of its capability scope mcp.call:SERVER/TOOL. A name
// that is lowercase words joined by '.', '_' or '-' is its own; in another
// (MCP allows spaces, parentheses, capitals, ...) each capital that
// starts a word is lowered with an '_' before it, any other capital is
// lowered, and each run of other characters becomes '_' (or the one '.',
// '-' or '_' it is), dropped at either end; a name left with no letter or
// digit is "tool-" and the first 8 hex digits of its SHA-256, one starting
// with a digit gets a "t" before it. "greet (with Icons)" is
// greet_with_icons, "getTinyImage" get_tiny_image. Two tools of a server
// with the same mapped name are both left out (see Gateway).
func MappedName(name string) string {
	if toolNameRE.MatchString(name) {
		return name
	}
	var b strings.Builder
	var sep []rune // the run of other characters since the last letter or digit
	prev := rune(0)
	flush := func() {
		if b.Len() > 0 && len(sep) > 0 {
			if len(sep) == 1 && strings.ContainsRune("._-", sep[0]) {
				b.WriteRune(sep[0])
			} else {
				b.WriteByte('_')
			}
		}
		sep = sep[:0]
	}
	for _, r := range name {
		switch {
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9':
			flush()
			b.WriteRune(r)
		case 'A' <= r && r <= 'Z':
			if ('a' <= prev && prev <= 'z' || '0' <= prev && prev <= '9') && len(sep) == 0 {
				sep = append(sep, 0, 0) // a new word: flush writes '_'
			}
			flush()
			b.WriteRune(r + 'a' - 'A')
		default:
			sep = append(sep, r)
		}
		prev = r
	}
	out := b.String()
	switch {
	case out == "":
		sum := sha256.Sum256([]byte(name))
		return "tool-" + hex.EncodeToString(sum[:4])
	case out[0] >= '0' && out[0] <= '9':
		return "t" + out
	}
	return out
}

// toolNameRE is a name that is its own mapped name: the TOOL of a valid id.
var toolNameRE = regexp.MustCompile(`^[a-z][a-z0-9]*([._-][a-z0-9]+)*$`)

// tool makes the toolgate tool of t. A problem refuses the whole file (a
// pin broken); a skip leaves the tool out with a warning.
func (u *upstream) tool(t *sdk.Tool, serverVersion string) (gt *gatewayTool, problem, skip string) {
	s := &u.decl
	o := s.Tools[t.Name]
	mapped := MappedName(t.Name)
	id := s.Name + "." + mapped
	switch {
	case id == ExecuteIntentTool:
		return nil, "", "its id is the name of toolgate's own tool " + ExecuteIntentTool
	case builtinIDs()[id]:
		// At a higher version it would be what a call of the built-in's
		// plain id runs.
		return nil, "", fmt.Sprintf("its id %s is a built-in tool's", id)
	}
	hash, err := SchemaSHA256(t.InputSchema, t.OutputSchema)
	if err != nil {
		return nil, "", fmt.Sprintf("its schemas are not JSON: %v", err)
	}
	defHash, err := DefinitionSHA256(t)
	if err != nil {
		return nil, "", fmt.Sprintf("its definition is not JSON: %v", err)
	}
	version, pinned := o.Version, true
	if version == "" {
		version = s.Version
	}
	if version == "" {
		version, pinned = serverVersion, false
	}
	// drift is what changed under a pin: the tool is then unavailable
	// until a person reviews it and updates the pin.
	drift := ""
	switch {
	case o.SchemaSHA256 != "" && o.SchemaSHA256 != hash:
		drift = fmt.Sprintf("its schemas changed (schema_sha256 %s in the file, %s now)", o.SchemaSHA256, hash)
	case o.DefinitionSHA256 != "" && o.DefinitionSHA256 != defHash && o.SchemaSHA256 != "":
		drift = fmt.Sprintf("its title, description or annotations changed, its schemas did not (definition_sha256 %s in the file, %s now)", o.DefinitionSHA256, defHash)
	case o.DefinitionSHA256 != "" && o.DefinitionSHA256 != defHash:
		drift = fmt.Sprintf("its definition (name, title, description, annotations or schemas) changed (definition_sha256 %s in the file, %s now)", o.DefinitionSHA256, defHash)
	}
	switch {
	case pinned && o.SchemaSHA256 == "" && o.DefinitionSHA256 == "" && !s.UnpinnedDefinitions:
		return nil, fmt.Sprintf("tool %s has version %s pinned but no definition_sha256 for it: the upstream's definition hashes to %s (toolgate pin %s prints every tool's, to paste once you have reviewed them; pin_definitions: false pins the version alone)", t.Name, version, defHash, s.Name), ""
	case !tools.IsSemver(version):
		// The same for every tool of the server: load says it once.
		return nil, fmt.Sprintf("the server reports version %q, which is not a semantic version: pin one with version:", serverVersion), ""
	}
	in, err := withDialect(t.InputSchema)
	if err != nil {
		return nil, "", "inputSchema: " + err.Error()
	}
	outSchema := json.RawMessage(`{"$schema":"` + tools.Draft202012 + `","type":"object"}`)
	hasOut := t.OutputSchema != nil
	if hasOut {
		if outSchema, err = withDialect(t.OutputSchema); err != nil {
			return nil, "", "outputSchema: " + err.Error()
		}
	}
	scope := s.Name + "/" + mapped
	c, err := capability.Parse("mcp.call:" + scope)
	if err != nil {
		return nil, "", fmt.Sprintf("its name cannot be a capability scope: %v", err)
	}
	desc := t.Description
	if strings.TrimSpace(desc) == "" {
		desc = fmt.Sprintf("%s of the MCP server %s", t.Name, s.Name)
	}
	title := t.Title
	if title == "" {
		title = id
	}
	d := tools.Declaration{
		ID: id, Version: version, Name: title, Description: desc,
		InputSchema: in, OutputSchema: outSchema,
		RequiredCapabilities: []capability.Capability{c},
		ResourceLimits:       s.Limits,
		Idempotent:           s.Idempotent,
		RequiresApproval:     s.RequiresApproval,
	}
	if o.Idempotent != nil {
		d.Idempotent = *o.Idempotent
	}
	if o.RequiresApproval != nil {
		d.RequiresApproval = *o.RequiresApproval
	}
	if l := o.Limits; l != nil {
		if l.MaxExecutionTime > 0 {
			d.ResourceLimits.MaxExecutionTime = l.MaxExecutionTime
		}
		if l.MaxOutputBytes > 0 {
			d.ResourceLimits.MaxOutputBytes = l.MaxOutputBytes
		}
		if l.MaxConcurrent > 0 {
			d.ResourceLimits.MaxConcurrent = l.MaxConcurrent
		}
	}
	gt = &gatewayTool{up: u, name: t.Name, decl: d, structured: hasOut, strict: s.StrictSchemas}
	if drift != "" {
		gt.drift = fmt.Sprintf("the upstream's definition of %s changed under pinned version %s: %s; review it (toolgate describe %s), then update the pin (toolgate pin %s)", t.Name, version, drift, id, s.Name)
		u.gw.warn("%s unavailable: %s", id, gt.drift)
	}
	// Register in a scratch registry: the same checks (id, RFC-0001 6.3
	// lint, compile) as the real one, so that a tool that fails them is
	// left out with the reason instead of refusing the whole file.
	if err := tools.NewRegistry().Register(gt); err != nil {
		return nil, "", strings.TrimPrefix(err.Error(), "tools: ")
	}
	u.hashes[t.Name] = defHash
	return gt, "", ""
}

// builtinIDs are the ids of toolgate's built-in tools, which no upstream
// tool may take.
var builtinIDs = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	for _, t := range tools.Builtins() {
		m[t.Declaration().ID] = true
	}
	return m
})

// withDialect returns schema as JSON with "$schema" set to draft 2020-12
// when it has none (MCP's default dialect).
func withDialect(schema any) (json.RawMessage, error) {
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, errors.New("not a JSON object")
	}
	if _, ok := m["$schema"]; ok {
		return b, nil
	}
	m["$schema"] = json.RawMessage(`"` + tools.Draft202012 + `"`)
	return json.Marshal(m)
}

// sessionFor returns the open session, or opens one again (checking that
// the schemas are still those loaded).
func (u *upstream) sessionFor(ctx context.Context) (*sdk.ClientSession, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, errUpstreamClosed
	}
	if u.session != nil {
		if u.stale {
			if err := u.recheck(ctx, u.session); err != nil {
				return nil, err
			}
			u.stale = false
		}
		return u.session, nil
	}
	cs, err := u.connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := u.recheck(ctx, cs); err != nil {
		cs.Close()
		return nil, err
	}
	u.session, u.stale = cs, false
	return cs, nil
}

// recheck reads the tools/list of cs again: a tool whose schemas are no
// longer those loaded is unavailable until toolgate starts again; a tool
// added since is not toolgate's. u.mu is held.
func (u *upstream) recheck(ctx context.Context, cs *sdk.ClientSession) error {
	list, err := listTools(ctx, cs, u.gw.opts.MaxTools)
	if err != nil {
		return fmt.Errorf("tools/list: %v", err)
	}
	for _, t := range list {
		if want, ok := u.hashes[t.Name]; ok {
			if got, err := DefinitionSHA256(t); err != nil || got != want {
				delete(u.hashes, t.Name)
			}
		}
	}
	return nil
}

// drop forgets cs (broken) so that the next call connects again.
func (u *upstream) drop(cs *sdk.ClientSession) {
	u.mu.Lock()
	if u.session == cs {
		u.session = nil
	}
	u.mu.Unlock()
	go cs.Close() // a dead process is reaped; a live one is told to stop (closing twice is harmless)
}

func (u *upstream) close() error {
	u.mu.Lock()
	cs := u.session
	u.session, u.closed = nil, true
	u.mu.Unlock()
	u.stderrOnce.Do(func() {}) // no writer made after this one
	if u.stderr != nil {
		defer u.stderr.flush() // after the process exited
	}
	if cs == nil {
		return nil
	}
	if err := cs.Close(); err != nil && !strings.Contains(err.Error(), "closed") {
		return fmt.Errorf("MCP server %s: %v", u.decl.Name, err)
	}
	return nil
}

func (u *upstream) current(name string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.hashes[name]
	return ok
}

// gatewayTool is one tool of an upstream server.
type gatewayTool struct {
	up         *upstream
	name       string // the upstream's name
	decl       tools.Declaration
	structured bool   // the upstream declares an outputSchema
	strict     bool   // the server's strict_schemas
	drift      string // why the tool is unavailable: its definition changed under a pin
}

var (
	_ tools.Tool            = (*gatewayTool)(nil)
	_ tools.UpstreamSchemas = (*gatewayTool)(nil)
)

// StrictSchemas is the server's strict_schemas: see tools.UpstreamSchemas.
func (t *gatewayTool) StrictSchemas() bool { return t.strict }

// Upstream names the MCP server and the upstream's own name of a tool the
// gateway made (ok false for another tool): its id is SERVER.MappedName(TOOL).
func Upstream(t tools.Tool) (server, tool string, ok bool) {
	gt, ok := t.(*gatewayTool)
	if !ok {
		return "", "", false
	}
	return gt.up.decl.Name, gt.name, true
}

func (t *gatewayTool) Declaration() tools.Declaration { return t.decl }

// Execute calls the upstream tool; see Gateway for the mapping.
func (t *gatewayTool) Execute(ctx context.Context, env *tools.Env, input json.RawMessage) (json.RawMessage, error) {
	unavailable := func(detail string, err error) error {
		return &tools.UnavailableError{Resource: "mcp_upstream", Detail: fmt.Sprintf("MCP server %s %s", t.up.decl.Name, detail), Err: err}
	}
	if t.drift != "" {
		return nil, unavailable("changed a pinned tool: "+t.drift, nil)
	}
	cs, err := t.up.sessionFor(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, unavailable("could not be reached", err)
	}
	if !t.up.current(t.name) {
		return nil, unavailable(fmt.Sprintf("changed the definition of %s since toolgate started; restart toolgate to load it", t.name), nil)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: t.name, Arguments: input})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err() // the runtime records the deadline or the cancel; the SDK told the upstream
		}
		var we *jsonrpc.Error
		if errors.As(err, &we) && !errors.Is(err, sdk.ErrConnectionClosed) && !slices.Contains(transportCodes, we.Code) {
			return nil, &UpstreamError{Server: t.up.decl.Name, Tool: t.name, Message: we.Message, Protocol: true}
		}
		t.up.drop(cs)
		return nil, unavailable("went away during the call", err)
	}
	if res.IsError {
		return nil, &UpstreamError{Server: t.up.decl.Name, Tool: t.name, Message: contentText(res.Content)}
	}
	if t.structured {
		return json.Marshal(res.StructuredContent)
	}
	out := struct {
		Content           []sdk.Content `json:"content"`
		StructuredContent any           `json:"structuredContent,omitempty"`
	}{res.Content, res.StructuredContent}
	if out.Content == nil {
		out.Content = []sdk.Content{}
	}
	return json.Marshal(out)
}

// transportCodes are the codes of the SDK's own errors for a connection
// that is closing or a request its transport could not deliver (an HTTP
// server gone): the upstream did not answer, so the call is unavailable,
// not refused.
var transportCodes = []int64{-32003, -32004, -32005}

// UpstreamError is the failure an upstream MCP server reported for a call:
// a result with isError (Protocol false), or a JSON-RPC error (Protocol
// true). The runtime records it as the tool's failure: ROLLED_BACK.
type UpstreamError struct {
	Server, Tool string
	Message      string
	Protocol     bool
}

func (e *UpstreamError) Error() string {
	if e.Protocol {
		return fmt.Sprintf("MCP server %s refused the call of %s: %s", e.Server, e.Tool, e.Message)
	}
	return fmt.Sprintf("the MCP server %s reported an error: %s", e.Server, e.Message)
}

// contentText joins the text blocks of a result.
func contentText(cs []sdk.Content) string {
	var parts []string
	for _, c := range cs {
		if tc, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	if len(parts) == 0 {
		return "(no text)"
	}
	return strings.Join(parts, "\n")
}

// headerTransport adds fixed headers to every request, and bounds a
// response that is not an event stream to max bytes: the SDK reads a JSON
// response whole, however large (an event stream's events are bounded by
// MaxEventSize).
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
	max     int64
}

func (h *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	resp, err := h.base.RoundTrip(r)
	if err == nil && h.max > 0 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body = &boundedBody{rc: resp.Body, max: h.max}
	}
	return resp, err
}

// boundedBody fails a read past its bound.
type boundedBody struct {
	rc        io.ReadCloser
	read, max int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if room := b.max + 1 - b.read; int64(len(p)) > room { // one byte more tells a body of exactly max from a longer one
		p = p[:room]
	}
	n, err := b.rc.Read(p)
	if b.read += int64(n); b.read > b.max {
		return 0, fmt.Errorf("the server's answer is longer than %d bytes", b.max)
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
