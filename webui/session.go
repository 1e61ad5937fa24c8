package webui

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"
)

// cookieName is the session cookie. Its value is the session's random id;
// everything else (who, until when, the CSRF token) is kept here.
const cookieName = "toolgate_session"

// maxSessions bounds the session store: a login past it, once the expired
// sessions are swept, is refused.
const maxSessions = 10000

// session is one login.
type session struct {
	id      string
	who     Token
	csrf    string
	expires time.Time
}

// sessions is the server-side store of logins, in memory: a restart logs
// everyone out.
type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	ttl time.Duration
	now func() time.Time
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{m: map[string]*session{}, ttl: ttl, now: now}
}

// randomID is 32 random bytes, URL-safe base64.
func randomID() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand panics rather than return an error)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session for who; nil when the store is full.
func (s *sessions) create(who Token) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.m) >= maxSessions {
		for id, x := range s.m {
			if !now.Before(x.expires) {
				delete(s.m, id)
			}
		}
		if len(s.m) >= maxSessions {
			return nil
		}
	}
	x := &session{id: randomID(), who: who, csrf: randomID(), expires: now.Add(s.ttl)}
	s.m[x.id] = x
	return x
}

// get returns the live session of r's cookie, or nil.
func (s *sessions) get(r *http.Request) *session {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.m[c.Value]
	if x == nil {
		return nil
	}
	if !s.now().Before(x.expires) {
		delete(s.m, x.id)
		return nil
	}
	return x
}

// end ends a session.
func (s *sessions) end(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

// validCSRF reports whether token is the session's CSRF token.
func (x *session) validCSRF(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(x.csrf)) == 1
}

// overTLS reports whether the browser reached us over TLS: directly, or
// through a reverse proxy that says so (X-Forwarded-Proto: https). A
// forged header can only make the cookie stricter (Secure).
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https")
}

// setCookie sets the session cookie: HttpOnly, SameSite=Strict, Secure
// over TLS, expiring with the session.
func (s *sessions) setCookie(w http.ResponseWriter, r *http.Request, x *session) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: x.id, Path: prefix,
		Expires: x.expires, MaxAge: int(x.expires.Sub(s.now()).Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r),
	})
}

// clearCookie removes the session cookie from the browser.
func clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: "", Path: prefix, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r),
	})
}
