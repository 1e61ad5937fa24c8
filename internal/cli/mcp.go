package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/internal/gctune"
	"github.com/toolgate/toolgate/mcp"
	"github.com/toolgate/toolgate/oauth"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/txn"
)

func newMCPCmd(g *globals, stdio Stdio) *cobra.Command {
	var (
		who, addr, config string
		allow             []string
		remote, elicit    bool
		noSocket          bool
		progressEvery     time.Duration
		cpuProfile        string
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the tools to agents over the Model Context Protocol (stdio or streamable HTTP)",
		Long: `Serve the registered tools (built-ins and --registry tools) to an MCP client.
Every tools/call runs through the RFC-0001 lifecycle and is recorded, as with
'toolgate run'.

By default the server speaks MCP on stdin and stdout, for an agent that starts
it as a child process; every call runs as --principal (default mcp:$USER),
with the capabilities the policy (--policy) grants it plus --allow.

--http ADDR serves streamable HTTP instead (loopback unless --allow-remote),
for clients of protocol 2025-11-25 (sessions) and 2026-07-28 (stateless)
alike. Callers authenticate with bearer tokens that the config file of
'toolgate serve' (--config) maps to principals.

The config file's "rateLimits" limit tools/calls as they limit toolgate
serve's executions, per principal and per tool, over stdio too (--config
without --http: its tokens are then unused). A call past a limit runs
nothing: it is answered with an error result (ResourceError rate_limited)
whose retryAfter says how many seconds to wait, and logged on stderr. The
buckets are this process's own, also when several share one Postgres.

A registry file's mcp_servers put other MCP servers behind toolgate: each of
their tools is served as NAME.TOOL, governed like any other tool (it requires
mcp.call:NAME/TOOL; a grant of mcp.call:NAME covers the server).

Tools appear under their id (the highest version) and as ID--VERSION for each
version. A tool that requires approval answers a call with an intent to
approve ('toolgate intent approve ID'); toolgate.execute_intent then runs it.
While the session lasts, that command (run by the same OS user) reaches this
process through a Unix socket next to the database, and the approval is
recorded and signed (with this process's approval key, if any) here; see
'toolgate intent approve --help'. --no-local-socket turns it off.

--approve-via-elicitation lets the agent's own MCP client approve instead:
it shows its user the exact call and its hash (elicitation), and an accept
approves it as the session's principal, recorded "via elicitation", and runs
it once. That approval passes through the agent's client, so it is weaker
than one made out of band; it is off unless you turn it on.`,
		Example: `  toolgate mcp --allow filesystem.read:.
  toolgate mcp --http 127.0.0.1:7071 --config server.json --policy policy.json
  toolgate mcp --registry gateway.yaml --allow mcp.call:files`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			gctune.ForServer() // see internal/gctune: the SDK's garbage
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return usageErr("--cpuprofile: %v", err)
				}
				defer stop()
			}
			if who == "" {
				who = mcpPrincipal()
			}
			if err := tgruntime.CheckIdentity(who, ""); err != nil {
				return usageErr("--principal: %v", strings.TrimPrefix(err.Error(), "runtime: "))
			}
			reg, err := g.registry()
			if err != nil {
				return err
			}
			grants, err := parseAllow(allow, reg)
			if err != nil {
				return usageErr("--allow: %v", err)
			}
			warnBroadGrants(stdio.Err, grants)
			var cfg *server.Config
			if addr == "" && remote {
				return usageErr("--allow-remote goes with --http")
			}
			if addr != "" && config == "" {
				return usageErr("--http needs --config FILE: it maps bearer tokens to principals (see 'toolgate serve --help')")
			}
			if config != "" {
				if cfg, err = server.LoadConfig(config); err != nil {
					return usageErr("%v", err)
				}
			}
			if addr != "" && !server.IsLoopback(addr) && !remote {
				return usageErr("--http %s is not a loopback address: pass --allow-remote to serve beyond this machine", addr)
			}
			policy, perr := g.policy()
			if perr != nil {
				return perr // a usage error: nothing is opened or served
			}
			var l net.Listener
			g.api = "mcp" // for the holder file: what a command refused the database tells its user
			if addr != "" {
				// Take the address first: a server that cannot listen must
				// not create (or lock) the database.
				if l, err = net.Listen("tcp", addr); err != nil {
					return internalErr(err)
				}
				defer l.Close()
				g.addr, g.api = l.Addr().String(), "mcp" // for the holder file
			}
			tel := startTelemetry(cmd.Context(), stdio.Err)
			defer tel.shutdown()
			opts := &tgruntime.Options{Policy: policy, Registry: reg}
			if cfg != nil {
				cfg.ApplyTo(opts) // the idempotency TTL, as for toolgate serve
			}
			tel.configure(opts)
			g.decides = true // its approvers' decisions are signed with the approval key, if any
			rt, err := g.open(opts)
			if err != nil {
				return err
			}
			defer rt.Close(context.Background())
			mopts := &mcp.Options{
				Principal: who, Grants: grants, Version: "dev", TracerProvider: opts.TracerProvider,
				ApproveHint: approveHint(g), ProgressInterval: progressEvery,
				ApproveViaElicitation: elicit,
				// A rate-limited call is answered, and logged on stderr as
				// toolgate serve's request log logs a 429.
				RefusalLog: slog.New(slog.NewTextHandler(stdio.Err, nil)),
			}
			if cfg != nil {
				mopts.RateLimits = cfg.RateLimits // as toolgate serve's
			}
			srv, err := mcp.New(rt.Runtime, mopts)
			if err != nil {
				return usageErr("%v", err)
			}
			stopSocket := g.startLocalSocket(cmd.Context(), rt.Runtime, cfg, noSocket, stdio.Err) // localsock.go
			defer stopSocket()
			for _, s := range srv.Skipped() {
				fmt.Fprintf(stdio.Err, "toolgate: left out of tools/list: %s\n", s)
			}
			ctx := cmd.Context()
			// On SIGINT or SIGTERM, running invocations get a grace period,
			// then are aborted (ABORTED, ROLLED_BACK, recorded): the server
			// waits for its handlers before it returns.
			closed := make(chan error, 1)
			stopClose := context.AfterFunc(ctx, func() {
				gctx, cancel := context.WithTimeout(context.Background(), mcpGrace)
				defer cancel()
				closed <- rt.Close(gctx)
			})
			defer stopClose()
			if l == nil {
				err = srv.Run(ctx, &sdk.IOTransport{Reader: readCloser(stdio.In), Writer: nopWriteCloser{stdio.Out}})
				if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "closed") {
					fmt.Fprintf(stdio.Err, "toolgate: mcp: %v\n", err)
				}
			} else if err := serveMCPHTTP(ctx, stdio, srv, cfg, l); err != nil {
				return err
			}
			if !stopClose() { // stopped by a signal: the close above
				if err := <-closed; err != nil && !errors.Is(err, context.DeadlineExceeded) {
					return internalErr(err)
				}
				return nil
			}
			// The client left: the SDK canceled the calls still running
			// (ABORTED, then ROLLED_BACK, as for notifications/cancelled);
			// Close waits until each is recorded before the store closes.
			stopSocket()
			if err := rt.Close(context.Background()); err != nil {
				return internalErr(err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&who, "principal", "", "run every stdio call as this principal of the policy (default: mcp:$USER)")
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "grant a capability to every call, e.g. filesystem.read:. (repeatable)")
	cmd.Flags().StringVar(&addr, "http", "", "serve streamable HTTP on this address instead of stdio")
	cmd.Flags().StringVar(&config, "config", "", "toolgate serve's config file: bearer tokens (with --http), rate limits, idempotency TTL")
	cmd.Flags().BoolVar(&remote, "allow-remote", false, "with --http: allow an address beyond loopback")
	cmd.Flags().BoolVar(&elicit, "approve-via-elicitation", false, "let the client ask its user to approve a call that requires approval (recorded via elicitation)")
	cmd.Flags().BoolVar(&noSocket, "no-local-socket", false, "serve the CLI of this OS user no Unix socket next to the database (see 'toolgate intent approve --help')")
	cmd.Flags().DurationVar(&progressEvery, "progress-interval", time.Second, "how often a call that asked for progress reports it")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process to this `file`, until it exits (for go tool pprof)")
	return cmd
}

// startCPUProfile starts the CPU profiler, writing to path, and returns
// what stops it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// mcpGrace is how long a stopped server lets running invocations finish.
var mcpGrace = 10 * time.Second

func serveMCPHTTP(ctx context.Context, stdio Stdio, srv *mcp.Server, cfg *server.Config, l net.Listener) error {
	maxBody := cfg.MaxBodyBytes
	if maxBody == 0 {
		maxBody = 5 << 20 // as for toolgate serve
	}
	hopts := &mcp.HTTPOptions{Authenticate: tokenPrincipals(cfg), MaxBodyBytes: maxBody}
	handler := http.Handler(nil)
	if cfg.OAuth != nil {
		vctx, stop := context.WithCancel(ctx)
		defer stop()
		v, err := oauth.NewVerifier(vctx, *cfg.OAuth, nil)
		if err != nil {
			return usageErr("--config: oauth.%v", err)
		}
		hopts.OAuth = v
		mux := http.NewServeMux()
		mux.Handle(oauth.MetadataPath(cfg.OAuth.Resource), v.MetadataHandler())
		mux.Handle("/", srv.Handler(hopts))
		handler = mux
	} else {
		handler = srv.Handler(hopts)
	}
	hs := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Duration(cfg.IdleTimeout),
	}
	if cfg.OAuth != nil {
		fmt.Fprintf(stdio.Err, "toolgate: serving MCP on http://%s (%d tokens, and OAuth access tokens for %s)\n", l.Addr(), len(cfg.Tokens), cfg.OAuth.Resource)
	} else {
		fmt.Fprintf(stdio.Err, "toolgate: serving MCP on http://%s (%d tokens)\n", l.Addr(), len(cfg.Tokens))
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return internalErr(err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), gracePeriod(cfg))
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	fmt.Fprintln(stdio.Err, "toolgate: stopped")
	return nil
}

// tokenPrincipals finds the principal of a bearer token in the config
// (server.Config.Authenticate: constant time).
func tokenPrincipals(cfg *server.Config) func(string) (string, bool) {
	return func(token string) (string, bool) {
		t, ok := cfg.Authenticate(token)
		return t.Principal, ok
	}
}

// approveHint is the command a person runs to approve an intent, naming
// the database: a file by its absolute path, a Postgres URL without its
// password (the hint goes to the client).
func approveHint(g *globals) string {
	path, err := g.dbPath()
	if err != nil {
		return "toolgate intent approve %s"
	}
	if txn.IsPostgresURL(path) {
		path = txn.ShownPath(path)
	} else if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return "toolgate --db " + strings.ReplaceAll(shellQuote(path), "%", "%%") + " intent approve %s"
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:,=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// mcpPrincipal names the caller of stdio calls: "mcp:" and the OS user.
func mcpPrincipal() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "mcp:" + u.Username
	}
	return fmt.Sprintf("mcp:uid-%d", os.Getuid())
}

func readCloser(r io.Reader) io.ReadCloser {
	if rc, ok := r.(io.ReadCloser); ok {
		return rc
	}
	return io.NopCloser(r)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
