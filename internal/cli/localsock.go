package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/txn"
)

// The local socket. A process that holds a bbolt database for long
// ('toolgate serve', 'toolgate mcp') also listens on a Unix socket next to
// it (socketPath: toolgate.db.sock, mode 0600) and records it in the
// holder file. There it serves toolgate's HTTP API to processes of its
// own OS user (or root) only, as the kernel reports the peer
// (SO_PEERCRED): whoever runs as that user could open the database file
// itself, so a request acts as the principal it names in the
// Toolgate-Principal header, as an approver, as the CLI does. The CLI's
// commands on intents, 'show' and 'executions' use it when they find the
// database held: an approval made there is recorded by the holder's
// runtime, and signed with the holder's approval key, if it has one.
//
// Against other local users, each of these holds on its own: the socket's
// mode (0600, set before the socket has its name), the peer's uid checked
// on every connection, and the CLI's check that the socket is served by
// its own user and by the pid the holder file names. The socket is bound
// under a fresh private directory and then linked to its name, which never
// replaces or follows anything there: a symlink, a file or a live socket
// at the name is left alone (and no socket is served); a socket left by a
// holder that died, which nothing answers any more, is replaced.

// principalHeader names the principal a request on the local socket acts
// as.
const principalHeader = "Toolgate-Principal"

// maxSocketPath is the longest path a Unix socket address holds (108
// bytes with the terminating NUL on Linux).
const maxSocketPath = 107

// localSocketHelp is the help text's word on the local socket.
const localSocketHelp = `While a 'toolgate serve' or 'toolgate mcp' holds the database file, it also
serves the CLI of its own OS user on a Unix socket next to the database
(toolgate.db.sock, mode 0600, named in toolgate.db.holder): 'intent approve',
'intent reject', 'intent show', 'intent list', 'show' and 'executions' then
go through it instead of failing on the lock. Only processes of the holder's
own user (or root) are served, as the kernel reports them. A decision made
there is recorded by the holder and signed with the holder's approval key
(its --approval-key, $TOOLGATE_APPROVAL_KEY or default file), not this
command's: under a policy with approval keys, that key must be listed for
the approver ("*" for any). --no-local-socket on the holder turns it off.`

// localSocket is the listener of a holder's local socket.
type localSocket struct {
	path string // the socket
	fi   os.FileInfo
	hs   *http.Server
	done chan struct{}
	once sync.Once
}

// startLocalSocket serves rt's HTTP API on the local socket of the
// database this process holds, until ctx ends or stop is called; cfg
// (nil: none) sets the limits. A socket that cannot be served is said on
// stderr and is not an error: the holder runs without it.
func (g *globals) startLocalSocket(ctx context.Context, rt *tgruntime.Runtime, cfg *server.Config, off bool, stderr io.Writer) (stop func()) {
	path, err := g.dbPath()
	if off || err != nil || txn.IsPostgresURL(path) || !localSocketSupported {
		return func() {}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return func() {}
	}
	sock := socketPath(abs)
	api, err := newLocalAPI(rt, cfg)
	var l *net.UnixListener
	var fi os.FileInfo
	if err == nil {
		l, fi, err = listenLocal(sock)
	}
	if err != nil {
		fmt.Fprintf(stderr, "toolgate: not serving the CLI on a local socket: %v; 'toolgate intent approve' and the like fail while this process holds the database\n", userError{err})
		return func() {}
	}
	ls := &localSocket{path: sock, fi: fi, done: make(chan struct{}),
		hs: &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}}
	go func() {
		defer close(ls.done)
		_ = ls.hs.Serve(&peerListener{UnixListener: l, uid: os.Getuid(), stderr: stderr})
	}()
	_ = setHolderSocket(path, sock) // only the CLI's choice depends on it
	after := context.AfterFunc(ctx, ls.stop)
	return func() { after(); ls.stop() }
}

// stop stops serving, lets the requests being answered finish (a decision
// is one transaction of the store: it is recorded whole or not at all),
// and removes the socket if it is still this one.
func (ls *localSocket) stop() {
	ls.once.Do(func() {
		// The holder file keeps naming the socket: the store removes the
		// file when it closes, which may be now (a rewrite here could
		// bring it back), and a socket that is gone is not used.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if ls.hs.Shutdown(ctx) != nil {
			ls.hs.Close()
		}
		<-ls.done
		if fi, err := os.Lstat(ls.path); err == nil && os.SameFile(fi, ls.fi) {
			os.Remove(ls.path)
		}
	})
}

// listenLocal listens on a Unix socket at path, mode 0600. What is at path
// already is left alone (an error) unless it is a socket nothing answers
// on: one left by a holder that died (this process holds the database, so
// its previous holder is gone).
func listenLocal(path string) (*net.UnixListener, os.FileInfo, error) {
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() != fs.ModeSocket:
		return nil, nil, fmt.Errorf("%s exists and is not a socket (%s): it is left alone", path, fileKind(fi))
	case err == nil:
		c, derr := net.DialTimeout("unix", path, time.Second)
		if derr == nil {
			c.Close()
			return nil, nil, fmt.Errorf("another process listens on %s: it is left alone", path)
		}
		if !errors.Is(derr, syscall.ECONNREFUSED) {
			return nil, nil, fmt.Errorf("%s: %v", path, derr)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) { // stale
			return nil, nil, err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, nil, err
	}
	// Bound in a private directory, made 0600 there, then linked to its
	// name: no other user can connect before the mode is set, and a link
	// never replaces what appeared at the name meanwhile.
	dir, err := os.MkdirTemp(filepath.Dir(path), "."+filepath.Base(path)+".")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	if len(tmp) > maxSocketPath || len(path) > maxSocketPath {
		return nil, nil, fmt.Errorf("the path of the database is too long for a Unix socket next to it (%d bytes at most)", maxSocketPath-len(tmp)+len(path))
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	l.SetUnlinkOnClose(false)
	if err = os.Chmod(tmp, 0o600); err == nil {
		err = os.Link(tmp, path)
	}
	if err == nil {
		fi, err = os.Lstat(path)
	}
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	return l, fi, nil
}

func fileKind(fi os.FileInfo) string {
	switch t := fi.Mode().Type(); {
	case t == fs.ModeSymlink:
		return "a symbolic link"
	case t == 0:
		return "a file"
	case t == fs.ModeDir:
		return "a directory"
	}
	return "not a socket"
}

// peerListener accepts the connections of processes of uid (or root)
// only; the others are closed unanswered, and said on stderr.
type peerListener struct {
	*net.UnixListener
	uid    int
	stderr io.Writer
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.UnixListener.Accept()
		if err != nil {
			return nil, err
		}
		uid, pid, err := peerCred(c)
		if err == nil && (uid == l.uid || uid == 0) {
			return c, nil
		}
		c.Close()
		if err == nil {
			fmt.Fprintf(l.stderr, "toolgate: local socket: refused a connection of uid %d (pid %d): only uid %d is served\n", uid, pid, l.uid)
		}
	}
}

// localAPI is the HTTP API of the local socket: toolgate's (package
// server), as the principal a request names, an approver; and beside it
// what the CLI needs that the API has no endpoint for.
type localAPI struct {
	rt     *tgruntime.Runtime
	cfg    server.Config // the limits; its tokens are replaced
	secret string        // the one bearer token of each principal's server
	mux    *http.ServeMux

	mu      sync.Mutex
	servers map[string]http.Handler // by principal
}

// maxLocalPrincipals bounds the servers kept, one per principal.
const maxLocalPrincipals = 64

func newLocalAPI(rt *tgruntime.Runtime, cfg *server.Config) (*localAPI, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	a := &localAPI{rt: rt, secret: hex.EncodeToString(b), mux: http.NewServeMux(), servers: map[string]http.Handler{}}
	if cfg != nil {
		a.cfg = *cfg
	}
	a.cfg.Notify = server.NotifyConfig{} // the holder's own server notifies, once
	a.mux.HandleFunc("GET /v1/intents", a.listIntents)
	a.mux.HandleFunc("GET /v1/intents/{id}", a.getIntent)
	a.mux.HandleFunc("POST /v1/intents/{id}/approve", a.decide)
	a.mux.HandleFunc("POST /v1/intents/{id}/reject", a.decide)
	a.mux.HandleFunc("GET /v1/executions", a.listExecutions)
	a.mux.HandleFunc("/", a.forward)
	return a, nil
}

func (a *localAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	who := r.Header.Get(principalHeader)
	if who == "" {
		writeLocalErr(w, http.StatusBadRequest, errors.New("name the principal in the "+principalHeader+" header"))
		return
	}
	if err := tgruntime.CheckIdentity(who, ""); err != nil {
		writeLocalErr(w, http.StatusBadRequest, err)
		return
	}
	a.mux.ServeHTTP(w, r)
}

// forward serves toolgate's HTTP API as the request's principal.
func (a *localAPI) forward(w http.ResponseWriter, r *http.Request) {
	who := r.Header.Get(principalHeader)
	a.mu.Lock()
	h := a.servers[who]
	a.mu.Unlock()
	if h == nil {
		cfg := a.cfg
		cfg.Tokens = []server.TokenConfig{{Principal: who, SHA256: server.HashToken(a.secret), Approver: true}}
		srv, err := server.New(a.rt, &cfg, nil)
		if err != nil {
			writeLocalErr(w, http.StatusBadRequest, err)
			return
		}
		h = srv.Handler()
		a.mu.Lock()
		if len(a.servers) < maxLocalPrincipals {
			a.servers[who] = h
		}
		a.mu.Unlock()
	}
	r.Header.Set("Authorization", "Bearer "+a.secret)
	r.Header.Del("Cookie")
	h.ServeHTTP(w, r)
}

// localIntent is an intent as the local socket shows it: what it would
// run (with the holder's registry), what the audit log does not prove,
// and the command that runs it once approved.
type localIntent struct {
	intentView
	Discrepancies []tgruntime.Discrepancy `json:"discrepancies,omitempty"`
	RunHint       string                  `json:"runHint,omitempty"`
}

func (a *localAPI) view(ctx context.Context, it *tgruntime.Intent) (*localIntent, error) {
	ds, err := a.rt.VerifyIntent(ctx, it)
	if err != nil {
		return nil, err
	}
	return &localIntent{intentView: viewOf(a.rt.Registry(), it), Discrepancies: ds, RunHint: runHint(a.rt.Registry(), it)}, nil
}

func (a *localAPI) listIntents(w http.ResponseWriter, r *http.Request) {
	all, err := a.rt.Intents(r.Context(), tgruntime.IntentFilter{Status: r.URL.Query().Get("status")})
	if err != nil {
		writeLocalErr(w, http.StatusInternalServerError, err)
		return
	}
	writeLocalJSON(w, all)
}

func (a *localAPI) getIntent(w http.ResponseWriter, r *http.Request) {
	it, err := a.rt.Intent(r.Context(), r.PathValue("id"))
	var v *localIntent
	if err == nil {
		v, err = a.view(r.Context(), it)
	}
	if err != nil {
		writeLocalErr(w, http.StatusInternalServerError, err)
		return
	}
	writeLocalJSON(w, v)
}

// decideRequest is the body of an approval ({"hash"}: the intent shown)
// or a rejection ({"reason"}).
type decideRequest struct {
	Hash   string `json:"hash"`
	Reason string `json:"reason"`
}

func (a *localAPI) decide(w http.ResponseWriter, r *http.Request) {
	var req decideRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
		writeLocalErr(w, http.StatusBadRequest, fmt.Errorf("the request's body is not JSON: %v", err))
		return
	}
	id, who := r.PathValue("id"), r.Header.Get(principalHeader)
	var it *tgruntime.Intent
	var err error
	if strings.HasSuffix(r.URL.Path, "/reject") {
		it, err = a.rt.Reject(r.Context(), id, who, req.Reason)
	} else if it, err = a.rt.Intent(r.Context(), id); err == nil {
		if it.Hash != req.Hash { // not the intent the approver was shown
			err = &tgruntime.IntentError{Code: "intent_hash_mismatch", IntentID: id, Reason: "the intent is not the one shown (its hash differs)"}
		} else {
			it, err = a.rt.Approve(r.Context(), id, who)
		}
	}
	var v *localIntent
	if err == nil {
		v, err = a.view(r.Context(), it)
	}
	if err != nil {
		writeLocalErr(w, http.StatusInternalServerError, err)
		return
	}
	writeLocalJSON(w, v)
}

func (a *localAPI) listExecutions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	recs, err := a.rt.Executions(r.Context(), txn.Filter{State: q.Get("state"), ToolID: q.Get("tool"), CallID: q.Get("call")})
	if err != nil {
		writeLocalErr(w, http.StatusInternalServerError, err)
		return
	}
	if recs == nil {
		recs = []*txn.Record{}
	}
	writeLocalJSON(w, recs)
}

// localError is an error on the local socket: an intent's refusal with
// its code, or another error's message.
type localError struct {
	Code     string `json:"code,omitempty"` // an IntentError's
	IntentID string `json:"intentId,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Detail   string `json:"detail"`
}

func writeLocalErr(w http.ResponseWriter, status int, err error) {
	e := localError{Detail: tgruntime.Message(err)}
	var ie *tgruntime.IntentError
	if errors.As(err, &ie) {
		e.Code, e.IntentID, e.Reason = ie.Code, ie.IntentID, ie.Reason
		status = http.StatusConflict
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(e)
}

func writeLocalJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// localClient asks the holder of the database on its local socket.
type localClient struct {
	sock   string
	pid    int // the holder's
	holder *dbHolder
	hc     *http.Client
}

// localProbe bounds connecting to the local socket and its first answer:
// a holder that does not answer in time is not waited for. Generous: a
// holder busy on a loaded machine must not be taken for a stopped one.
const localProbe = 5 * time.Second

// localRequest bounds every later request: a holder that stopped
// answering after the probe (stopped, or wedged) is not waited for
// forever.
const localRequest = 30 * time.Second

// localClient returns a client of the local socket of the database's
// holder, or nil when there is none to use: no holder with a socket, a
// socket served by another user or process, or one that does not answer
// (said on stderr). The command then opens the database as before.
func (g *globals) localClient(ctx context.Context, stderr io.Writer) *localClient {
	path, err := g.dbPath()
	if err != nil || txn.IsPostgresURL(path) || !localSocketSupported {
		return nil
	}
	h := readHolder(path)
	abs, aerr := filepath.Abs(path)
	if h == nil || h.Socket == "" || aerr != nil || h.Socket != socketPath(abs) { // only the socket next to the database
		return nil
	}
	c := &localClient{sock: h.Socket, pid: h.PID, holder: h}
	c.hc = &http.Client{Transport: &http.Transport{DialContext: c.dial, MaxIdleConns: 1, IdleConnTimeout: 30 * time.Second}}
	pctx, cancel := context.WithTimeout(ctx, localProbe)
	defer cancel()
	if err := c.do(pctx, http.MethodGet, "/healthz", principal(), nil, nil); err != nil {
		var na *noAnswer
		if errors.As(err, &na) {
			err = na.cause
		}
		fmt.Fprintf(stderr, "toolgate: not asking the database's holder (pid %d) through its socket %s: %v\n", h.PID, h.Socket, userError{err})
		return nil
	}
	return c
}

// dial connects to the socket, which must be served by this user (or
// root) and by the holder's process.
func (c *localClient) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	d := net.Dialer{Timeout: localProbe}
	conn, err := d.DialContext(ctx, "unix", c.sock)
	if err != nil {
		return nil, err
	}
	uid, pid, err := peerCred(conn)
	switch {
	case err != nil:
	case uid != os.Getuid() && uid != 0:
		err = fmt.Errorf("it is served by uid %d, not by this user", uid)
	case pid != c.pid:
		err = fmt.Errorf("it is served by pid %d, not by the database's holder", pid)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// noAnswer: the holder did not answer a request it was sent (or was not
// asked: its socket did not pass the checks of dial).
type noAnswer struct{ cause error }

func (e *noAnswer) Error() string {
	return "the database's holder did not answer on its socket: " + e.cause.Error()
}

// noAnswerErr is the noAnswer of err, an error of http.Client.Do, in the
// user's terms.
func noAnswerErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = errors.New("no answer in time")
	}
	return &noAnswer{err}
}

// do sends a request as principal who with body (nil: none) and decodes
// the answer into out (nil: ignored). A refusal of an intent is its
// *tgruntime.IntentError; another error answered is an error with the
// holder's message; no answer is a *noAnswer.
func (c *localClient) do(ctx context.Context, method, path, who string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, localRequest)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://toolgate"+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set(principalHeader, who)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return noAnswerErr(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return noAnswerErr(err)
	}
	if resp.StatusCode >= 300 {
		var e localError
		if json.Unmarshal(b, &e) != nil || (e.Detail == "" && e.Code == "") {
			return fmt.Errorf("the holder answered %s", resp.Status)
		}
		if e.Code != "" {
			return &tgruntime.IntentError{Code: e.Code, IntentID: e.IntentID, Reason: e.Reason}
		}
		return errors.New(e.Detail)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("the holder's answer does not parse: %v", err)
	}
	return nil
}

// get is do for a GET of path with query q.
func (c *localClient) get(ctx context.Context, path string, q url.Values, out any) error {
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return c.do(ctx, http.MethodGet, path, principal(), nil, out)
}

// note says on stderr that the command goes through the holder.
// runAdvice says how an intent approved through the holder is run: the
// database is held, so 'toolgate run' cannot open it until the holder
// stops; an MCP session's agent runs it with toolgate.execute_intent, a
// server's client through its HTTP API.
func (c *localClient) runAdvice(id, hash, hint string) string {
	h := c.holder
	who := fmt.Sprintf("`%s` (pid %d)", commandLine(h.Command), h.PID)
	switch h.API {
	case "mcp":
		return fmt.Sprintf("%s holds the database, so 'toolgate run' cannot open it while it runs: the agent connected to it runs the intent by calling the tool %s with {\"id\": %q, \"hash\": %q}; or, once that session has ended: %s",
			who, mcp.ExecuteIntentTool, id, hash, hint)
	case "http":
		return fmt.Sprintf("%s holds the database, so 'toolgate run' cannot open it while it runs: run it through the server: POST http://%s/v1/intents/%s/execute with {\"hash\": %q} and a token; or, once the server has stopped: %s",
			who, clean(h.Addr), id, hash, hint)
	}
	return fmt.Sprintf("run it once %s has finished with: %s (or add --wait 5m to wait for it)", who, hint)
}

func (c *localClient) note(w io.Writer) {
	fmt.Fprintf(w, "toolgate: the database is held by pid %d: asked through its socket %s\n", c.pid, c.sock)
}

// localErr maps an error of the local socket to the command's exit: an
// intent's refusal as intentErr does, no answer saying that whether a
// decision was recorded is unknown.
func localErr(err error, decision bool) error {
	switch {
	case errors.As(err, new(*tgruntime.IntentError)):
		return intentErr(err)
	case errors.As(err, new(*noAnswer)) && decision:
		return internalErr(fmt.Errorf("%v; whether the decision was recorded is unknown: 'toolgate intent show ID' says", err))
	}
	return internalErr(err)
}
