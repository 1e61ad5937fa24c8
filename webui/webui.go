// Package webui is toolgate's web UI for the people who approve intents:
// the pending intents as they arrive, exactly what each would run and
// whether the policy allows it, a decision in one click, the executions
// with their lifecycle, and the state of the audit log. `toolgate serve`
// mounts it under /ui/ beside the HTTP API (server.Options.Handlers).
//
// It is server-rendered (html/template, embedded assets, no build step,
// nothing fetched from the network). A person logs in once with a token of
// its [Config] (`toolgate serve` gives it the tokens of its config file,
// the HTTP API's) and gets a session cookie (HttpOnly, SameSite=Strict,
// Secure over TLS, expiring; the session itself is kept in memory, under a
// random id). Every form that changes something carries the session's CSRF
// token, and every answer has a Content-Security-Policy that allows no
// inline script and nothing from another origin. The one script, served as
// a file, refreshes the pending intents; nothing needs it. Failed logins
// are limited per client address and overall (LoginLimits); the lists
// show a page at a time; the audit page's verification, which reads the
// whole store, runs once for all its views (Options.AuditMaxAge).
//
// What a token sees is what the HTTP API shows it: an approver every intent
// and execution, any other principal only its own; only approvers decide
// intents and see the audit page.
//
// The UI does not own its runtime: it reads and decides through it while
// the runtime's owner keeps it open, and the owner closes it (after the
// HTTP server that mounts the UI has shut down).
package webui

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/audit"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
)

// prefix is where the UI is served.
const prefix = "/ui/"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// csp allows this origin's own files and nothing else: no inline script
// or style, no other origin, no framing.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Options configure the UI; zero fields mean their defaults.
type Options struct {
	// JaegerURL is the address of a Jaeger UI (such as
	// http://localhost:16686): an execution's trace id links to
	// JaegerURL/trace/ID. "" means no link.
	JaegerURL string
	// SessionTTL is how long a login lasts; default 8h.
	SessionTTL time.Duration
	// Checkpoint returns the last audit checkpoint, which the audit page
	// checks the log against; nil means none is configured.
	Checkpoint func() (*audit.Checkpoint, error)
	// Logger receives what the operator must act on (a page that could not
	// be rendered); nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// AuditMaxAge is how long the audit page shows a verification of the
	// store before a view runs another (each reads the whole store; one
	// runs at a time); default a minute. A changed checkpoint, or its
	// "Verify now" button, runs one whatever the age.
	AuditMaxAge time.Duration
	// LoginLimits bound failed logins (token guessing); zero fields mean
	// their defaults.
	LoginLimits LoginLimits
}

// UI serves the web UI.
type UI struct {
	rt       *tgruntime.Runtime
	read     *tgruntime.Reader // what the pages show: rt's reader
	cfg      Config            // hashes in lowercase
	opts     Options
	sessions *sessions
	logins   *loginLimiter
	audits   auditRuns
	pages    map[string]*template.Template
	mux      *http.ServeMux
	log      *slog.Logger
}

// New returns the UI of rt, logged in to with the tokens of cfg (copied).
// A token whose hash is not 64 hex digits, whose principal is empty or not
// one toolgate can record, or that is listed twice, is an error.
func New(rt *tgruntime.Runtime, cfg *Config, opts *Options) (*UI, error) {
	if rt == nil || cfg == nil {
		return nil, errors.New("webui: a runtime and a config are required")
	}
	c, err := cfg.check()
	if err != nil {
		return nil, err
	}
	u := &UI{rt: rt, read: rt.Reader, cfg: c, mux: http.NewServeMux()}
	if opts != nil {
		u.opts = *opts
	}
	if u.opts.SessionTTL <= 0 {
		u.opts.SessionTTL = 8 * time.Hour
	}
	if u.opts.AuditMaxAge <= 0 {
		u.opts.AuditMaxAge = time.Minute
	}
	if u.opts.Now == nil {
		u.opts.Now = time.Now
	}
	u.log = u.opts.Logger
	if u.log == nil {
		u.log = slog.Default()
	}
	if j := u.opts.JaegerURL; j != "" {
		p, err := url.Parse(j)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, fmt.Errorf("webui: the Jaeger URL %q is not an http or https URL", j)
		}
		u.opts.JaegerURL = strings.TrimSuffix(j, "/")
	}
	u.sessions = newSessions(u.opts.SessionTTL, u.opts.Now)
	u.logins = newLoginLimiter(u.opts.LoginLimits, u.opts.Now)
	if err := u.parse(); err != nil {
		return nil, err
	}
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix(prefix+"static/", http.FileServerFS(static))
	routes := []struct {
		pattern string
		h       http.HandlerFunc
	}{
		{"GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, prefix+"intents", http.StatusSeeOther)
		}},
		{"GET /ui/static/", files.ServeHTTP},
		{"GET /ui/login", u.loginPage},
		{"POST /ui/login", u.login},
		{"POST /ui/logout", u.authed(u.logout)},
		{"GET /ui/intents", u.authed(u.intentsPage)},
		{"GET /ui/intents/live", u.authed(u.intentsLive)},
		{"GET /ui/intents/{id}", u.authed(u.intentPage)},
		{"POST /ui/intents/{id}/approve", u.authed(u.decide(true))},
		{"POST /ui/intents/{id}/reject", u.authed(u.decide(false))},
		{"GET /ui/executions", u.authed(u.executionsPage)},
		{"GET /ui/executions/{id}", u.authed(u.executionPage)},
		{"GET /ui/audit", u.authed(u.auditPage)},
		{"POST /ui/audit/verify", u.authed(u.auditNow)},
	}
	for _, rt := range routes {
		u.mux.HandleFunc(rt.pattern, rt.h)
	}
	u.mux.HandleFunc("/ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, prefix, http.StatusSeeOther) })
	u.mux.HandleFunc(prefix, func(w http.ResponseWriter, r *http.Request) {
		u.fail(w, r, nil, http.StatusNotFound, "No such page.")
	})
	return u, nil
}

// ServeHTTP serves the UI's paths (/ui/...).
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			u.log.Error("ui: a page failed", "path", r.URL.Path, "panic", fmt.Sprint(p))
			http.Error(w, "internal error", http.StatusInternalServerError) // never a stack
		}
	}()
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if !strings.HasPrefix(r.URL.Path, prefix+"static/") {
		h.Set("Cache-Control", "no-store")
	}
	if r.Method == http.MethodPost && r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		// A form posted from another site: refused whatever it carries.
		u.fail(w, r, nil, http.StatusForbidden, "This form was sent from another site.")
		return
	}
	u.mux.ServeHTTP(w, r)
}

// Handler returns the UI's handler, to mount at /ui/.
func (u *UI) Handler() http.Handler { return u }

// authed passes the request's live session on, or sends the browser to the
// login page (a POST without one is refused).
func (u *UI) authed(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		x := u.sessions.get(r)
		switch {
		case x == nil && r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/live"):
			http.Redirect(w, r, prefix+"login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		case x == nil:
			clearCookie(w, r)
			u.fail(w, r, nil, http.StatusUnauthorized, "Your session has ended: log in again.")
			return
		}
		server.NotePrincipal(w, x.who.Principal)
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if err := r.ParseForm(); err != nil || !x.validCSRF(r.PostForm.Get("csrf")) {
				u.fail(w, r, x, http.StatusForbidden, "This form has expired or did not come from this page: reload the page and try again.")
				return
			}
		}
		h(w, r, x)
	}
}

func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) {
	if u.sessions.get(r) != nil {
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	u.render(w, r, nil, http.StatusOK, "login", map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

// maxForm bounds a form's body: a token, a reason.
const maxForm = 64 << 10

func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		u.fail(w, r, nil, http.StatusBadRequest, "The form could not be read.")
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	addr := clientAddr(r)
	done, wait, overall := u.logins.admit(addr)
	if done == nil {
		// Too many failures: the token is not looked at, whatever it is.
		secs := retryAfter(wait)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		msg := "Too many failed logins from your address: try again in " + inWords(secs) + "."
		if overall {
			msg = "Too many failed logins on this server: try again in " + inWords(secs) + "."
		}
		u.render(w, r, nil, http.StatusTooManyRequests, "login", map[string]any{"Next": next, "Error": msg})
		return
	}
	who, ok := u.cfg.authenticate(strings.TrimSpace(r.PostForm.Get("token")))
	if limited := done(!ok); !ok {
		u.log.Warn("ui login refused: unknown token", "client", addr, "remote", r.RemoteAddr, "limited", limited)
		u.render(w, r, nil, http.StatusUnauthorized, "login", map[string]any{"Next": next, "Error": "That token is not known to this server."})
		return
	}
	x := u.sessions.create(who)
	if x == nil {
		u.fail(w, r, nil, http.StatusServiceUnavailable, "Too many sessions: try again later.")
		return
	}
	u.sessions.setCookie(w, r, x)
	server.NotePrincipal(w, who.Principal)
	u.log.Info("ui login", "principal", who.Principal, "approver", who.Approver)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (u *UI) logout(w http.ResponseWriter, r *http.Request, x *session) {
	u.sessions.end(x.id)
	clearCookie(w, r)
	http.Redirect(w, r, prefix+"login", http.StatusSeeOther)
}

// safeNext is where to go after logging in: a path of the UI, never
// another site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, prefix) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return prefix + "intents"
	}
	return next
}

// ctx bounds the store reads of a page.
func (u *UI) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 30*time.Second)
}
