package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// The embedded database admits one writer, which holds its file lock for
// as long as it runs ('toolgate serve', 'toolgate mcp', a long 'toolgate
// run'); readers need a shared lock, which the writer's excludes. Another
// command then fails: this file says who holds the database (dbHolder,
// recorded by the holder next to the database), waits for it with --wait,
// and reads through a holding server's HTTP API where the API has the
// read. Postgres has no such lock.

// lockProbe is how long the first attempt of a command with --wait waits
// before it says that it is waiting, and for whom.
const lockProbe = 200 * time.Millisecond

// heldError: the database is locked by another process.
type heldError struct {
	path     string    // as shown
	holder   *dbHolder // nil: the holder did not record itself
	waited   time.Duration
	command  string // the refused command, "toolgate executions"
	readOnly bool   // an inspection command
	hint     string // overrides the default advice, when set
}

func (e *heldError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "database %s is locked by another process", e.path)
	if h := e.holder; h != nil {
		fmt.Fprintf(&b, ", `%s` (pid %d", commandLine(h.Command), h.PID)
		if h.Addr != "" {
			fmt.Fprintf(&b, ", listening on %s", clean(h.Addr))
			if h.API == "mcp" {
				b.WriteString(" for MCP")
			}
		}
		fmt.Fprintf(&b, ") since %s", h.Since.Local().Format("2006-01-02 15:04:05 MST"))
	} else {
		b.WriteString(" (one that did not record itself: a 'toolgate serve' or 'toolgate run' older than this one, or another program)")
	}
	if e.waited > 0 {
		fmt.Fprintf(&b, ", and was not released within --wait %v", e.waited)
	}
	b.WriteString("; ")
	if e.hint != "" {
		b.WriteString(e.hint)
		return b.String()
	}
	b.WriteString(e.advice())
	return b.String()
}

// advice says what to do instead.
func (e *heldError) advice() string {
	h := e.holder
	server := h != nil && h.Addr != ""
	stop := "run it again when that command has finished"
	if h != nil {
		stop = fmt.Sprintf("run it again when that command has finished (or stop it: kill -INT %d)", h.PID)
		if server {
			stop = fmt.Sprintf("stop the server (kill -INT %d, or Ctrl-C where it runs) and run it again", h.PID)
		}
	}
	wait := "add --wait D to wait up to D for the database (e.g. --wait 5m)"
	if e.waited > 0 {
		wait = "a longer --wait waits longer"
	}
	if e.readOnly {
		s := fmt.Sprintf("'%s' reads the database file, which a writer's lock keeps it from", e.command)
		if server && h.API == "http" {
			s += ", and the server's HTTP API has no such read"
		}
		s += "; " + stop + ", or " + wait
		if server && h.API == "http" && e.command != "toolgate show" {
			s += "; one execution can be read through the server: toolgate show ID --token TOKEN (or $TOOLGATE_TOKEN)"
		}
		return s
	}
	s := wait + "; or " + stop
	if server && h.API == "http" {
		s += "; or make the request through the server's HTTP API (see 'toolgate serve --help')"
	}
	return s
}

// commandLine is argv as one line for a message: the program's base name,
// the arguments quoted where they need it, cut short when long.
func commandLine(argv []string) string {
	if len(argv) == 0 {
		return "?"
	}
	parts := []string{filepath.Base(argv[0])}
	for _, a := range argv[1:] {
		if a == "" || strings.ContainsAny(a, " \t'\"`\\$") {
			a = fmt.Sprintf("%q", a)
		}
		parts = append(parts, a)
	}
	s := clean(strings.Join(parts, " "))
	if r := []rune(s); len(r) > 120 {
		s = string(r[:117]) + "..."
	}
	return s
}

// heldBy returns the heldError err carries, if any.
func heldBy(err error) *heldError {
	var ee *exitError
	if errors.As(err, &ee) {
		err = ee.err
	}
	var he *heldError
	if errors.As(err, &he) {
		return he
	}
	return nil
}

// lockedErr is the error of a command that found the database at path
// locked by another process (err wraps txn.ErrLocked). On Postgres the
// lock is a node's lease, and err says whose: it is the message.
func (g *globals) lockedErr(path string, readOnly bool, err error) error {
	if txn.IsPostgresURL(path) {
		return &exitError{code: ExitInternal, err: err}
	}
	e := &heldError{path: txn.ShownPath(path), holder: readHolder(path), waited: g.wait, command: g.commandPath(), readOnly: readOnly}
	return &exitError{code: ExitInternal, err: e}
}

// commandPath is the running command, "toolgate executions".
func (g *globals) commandPath() string {
	if g.cmd == nil {
		return "toolgate"
	}
	return g.cmd.CommandPath()
}

// lockTimeout is how long an open waits for the lock: --wait, else the
// default second.
func (g *globals) lockTimeout() time.Duration {
	if g.wait > 0 {
		return g.wait
	}
	return txn.DefaultTimeout
}

// waitFor runs open with the lock timeout; with --wait, it first tries
// briefly and, when the database is held, says for whom it waits.
func (g *globals) waitFor(path string, open func(timeout time.Duration) error) error {
	if g.wait <= lockProbe || txn.IsPostgresURL(path) {
		return open(g.lockTimeout())
	}
	start := time.Now()
	err := open(lockProbe)
	if !errors.Is(err, txn.ErrLocked) {
		return err
	}
	who := "another process"
	if h := readHolder(path); h != nil {
		who = fmt.Sprintf("`%s` (pid %d)", commandLine(h.Command), h.PID)
	}
	if g.stderr != nil {
		fmt.Fprintf(g.stderr, "toolgate: database %s is held by %s; waiting up to %v for it\n", txn.ShownPath(path), who, g.wait)
	}
	return open(max(g.wait-time.Since(start), time.Millisecond))
}

// openRuntime opens the runtime for a command that writes, waiting
// --wait for the lock, and records the address a server listens on.
func (g *globals) openRuntime(path string, opts *tgruntime.Options) (*heldRuntime, error) {
	var rt *heldRuntime
	err := g.waitFor(path, func(timeout time.Duration) error {
		o := *opts
		o.OpenTimeout = timeout
		var err error
		rt, err = openHeld(path, &o)
		return err
	})
	switch {
	case errors.Is(err, txn.ErrLocked):
		return nil, g.lockedErr(path, false, err)
	case err != nil:
		// On Postgres no process holds a lock on the database: the
		// store's message says what holds the open back (this node's
		// name in use by a running node, an older toolgate writing).
		return nil, internalErr(err)
	}
	if (g.addr != "" || g.api != "") && !txn.IsPostgresURL(path) {
		_ = setHolderAddr(path, g.addr, g.api) // only the message of others depends on it
	}
	return rt, nil
}

// openShared opens the database read-only for an inspection command,
// waiting --wait for a writer's lock. A held database is a *heldError.
func (g *globals) openShared(path string) (*txn.Store, error) {
	var store *txn.Store
	err := g.waitFor(path, func(timeout time.Duration) error {
		var err error
		store, err = txn.Open(path, &txn.Options{ReadOnly: true, Timeout: timeout})
		return err
	})
	if errors.Is(err, txn.ErrLocked) {
		return nil, g.lockedErr(path, true, err)
	}
	return store, err
}

// followHeld tells 'audit tail --follow' why it prints nothing while a
// writer holds the database: once per holder.
func (g *globals) followHeld(path string, said *int) {
	h := readHolder(path)
	pid := -1
	if h != nil {
		pid = h.PID
	}
	if *said == pid || g.stderr == nil {
		return
	}
	*said = pid
	who := "another process"
	if h != nil {
		who = fmt.Sprintf("`%s` (pid %d", commandLine(h.Command), h.PID)
		if h.Addr != "" {
			who += ", listening on " + clean(h.Addr)
		}
		who += ")"
	}
	fmt.Fprintf(g.stderr, "toolgate: database %s is held by %s, whose lock keeps readers out: no events can be read until it exits; still following (its events will appear then)\n", txn.ShownPath(path), who)
}

// bearer is the token for a holding server: --token, else
// $TOOLGATE_TOKEN.
func (g *globals) bearer() string {
	if g.token != "" {
		return g.token
	}
	return os.Getenv("TOOLGATE_TOKEN")
}

// serverURL is the base URL of a holding server's HTTP API, on loopback
// only: the token is never sent beyond this machine on the word of a file.
func serverURL(h *dbHolder) (string, bool) {
	if h == nil || h.API != "http" {
		return "", false
	}
	host, port, err := net.SplitHostPort(h.Addr)
	if err != nil {
		return "", false
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return "", false
	case ip.IsUnspecified() && ip.To4() != nil:
		ip = net.IPv4(127, 0, 0, 1)
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	case !ip.IsLoopback():
		return "", false
	}
	return "http://" + net.JoinHostPort(ip.String(), port), true
}

// showThroughServer is 'toolgate show ID' against a database a local
// server holds: GET /v1/executions/{id} with the user's token, the record
// handed to show. When it cannot ask (no token, a holder that serves no
// HTTP API on loopback) it returns the held error, saying how to.
func (g *globals) showThroughServer(ctx context.Context, held *heldError, stdio Stdio, id string, show func(*txn.Record) error) error {
	base, ok := serverURL(held.holder)
	if !ok {
		return &exitError{code: ExitInternal, err: held}
	}
	tok := g.bearer()
	if tok == "" {
		held.hint = fmt.Sprintf("the server there can show it: run 'toolgate show %s --token TOKEN' (or set $TOOLGATE_TOKEN) with a token of its config file", clean(id))
		return &exitError{code: ExitInternal, err: held}
	}
	note := fmt.Sprintf("toolgate: the database is held by the server at %s (pid %d): read through its HTTP API\n", base, held.holder.PID)
	return fetchExecution(ctx, http.DefaultClient, base, func(req *http.Request) { req.Header.Set("Authorization", "Bearer "+tok) }, note, stdio, id, show)
}

// showThroughSocket is 'toolgate show ID' through the local socket of the
// database's holder (localsock.go), as showThroughServer.
func (g *globals) showThroughSocket(ctx context.Context, lc *localClient, stdio Stdio, id string, show func(*txn.Record) error) error {
	note := fmt.Sprintf("toolgate: the database is held by pid %d: asked through its socket %s\n", lc.pid, lc.sock)
	return fetchExecution(ctx, lc.hc, "http://toolgate", func(req *http.Request) { req.Header.Set(principalHeader, principal()) }, note, stdio, id, show)
}

// fetchExecution is GET /v1/executions/{id} of toolgate's HTTP API at base
// with hc, auth setting the request's credentials; note is said on stderr
// once the server answered, and the record is handed to show.
func fetchExecution(ctx context.Context, hc *http.Client, base string, auth func(*http.Request), note string, stdio Stdio, id string, show func(*txn.Record) error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/executions/"+url.PathEscape(id), nil)
	if err != nil {
		return usageErr("no execution %s", clean(id))
	}
	auth(req)
	resp, err := hc.Do(req)
	if err != nil {
		return internalErr(fmt.Errorf("the database is held by the server at %s, which did not answer: %v", base, err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return internalErr(fmt.Errorf("reading the server's answer: %v", err))
	}
	fmt.Fprint(stdio.Err, note)
	var problem struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	_ = json.Unmarshal(body, &problem)
	why := strings.TrimSpace(clean(problem.Title + ": " + problem.Detail))
	switch resp.StatusCode {
	case http.StatusOK:
		var rec txn.Record
		if err := json.Unmarshal(body, &rec); err != nil {
			return internalErr(fmt.Errorf("the server's answer is not a record: %v", err))
		}
		return show(&rec)
	case http.StatusNotFound:
		return usageErr("no execution %s (the server shows a token only its own principal's executions, unless an approver's)", clean(id))
	case http.StatusUnauthorized:
		return usageErr("the server at %s refused the token (--token or $TOOLGATE_TOKEN): %s", base, why)
	case http.StatusConflict:
		return &exitError{code: ExitVerify, err: fmt.Errorf("execution %s cannot be shown: %s", clean(id), why)}
	}
	return internalErr(fmt.Errorf("the server at %s answered %s: %s", base, resp.Status, why))
}
