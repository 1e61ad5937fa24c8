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
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/audit"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/webui"
)

func newServeCmd(g *globals, stdio Stdio) *cobra.Command {
	var (
		addr, config string
		remote       bool
		hashToken    bool
		noRequestLog bool
		noUI         bool
		noSocket     bool
		jaegerURL    string
		cpFile       string
		cpKey        string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve tools over HTTP: the one execution boundary for remote callers",
		Example: `  # a token for each caller; the config file keeps only its SHA-256
  head -c 32 /dev/urandom | base64 > agent.token
  toolgate serve --hash-token < agent.token      # prints the hex SHA-256
  cat > server.json <<'EOF'
  {"tokens": [{"principal": "agent-1", "sha256": "<the hex SHA-256>"},
              {"principal": "alice",   "sha256": "<...>", "approver": true}],
   "gracePeriod": "10s", "idempotencyTTL": "24h"}
  EOF
  toolgate serve --config server.json --policy policy.json
  curl -H "Authorization: Bearer $(cat agent.token)" -H 'Content-Type: application/json' \
       -d '{"input": {"path": "README.md"}}' http://127.0.0.1:7070/v1/tools/file.read/execute`,
		Long: `Serve the runtime over HTTP on --addr (loopback by default; another address
needs --allow-remote). Callers authenticate with bearer tokens that the
config file (--config) maps to principals; a principal's capabilities come
from the policy (--policy), never from the caller.

  POST /v1/tools/{name}/execute   {"input": ..., "version": "...", "callId": "...",
                                   "bypassIdempotency": true (needs idempotency.bypass)}
                                  headers: Authorization, Idempotency-Key, traceparent
  GET  /v1/tools, /v1/tools/{name}, /v1/executions/{id}
  POST /v1/intents, /v1/intents/{id}/approve (approver tokens only),
       /v1/intents/{id}/execute {"hash": "..."}
  GET  /healthz, /readyz

Statuses: 200 COMPLETED or a tool-level failure in the result; 400 malformed;
401 no or bad token; 403 DENIED, or a bypass the policy does not grant; 404
unknown tool or version; 409 idempotency key in flight; 413 body too large;
415 not JSON; 422 idempotency key reused with another request, or input
failing the schema; 429 rate limited (Retry-After); 500 committed but a file
write parked, not visible; 503 busy, shutting down (a call stopped before its
tool ran: retry it) or store unavailable (Retry-After). Errors are RFC 9457
problem documents, the requests net/http refuses itself included.

The config file also sets "idempotencyTTL" (default "24h"): how long an
Idempotency-Key holds its call's result.

The web UI is served under /ui/ (--no-ui turns it off): log in with a token
of the config file; approvers see the pending intents as they arrive and
approve or reject them, and everyone their executions; approvers see the
audit log's verification (against --audit-checkpoint, if given). Trace ids
link to Jaeger with --jaeger-url. The session cookie is Secure when the
request came over TLS (X-Forwarded-Proto: https from a reverse proxy): put
a TLS-terminating proxy in front to reach it beyond this machine.

With "notify": {"webhook": {"url": ..., "headers": {"Name": "ENV_VAR"}}} in
the config file, each new pending intent is POSTed as JSON (id, tool,
version, proposer, preview, link, text) in the background, retried with
backoff; "notify.baseURL" is the address the links use (default the
listener's).

SIGINT or SIGTERM: stop accepting, let running invocations finish within the
grace period, abort the rest (recorded ABORTED, ROLLED_BACK), close the store.
A store that fails (a full disk, a read-only file system) is logged once on
stderr with what to fix; /readyz answers 503 until the server is restarted.

Each request (the web UI's too) is logged on stderr once answered, one structured line
(msg=request method path principal status executionId duration);
--no-request-log turns that off.

While it holds a database file, the server also serves its own OS user's CLI
on a Unix socket next to it ('toolgate intent approve --help' says more;
--no-local-socket turns it off).

'toolgate serve --hash-token' reads a token on stdin and prints the SHA-256
the config file stores for it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if hashToken {
				tok, err := readLine(stdio.In, maxToken)
				switch {
				case errors.Is(err, errLineTooLong):
					return usageErr("--hash-token: the token on stdin is longer than %d bytes", maxToken)
				case err != nil && !errors.Is(err, io.EOF):
					return usageErr("--hash-token: reading the token on stdin: %v", err)
				case tok == "":
					return usageErr("--hash-token: no token on stdin")
				}
				fmt.Fprintln(stdio.Out, server.HashToken(tok))
				return nil
			}
			if config == "" {
				return usageErr("--config FILE is required: it maps tokens to principals (see the example in 'toolgate serve --help')")
			}
			cfg, err := server.LoadConfig(config)
			if err != nil {
				return usageErr("%v", err)
			}
			if !server.IsLoopback(addr) && !remote {
				return usageErr("--addr %s is not a loopback address: pass --allow-remote to serve beyond this machine", addr)
			}
			policy, err := g.policy() // a broken policy file: the server does not start
			if err != nil {
				return err
			}
			// Take the address first: a server that cannot listen must not
			// create (or lock) the database.
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return internalErr(err)
			}
			defer l.Close() // Serve closes it; this covers the failures before
			tel := startTelemetry(cmd.Context(), stdio.Err)
			defer tel.shutdown()
			opts := &tgruntime.Options{Policy: policy}
			cfg.ApplyTo(opts) // the idempotency TTL
			tel.configure(opts)
			logger := slog.New(slog.NewTextHandler(stdio.Err, nil))
			opts.Logger = logger
			if cpFile != "" { // a checkpoint that cannot be read: the server does not start
				if _, err := openCheckpoint(cpFile, cpKey); err != nil {
					return err
				}
			}
			// The webhook's notifier exists once the runtime does (it words
			// previews with its registry); nothing is proposed before.
			var notifier atomic.Pointer[webui.Notifier]
			opts.OnPropose = func(in *tgruntime.Intent) {
				if n := notifier.Load(); n != nil {
					n.Notify(in)
				}
			}
			g.addr, g.api = l.Addr().String(), "http" // for the holder file
			g.decides = true                          // its approvers' decisions are signed with the approval key, if any
			rt, err := g.open(opts)
			if err != nil {
				return err
			}
			// This command owns the runtime: the server leaves it open. The
			// clean path closes it below and checks the error; this covers
			// the others.
			defer rt.Close(context.Background())
			base := cfg.Notify.BaseURL
			if base == "" {
				base = "http://" + l.Addr().String()
			}
			if wh := cfg.Notify.Webhook; wh != nil {
				h, err := wh.ResolveHeaders(os.LookupEnv) // the file names variables, never the secrets
				if err != nil {
					return usageErr("%v", err)
				}
				n, err := webui.NewNotifier(&webui.Webhook{URL: wh.URL, Header: h}, base, rt.Registry(), &webui.NotifierOptions{Logger: logger})
				if err != nil {
					return usageErr("%v", err)
				}
				defer n.Close(context.Background())
				notifier.Store(n)
			}
			sopts := &server.Options{TracerProvider: opts.TracerProvider, MeterProvider: opts.MeterProvider, Logger: logger}
			if !noRequestLog {
				sopts.RequestLog = logger
			}
			if !noUI {
				uopts := &webui.Options{JaegerURL: jaegerURL, Logger: logger}
				if cpFile != "" {
					uopts.Checkpoint = func() (*audit.Checkpoint, error) {
						cp, err := openCheckpoint(cpFile, cpKey) // read again: a newer checkpoint may have replaced it
						var ee *exitError
						if errors.As(err, &ee) && ee.err != nil {
							err = ee.err
						}
						return &cp, err
					}
				}
				ui, err := webui.New(rt.Runtime, uiConfig(cfg), uopts)
				if err != nil {
					return usageErr("%v", err)
				}
				// Its requests are logged and traced as the API's are.
				sopts.Handlers = map[string]http.Handler{"/ui/": ui} // with spans and the request log, as the API
			}
			srv, err := server.New(rt.Runtime, cfg, sopts)
			if err != nil {
				return usageErr("%v", err)
			}
			stopSocket := g.startLocalSocket(cmd.Context(), rt.Runtime, cfg, noSocket, stdio.Err) // localsock.go
			defer stopSocket()
			fmt.Fprintf(stdio.Err, "toolgate: serving on http://%s (%d tokens)\n", l.Addr(), len(cfg.Tokens))
			if !noUI {
				fmt.Fprintf(stdio.Err, "toolgate: web UI on http://%s/ui/\n", l.Addr())
			}
			if err := srv.Serve(cmd.Context(), l); err != nil && !errors.Is(err, net.ErrClosed) {
				return internalErr(err)
			}
			// Serve returned once every call it started had ended (stopped
			// at the end of the grace period, at the latest). What still
			// runs on the runtime came through the local socket: it gets
			// the grace period too, then Close stops it, recorded ABORTED,
			// ROLLED_BACK. Close then closes the store.
			stopSocket()
			cctx, cancel := context.WithTimeout(context.Background(), gracePeriod(cfg))
			defer cancel()
			if err := rt.Close(cctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return internalErr(err)
			}
			fmt.Fprintln(stdio.Err, "toolgate: stopped")
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:7070", "listen address (loopback unless --allow-remote)")
	cmd.Flags().StringVar(&config, "config", "", "server config file: tokens, rate limits, limits")
	cmd.Flags().BoolVar(&remote, "allow-remote", false, "allow a listen address beyond loopback")
	cmd.Flags().BoolVar(&noRequestLog, "no-request-log", false, "write no request log (one line per request on stderr: method, path, principal, status, executionId, duration)")
	cmd.Flags().BoolVar(&noUI, "no-ui", false, "serve no web UI under /ui/")
	cmd.Flags().BoolVar(&noSocket, "no-local-socket", false, "serve the CLI of this OS user no Unix socket next to the database (see 'toolgate intent approve --help')")
	cmd.Flags().StringVar(&jaegerURL, "jaeger-url", "", "a Jaeger UI's address (http://localhost:16686): the web UI links trace ids to it")
	cmd.Flags().StringVar(&cpFile, "audit-checkpoint", "", "a checkpoint file (from 'toolgate audit checkpoint') the web UI's audit page checks the log against; read on each view")
	cmd.Flags().StringVar(&cpKey, "audit-key", "", "the key that signed --audit-checkpoint (as 'toolgate audit verify --key')")
	cmd.Flags().BoolVar(&hashToken, "hash-token", false, "print the SHA-256 of a token read from stdin, for the config file")
	return cmd
}

// gracePeriod is how long a stopped server lets running calls finish:
// the config's gracePeriod, 10 s by default (as the server's own).
func gracePeriod(cfg *server.Config) time.Duration {
	if cfg.GracePeriod > 0 {
		return time.Duration(cfg.GracePeriod)
	}
	return 10 * time.Second
}

// uiConfig is the web UI's config from serve's config file: its tokens, the
// HTTP API's, so that a token logs in to the UI as the principal it calls
// the API as.
func uiConfig(cfg *server.Config) *webui.Config {
	c := &webui.Config{Tokens: make([]webui.Token, 0, len(cfg.Tokens))}
	for _, t := range cfg.Tokens {
		c.Tokens = append(c.Tokens, webui.Token{Principal: t.Principal, SHA256: t.SHA256, Approver: t.Approver})
	}
	return c
}
